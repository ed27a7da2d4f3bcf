// DLRM end to end on the CPU through the public C API (the model of examples/dlrm, issue 12):
// training steps of the example's default model (13 dense features, 26 Criteo-shaped tables
// capped at 100k rows, dim 16, bottom 64-32-16, dot interaction, top 128-64-1, Adam + row-wise
// Adagrad, 256 samples per rank) at 1, 2 and 4 ranks as threads over Gloo, with rank 0's
// phase split per step. Ranks run with one BLAS thread each (as the example does).
//
// Limit measured in the same run: the MLPs' forward and backward are GEMMs, so their time in
// the step is compared with OpenBLAS's own cblas_sgemm on exactly those shapes (one thread,
// best of 20), called directly: mlp_vs_sgemm = sgemm time / MLP time (1 = at the GEMM roof).
// The end-to-end samples/s has no single roof on this machine (it is mostly communication over
// loopback and embedding work); it is reported as absolute samples/s with the phase split.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dlrm_data.h"
#include "dlrm_model.h"
#include "rank_threads.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kBatch = 256, kRotation = 8, kWarmup = 3;

void Check(shardrec_status_t rc, const char* what) {
  if (rc != SHARDREC_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, shardrec_last_error());
    std::abort();
  }
}

// ---- The GEMM roof: cblas_sgemm of the library's own OpenBLAS ------------------------------

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

SgemmFn LoadSgemm() {
  const char* env = std::getenv("SHARDREC_BLAS_LIBRARY");
  void* h = dlopen(env != nullptr && *env ? env : "libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return nullptr;
  return reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
}

struct Gemm {
  bool ta, tb;
  int m, n, k;
};

// The GEMMs of one MLP's forward and backward as impl/dense/linear.cc issues them: y = x W^T,
// dW += dy^T x, and dx = dy W for every layer but the first when the input needs no gradient.
void MlpGemms(int in, const std::vector<int>& widths, bool first_needs_dx, std::vector<Gemm>* g) {
  for (size_t l = 0; l < widths.size(); ++l) {
    const int out = widths[l];
    g->push_back({false, true, kBatch, out, in});
    g->push_back({true, false, out, in, kBatch});
    if (l > 0 || first_needs_dx) g->push_back({false, false, kBatch, in, out});
    in = out;
  }
}

// Seconds for one pass over the GEMMs, best of 20, on the calling thread.
double SgemmSeconds(SgemmFn sgemm, const std::vector<Gemm>& gemms) {
  size_t most = 0;
  for (const auto& g : gemms) {
    most = std::max({most, static_cast<size_t>(g.m) * g.k, static_cast<size_t>(g.k) * g.n,
                     static_cast<size_t>(g.m) * g.n});
  }
  std::vector<float> a(most, 0.5f), b(most, 0.25f), c(most, 0.0f);
  double best = 1e30;
  for (int rep = 0; rep < 20; ++rep) {
    const auto t0 = Clock::now();
    for (const auto& g : gemms) {
      sgemm(kRowMajor, g.ta ? kTrans : kNoTrans, g.tb ? kTrans : kNoTrans, g.m, g.n, g.k, 1.0f,
            a.data(), g.ta ? g.m : g.k, b.data(), g.tb ? g.k : g.n, 1.0f, c.data(), g.n);
    }
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  benchmark::DoNotOptimize(c.data());
  return best;
}

// ---- The DLRM step ------------------------------------------------------------------------

struct Rank {
  dlrm_t* model = nullptr;
  std::vector<std::vector<float>> dense, labels;
  std::vector<std::vector<int64_t>> ids;
};

void BM_DlrmStep(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0)), shard = static_cast<int>(state.range(1));
  const int sync = static_cast<int>(state.range(2));
  static int64_t rows[26];
  for (int f = 0; f < 26; ++f) rows[f] = std::min<int64_t>(kCriteoRows[f], 100000);
  Check(shardrec_dense_set_blas_threads(1), "blas threads");
  std::vector<shardrec_comm_t*> comms(world);
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  Check(shardrec_comm_create_local_group(comms.data(), world, &o), "comm group");
  std::vector<Rank> ranks(world);
  shardrec::bench::RankThreads threads(world);
  const dlrm_synth_t data = {7, 13, 26, rows};
  threads.Run([&](int r) {
    dlrm_config_t c;
    dlrm_config_defaults(&c);
    c.rows = rows;
    c.shard_size = shard;
    c.local_batch = kBatch;
    c.seed = 7;
    c.sync_interval = sync;
    // The example's bucket sizes: this small model's gradients travel in three buckets.
    c.first_bucket_bytes = 32 << 10;
    c.bucket_cap_bytes = 128 << 10;
    Check(dlrm_create(&ranks[r].model, &c, comms[r]), "dlrm_create");
    // Batches are generated before timing and rotated, so the generator is not measured.
    for (int k = 0; k < kRotation; ++k) {
      ranks[r].dense.emplace_back(kBatch * 13);
      ranks[r].ids.emplace_back(kBatch * 26);
      ranks[r].labels.emplace_back(kBatch);
      dlrm_synth_fill(&data, static_cast<uint64_t>((k * world + r) * kBatch), kBatch,
                      ranks[r].dense[k].data(), ranks[r].ids[k].data(), ranks[r].labels[k].data());
    }
  });
  int step = 0;
  auto train = [&](int r) {
    Rank& rk = ranks[r];
    const int k = step % kRotation;
    double loss = 0;
    Check(dlrm_train_step(rk.model, rk.dense[k].data(), rk.ids[k].data(), rk.labels[k].data(),
                          &loss, nullptr),
          "dlrm_train_step");
  };
  for (; step < kWarmup; ++step) threads.Run(train);
  const dlrm_timings_t t0 = *dlrm_timings(ranks[0].model);
  for (auto _ : state) {
    threads.Run(train);
    ++step;
  }
  const dlrm_timings_t t1 = *dlrm_timings(ranks[0].model);
  const double n = static_cast<double>(t1.steps - t0.steps) / 1e3;  // -> ms per step
  auto per_step = [&](double a, double b) { return benchmark::Counter((b - a) / n); };
  state.counters["samples_per_s"] = benchmark::Counter(
      static_cast<double>(kBatch) * world, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["input_dist_ms"] = per_step(t0.input_dist, t1.input_dist);
  state.counters["lookup_ms"] = per_step(t0.lookup, t1.lookup);
  state.counters["output_dist_ms"] = per_step(t0.output_dist, t1.output_dist);
  state.counters["dense_fwd_ms"] =
      per_step(t0.bottom_fwd + t0.interaction_fwd + t0.top_fwd + t0.loss,
               t1.bottom_fwd + t1.interaction_fwd + t1.top_fwd + t1.loss);
  state.counters["dense_bwd_ms"] = per_step(t0.top_bwd + t0.interaction_bwd + t0.bottom_bwd,
                                            t1.top_bwd + t1.interaction_bwd + t1.bottom_bwd);
  state.counters["emb_bwd_ms"] = per_step(t0.embedding_bwd, t1.embedding_bwd);
  state.counters["dense_sync_ms"] = per_step(t0.dense_sync_wait, t1.dense_sync_wait);
  state.counters["dense_opt_ms"] = per_step(t0.dense_optimizer, t1.dense_optimizer);
  state.counters["sync_2d_ms"] = per_step(t0.replica_sync, t1.replica_sync);
  state.counters["step_ms"] = per_step(t0.total, t1.total);
  // The MLPs alone (not the interaction) against cblas_sgemm on the same shapes.
  const double mlp_ms = ((t1.bottom_fwd + t1.top_fwd + t1.top_bwd + t1.bottom_bwd) -
                         (t0.bottom_fwd + t0.top_fwd + t0.top_bwd + t0.bottom_bwd)) /
                        n;
  state.counters["mlp_ms"] = mlp_ms;
  if (SgemmFn sgemm = LoadSgemm()) {
    std::vector<Gemm> gemms;
    MlpGemms(13, {64, 32, 16}, false, &gemms);
    MlpGemms(16 + 26 * 27 / 2, {128, 64, 1}, true, &gemms);
    const double sgemm_ms = 1e3 * SgemmSeconds(sgemm, gemms);
    state.counters["sgemm_ms"] = sgemm_ms;
    state.counters["mlp_vs_sgemm"] = sgemm_ms / mlp_ms;
  }
  threads.Run([&](int r) { dlrm_destroy(ranks[r].model); });
  for (auto* c : comms) shardrec_comm_destroy(c);
}

// {world, sharding group size, replica sync interval}: one rank; 2 ranks sharding every table 2
// ways; the example's default 2D layout (2 replica groups x 2-way sharding), syncing the
// replicas every step (exact) and every 10 steps; 4-way 1D sharding for comparison.
BENCHMARK(BM_DlrmStep)
    ->Args({1, 1, 1})
    ->Args({2, 2, 1})
    ->Args({4, 2, 1})
    ->Args({4, 2, 10})
    ->Args({4, 4, 1})
    ->ArgNames({"world", "shard", "sync_every"})
    ->Iterations(40)
    ->Repetitions(3)
    ->ReportAggregatesOnly(false)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
