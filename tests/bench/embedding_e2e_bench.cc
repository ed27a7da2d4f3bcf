// End-to-end forward and training step through the public C API on the side-by-side
// configuration (performance-anchors.md section 7.3, and tools/torchrec_compare): 8 tables of
// 100k-1M rows, dims 64 and 128, 2048 samples per rank, bags of ~20 ids, row-wise Adagrad.
// World 1 with 2 threads, and world 2 (ranks as threads) with 1 thread each. Reports samples/s,
// ms per forward / step (wall, and the process's CPU time per step: cpu_ms), the phase split of
// the step, and the lookup's rate against the random-row gather roof measured in the same run.
// BM_E2E_QComms runs the step at world 2 and 4 with the embedding collectives exact (fp32) and
// encoded as bf16 or fp16 (embedding.h, shardrec_comm_encoding_t), interleaved trial by trial,
// and reports each step time, the share of the exact step spent in the embedding collectives,
// and the time bf16 saved as a fraction of that share, twice: from the difference of the step
// medians, and as the median of the paired differences (the fp32 and bf16 steps of one iteration
// run back to back, so a slow stretch of a shared machine shifts both and drops out of their
// difference).
#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTables = 8;
constexpr int64_t kBatch = 2048;
constexpr int kBag = 20;

struct TableSpec {
  int64_t rows;
  int32_t dim;
};
const TableSpec kSpecs[kTables] = {{1000000, 128}, {500000, 64},  {200000, 128}, {100000, 64},
                                   {1000000, 64},  {300000, 128}, {100000, 128}, {700000, 64}};

void Check(shardrec_status_t rc, const char* what) {
  if (rc != SHARDREC_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, shardrec_last_error());
    std::abort();
  }
}

struct Rank {
  shardrec_embedding_t* coll = nullptr;
  std::vector<std::vector<int32_t>> lengths;  // per batch in rotation
  std::vector<std::vector<int64_t>> ids;
  std::vector<float> out, grad;
  int64_t dim = 0;
};

struct World {
  int size = 1;
  shardrec_plan_t* plan = nullptr;
  std::vector<shardrec_comm_t*> comms;
  std::vector<Rank> ranks;
};

World* MakeWorld(int world, int threads, int32_t encoding = SHARDREC_COMM_ENCODING_FP32) {
  auto* w = new World;
  w->size = world;
  std::vector<std::string> names;
  for (int t = 0; t < kTables; ++t) names.push_back("t" + std::to_string(t));
  std::vector<shardrec_feature_config_t> features(kTables);
  std::vector<shardrec_table_config_t> tables(kTables);
  std::vector<int32_t> feature_of(kTables);
  for (int t = 0; t < kTables; ++t) {
    shardrec_feature_config_init(&features[t], SHARDREC_FEATURE_CONFIG_VERSION);
    features[t].name = names[t].c_str();
    features[t].pooling_factor = kBag;
    feature_of[t] = t;
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    tables[t].name = names[t].c_str();
    tables[t].rows = kSpecs[t].rows;
    tables[t].dim = kSpecs[t].dim;
    tables[t].features = &feature_of[t];
    tables[t].num_features = 1;
  }
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = world;
  topo.batch_size = static_cast<int32_t>(kBatch);
  topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  Check(shardrec_plan_create(&w->plan, tables.data(), kTables, features.data(), kTables, &topo,
                             nullptr, 0),
        "plan");
  w->comms.assign(world, nullptr);
  Check(shardrec_comm_create_local_group(w->comms.data(), world, nullptr), "comms");
  w->ranks.resize(world);
  std::vector<std::thread> creators;
  for (int r = 0; r < world; ++r) {
    creators.emplace_back([w, r, threads, encoding] {
      Rank& rank = w->ranks[r];
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      o.num_threads = threads;
      o.forward_comm_encoding = encoding;
      o.backward_comm_encoding = encoding;
      Check(shardrec_embedding_create(&rank.coll, w->plan, w->comms[r], nullptr, &o), "create");
      shardrec_embedding_output_dim(rank.coll, &rank.dim);
      std::mt19937_64 rng(17 + r);
      for (int k = 0; k < 4; ++k) {
        std::vector<int32_t> lengths;
        std::vector<int64_t> ids;
        for (int t = 0; t < kTables; ++t)
          for (int64_t b = 0; b < kBatch; ++b) {
            const int32_t len = kBag - 4 + static_cast<int32_t>(rng() % 9);
            lengths.push_back(len);
            for (int32_t i = 0; i < len; ++i)
              ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(kSpecs[t].rows)));
          }
        rank.lengths.push_back(std::move(lengths));
        rank.ids.push_back(std::move(ids));
      }
      rank.out.assign(static_cast<size_t>(kBatch * rank.dim), 0.0f);
      rank.grad.assign(rank.out.size(), 1e-4f);
    });
  }
  for (auto& t : creators) t.join();
  return w;
}

shardrec_kjt_view_t View(const Rank& r, int k) {
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = kBatch;
  v.num_features = kTables;
  v.lengths = r.lengths[k].data();
  v.num_lengths = r.lengths[k].size();
  v.values = r.ids[k].data();
  v.values_dtype = SHARDREC_DTYPE_INT64;
  v.num_values = r.ids[k].size();
  return v;
}

// Runs fn(rank) on every rank (threads) and returns the wall time.
template <typename Fn>
double OnRanks(World* w, Fn&& fn) {
  const auto t0 = Clock::now();
  if (w->size == 1) {
    fn(0);
  } else {
    std::vector<std::thread> ts;
    for (int r = 0; r < w->size; ++r) ts.emplace_back([&fn, r] { fn(r); });
    for (auto& t : ts) t.join();
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void Report(benchmark::State& state, World* w, const std::vector<double>& times, bool step) {
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  state.counters["median_ms"] = median * 1e3;
  state.counters["samples/s"] = static_cast<double>(kBatch * w->size) / median;
  shardrec_step_timings_t t;
  shardrec_step_timings_init(&t, SHARDREC_STEP_TIMINGS_VERSION);
  shardrec_embedding_step_timings(w->ranks[0].coll, &t);
  const double n = static_cast<double>(std::max<int64_t>(t.forwards, 1));
  state.counters["input_dist_ms"] = 1e3 * t.input_dist_seconds / n;
  state.counters["lookup_ms"] = 1e3 * t.lookup_seconds / n;
  state.counters["output_dist_ms"] = 1e3 * t.output_dist_seconds / n;
  if (step) state.counters["backward_ms"] = 1e3 * t.backward_seconds / n;
  state.counters["collective_ms"] = 1e3 * t.collective_seconds / n;
  if (w->size < 2) return;
  // The last rank too: its compute and waits differ from rank 0's when the plan is unbalanced.
  shardrec_step_timings_t u;
  shardrec_step_timings_init(&u, SHARDREC_STEP_TIMINGS_VERSION);
  shardrec_embedding_step_timings(w->ranks[w->size - 1].coll, &u);
  const double m = static_cast<double>(std::max<int64_t>(u.forwards, 1));
  state.counters["last_lookup_ms"] = 1e3 * u.lookup_seconds / m;
  if (step) state.counters["last_backward_ms"] = 1e3 * u.backward_seconds / m;
  state.counters["last_collective_ms"] = 1e3 * u.collective_seconds / m;
}

// CPU seconds of the whole process (every rank's and pool's threads) so far.
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void Run(benchmark::State& state, bool step) {
  const int world = static_cast<int>(state.range(0));
  World* w = MakeWorld(world, world == 1 ? 2 : 1);
  std::vector<double> times;
  int k = 0;
  const double cpu0 = ProcessCpuSeconds();
  for (auto _ : state) {
    const int batch = k++ % 4;
    const double dt = OnRanks(w, [&](int r) {
      Rank& rank = w->ranks[r];
      const shardrec_kjt_view_t v = View(rank, batch);
      Check(shardrec_embedding_forward(rank.coll, &v, rank.out.data(), rank.out.size(), nullptr),
            "forward");
      if (step)
        Check(shardrec_embedding_backward(rank.coll, rank.grad.data(), rank.grad.size(), nullptr),
              "backward");
    });
    state.SetIterationTime(dt);
    times.push_back(dt);
  }
  // On a shared machine the CPU time moves less with the load than the wall time (a descheduled
  // thread costs wall time only); it counts any wait that spins, too.
  state.counters["cpu_ms"] =
      1e3 * (ProcessCpuSeconds() - cpu0) / static_cast<double>(std::max<size_t>(times.size(), 1));
  Report(state, w, times, step);
  for (auto& r : w->ranks) shardrec_embedding_destroy(r.coll);
  for (auto* c : w->comms) shardrec_comm_destroy(c);
  shardrec_plan_destroy(w->plan);
  delete w;
}

void BM_E2E_Forward(benchmark::State& state) { Run(state, false); }
void BM_E2E_Step(benchmark::State& state) { Run(state, true); }

void Destroy(World* w) {
  for (auto& r : w->ranks) shardrec_embedding_destroy(r.coll);
  for (auto* c : w->comms) shardrec_comm_destroy(c);
  shardrec_plan_destroy(w->plan);
  delete w;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Each rank's seconds in the embedding collectives since creation.
std::vector<double> EmbeddingCommSeconds(World* w) {
  std::vector<double> out;
  for (Rank& r : w->ranks) {
    shardrec_step_timings_t t;
    shardrec_step_timings_init(&t, SHARDREC_STEP_TIMINGS_VERSION);
    shardrec_embedding_step_timings(r.coll, &t);
    out.push_back(t.embedding_comm_seconds);
  }
  return out;
}

// The training step with exact, bf16 and fp16 embedding collectives: three collections of the
// same plan and data (one at a time in memory would re-create tables per trial, so all three
// live together), stepped in turn so that the machine's load drifts over all of them alike.
// Counters: median step per encoding; the embedding collectives' time per step, taken on the
// rank that spent least in them (the last to arrive, so the time is the exchange itself and not
// waiting for a slower peer); the exact step's share of it; and bf16_saving_of_share =
// (exact - bf16 step) / (exact embedding-collective time), and bf16_paired_saving_of_share from
// the paired differences: the target is >= 1/3.
void BM_E2E_QComms(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const int32_t encodings[3] = {SHARDREC_COMM_ENCODING_FP32, SHARDREC_COMM_ENCODING_BF16,
                                SHARDREC_COMM_ENCODING_FP16};
  World* ws[3];
  for (int e = 0; e < 3; ++e) ws[e] = MakeWorld(world, 1, encodings[e]);
  std::vector<double> times[3], comm[3];
  int k = 0;
  for (auto _ : state) {
    const int batch = k++ % 4;
    double total = 0;
    // The encodings take turns going first, so no encoding always runs on the caches another left.
    for (int j = 0; j < 3; ++j) {
      const int e = (j + k) % 3;
      World* w = ws[e];
      const std::vector<double> c0 = EmbeddingCommSeconds(w);
      const double dt = OnRanks(w, [&](int r) {
        Rank& rank = w->ranks[r];
        const shardrec_kjt_view_t v = View(rank, batch);
        Check(shardrec_embedding_forward(rank.coll, &v, rank.out.data(), rank.out.size(), nullptr),
              "forward");
        Check(shardrec_embedding_backward(rank.coll, rank.grad.data(), rank.grad.size(), nullptr),
              "backward");
      });
      times[e].push_back(dt);
      const std::vector<double> c1 = EmbeddingCommSeconds(w);
      double least = c1[0] - c0[0];
      for (size_t r = 1; r < c1.size(); ++r) least = std::min(least, c1[r] - c0[r]);
      comm[e].push_back(least);
      total += dt;
    }
    state.SetIterationTime(total);
  }
  const double exact = Median(times[0]), bf16 = Median(times[1]), fp16 = Median(times[2]);
  const double a2a = Median(comm[0]);
  std::vector<double> paired_bf16, paired_fp16;
  for (size_t i = 0; i < times[0].size(); ++i) {
    paired_bf16.push_back(times[0][i] - times[1][i]);
    paired_fp16.push_back(times[0][i] - times[2][i]);
  }
  state.counters["fp32_step_ms"] = exact * 1e3;
  state.counters["bf16_step_ms"] = bf16 * 1e3;
  state.counters["fp16_step_ms"] = fp16 * 1e3;
  state.counters["fp32_emb_comm_ms"] = a2a * 1e3;
  state.counters["bf16_emb_comm_ms"] = Median(comm[1]) * 1e3;
  state.counters["fp16_emb_comm_ms"] = Median(comm[2]) * 1e3;
  state.counters["emb_comm_share"] = a2a / exact;
  state.counters["bf16_saving_of_share"] = a2a > 0 ? (exact - bf16) / a2a : 0.0;
  state.counters["fp16_saving_of_share"] = a2a > 0 ? (exact - fp16) / a2a : 0.0;
  state.counters["bf16_paired_saving_of_share"] = a2a > 0 ? Median(paired_bf16) / a2a : 0.0;
  state.counters["fp16_paired_saving_of_share"] = a2a > 0 ? Median(paired_fp16) / a2a : 0.0;
  for (World* w : ws) Destroy(w);
}

BENCHMARK(BM_E2E_Forward)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(30)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_E2E_Step)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(30)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// 90 trials: the saving is a few percent of the step, the same order as a shared VM's drift.
BENCHMARK(BM_E2E_QComms)
    ->Arg(2)
    ->Arg(4)
    ->Iterations(90)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
