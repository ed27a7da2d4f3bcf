// Tiered tables against the same table in memory, through the public C API (docs/disk-tier.md,
// issue 62): the training step of one row-wise Adagrad table (400k rows, dim 32, fp32, row-wise
// sharded over the world) read by one feature (1024 samples per rank, bags of 16 Zipf ids), in
// memory and tiered with a cache of 10 % of each shard's rows, each with plain forwards and with
// the pipelined input distribution (the tiered run then reads the next batch's misses while the
// previous batch trains). Between the forward and the backward of each step runs a model's dense
// part (tiered_dense_work.h), identically in both runs: `dlrm`, examples/dlrm's dense model
// (bottom MLP, dot interaction, top MLP, loss, dense gradient average and Adam on OpenBLAS)
// taking the pooled embeddings and giving the embedding backward their gradients (its bottom
// MLP's backward, gradient average and optimizer step follow the embedding backward, in
// dlrm_model.c's order), or a stand-in of `dense_ms` milliseconds: a wait (`sleep`: the dense
// model on an accelerator, the host CPU free) or a busy loop (`spin`: the dense model on this
// rank's CPU thread). That is where a prefetch overlaps; with no dense work nothing runs between
// the next batch's input distribution and its forward but the backward. `blas` sets OpenBLAS's
// threads (shardrec_dense_set_blas_threads, process-wide); 0 keeps the library's default.
// The modes run interleaved, in rounds, each on a fresh collection per rank (ranks are threads
// over an in-process group) with 10 warm-up steps before the timed ones; printed per Zipf
// exponent: the median step of rank 0 in each mode over the rounds (with the smallest and
// largest round ratios), tiered over memory, rank 0's dense part per step (mean over the timed
// steps, median over the rounds) in memory and tiered (dense_mem, dense_tier), the hit rate,
// disk reads, bytes read per disk read and the exposed fetch wait per step (the time a forward
// waited for rows from disk or the write-back queue) and the share of misses read one batch
// ahead (pf), summed over the ranks.
// Then CPU time, which a machine shared with other work measures more steadily than wall time:
// the process's CPU ms per timed step (every thread of every rank, while rank 0 ran its timed
// steps) in memory and tiered, their ratio (cpu_x), and rank 0's own thread's CPU ms per step
// tiered (rank_cpu: the collection's thread, where a miss's work is on the step's path); last the
// rows written back per step (summed over the ranks) and the most records rank 0's write-back
// queue held at once (qmax; at its capacity, the cache's slots, evictions wait for the writer).
//
// Each step reads a batch of its own (none replayed).
//
// `table` fresh (the default) starts each run on a new table, whose rows are drawn when first
// read and whose store index grows as they are first written back: a fresh table's costs.
// `steady` first writes every row back once (the table's own initial weights read and set again,
// in both runs alike), so every miss is a disk read and the index has stopped growing: what a
// long run pays per step.
//
// With TIERED_STEP_BENCH_WINDOWS set, each run prints to stderr the CLOCK_MONOTONIC span of rank
// 0's timed steps, to cut a profile (`perf record -k CLOCK_MONOTONIC`) to them.
//
// Usage: tiered_step_bench [rounds=3] [dense_ms=0] [world=1] [sleep|spin|dlrm]
//                          [alphas=0.8,1.05,1.2] [blas=0] [fresh|steady]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/bench/capi_bench_util.h"
#include "tests/bench/tiered_bench_util.h"
#include "tests/bench/tiered_dense_work.h"

namespace {

using shardrec::bench::Check;
using shardrec::bench::OneTablePlan;
using Clock = std::chrono::steady_clock;

constexpr int64_t kRows = 400000;
constexpr int32_t kDim = 32;
constexpr int64_t kBatch = 1024;
constexpr int32_t kBag = 16;
constexpr int kWarmup = 10;
constexpr int kSteps = 40;
// Distinct batches, more than the steps: none is replayed, since a replayed batch would find its
// rows written back together (one page read for many misses) and flatter the disk tier.
constexpr int kBatches = kWarmup + kSteps + 2;

struct Batch {
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
};

std::vector<Batch> MakeBatches(double alpha, uint64_t seed) {
  std::vector<double> cdf(kRows);
  double sum = 0;
  for (int64_t k = 0; k < kRows; ++k)
    cdf[k] = (sum += std::pow(static_cast<double>(k + 1), -alpha));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, sum);
  std::vector<Batch> out(kBatches);
  for (Batch& b : out) {
    b.lengths.assign(kBatch, kBag);
    for (int64_t i = 0; i < kBatch * kBag; ++i) {
      const auto rank = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      // Hot ranks spread over the table, not its first rows.
      b.ids.push_back(static_cast<int64_t>(static_cast<uint64_t>(shardrec::bench::Scatter(rank)) %
                                           static_cast<uint64_t>(kRows)));
    }
  }
  return out;
}

shardrec_kjt_view_t View(const Batch& b) {
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = kBatch;
  v.num_features = 1;
  v.lengths = b.lengths.data();
  v.num_lengths = b.lengths.size();
  v.values = b.ids.data();
  v.values_dtype = SHARDREC_DTYPE_INT64;
  v.num_values = b.ids.size();
  return v;
}

struct Options {
  int world = 1;
  double dense_ms = 0;
  bool spin = false;
  bool dlrm = false;
  bool steady = false;
};

// This rank's dense model (a fresh one per run, as the collection).
std::unique_ptr<shardrec::bench::DenseWork> MakeDense(const Options& opt, shardrec_comm_t* comm,
                                                      int rank) {
  if (opt.dlrm) return shardrec::bench::MakeDlrmDense(comm, kBatch, kDim, 11 + rank);
  return shardrec::bench::MakeStandInDense(opt.dense_ms, opt.spin, kBatch, kDim);
}

// CPU seconds of the whole process (every rank, worker, prefetch and writer thread) or of the
// calling thread; or seconds of CLOCK_MONOTONIC.
double CpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Result {
  double median_step = 0;         // rank 0's
  double process_cpu = 0;         // per timed step, while rank 0 ran its timed steps
  double thread_cpu = 0;          // per timed step, rank 0's own thread
  double dense = 0;               // per timed step, rank 0's dense part
  shardrec_tier_stats_t stats{};  // summed over the ranks (hit_rate recomputed)
};

// kSteps timed training steps (after kWarmup) of a fresh collection per rank.
Result Run(const shardrec_plan_t* plan, const std::vector<shardrec_comm_t*>& comms,
           const std::vector<shardrec_comm_t*>& dense_comms,
           const std::vector<std::vector<Batch>>& batches, bool tiered, bool pipelined,
           const std::string& dir, const Options& opt) {
  const int world = opt.world;
  std::vector<double> median(world);
  double process_cpu = 0, thread_cpu = 0, dense_seconds = 0;
  std::vector<shardrec_tier_stats_t> stats(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      const std::string rank_dir = dir + "/rank" + std::to_string(r);
      shardrec_table_tier_t tier = SHARDREC_TABLE_TIER_INIT;
      tier.table = "t";
      tier.dir = rank_dir.c_str();
      // 10 % of this rank's shard: 32 fp32 weights, 1 row-wise Adagrad float, 32 B of metadata.
      tier.cache_bytes = kRows / world / 10 * (kDim * 4 + 4 + 32);
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      if (tiered) {
        o.tiers = &tier;
        o.num_tiers = 1;
      }
      shardrec_embedding_t* c = nullptr;
      Check(shardrec_embedding_create(&c, plan, comms[r], nullptr, &o), "create");
      if (opt.steady) {
        // Collective: every rank reads the whole table and sets it again, the same values.
        std::vector<float> weights(static_cast<size_t>(kRows) * kDim);
        Check(shardrec_embedding_get_weights(c, "t", weights.data(), weights.size()), "get");
        Check(shardrec_embedding_set_weights(c, "t", weights.data(), weights.size()), "set");
      }
      std::unique_ptr<shardrec::bench::DenseWork> dense = MakeDense(opt, dense_comms[r], r);
      std::vector<float> out(kBatch * kDim), grad(kBatch * kDim);
      std::vector<double> steps;
      double dense_sum = 0;
      const std::vector<Batch>& mine = batches[r];
      auto view = [&](int s) { return View(mine[static_cast<size_t>(s) % mine.size()]); };
      if (pipelined) {
        const shardrec_kjt_view_t v = view(0);
        Check(shardrec_embedding_input_dist_start(c, &v, nullptr), "start");
      }
      double cpu0 = 0, thread0 = 0, mono0 = 0;
      for (int s = 0; s < kWarmup + kSteps; ++s) {
        if (r == 0 && s == kWarmup) {
          cpu0 = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
          thread0 = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
          mono0 = CpuSeconds(CLOCK_MONOTONIC);
        }
        const auto t0 = Clock::now();
        if (pipelined) {
          Check(shardrec_embedding_input_dist_wait(c, nullptr), "wait");
          Check(shardrec_embedding_forward_distributed(c, out.data(), out.size(), nullptr), "fwd");
          const shardrec_kjt_view_t v = view(s + 1);
          Check(shardrec_embedding_input_dist_start(c, &v, nullptr), "start");
        } else {
          const shardrec_kjt_view_t v = view(s);
          Check(shardrec_embedding_forward(c, &v, out.data(), out.size(), nullptr), "fwd");
        }
        const auto d0 = Clock::now();
        dense->ForwardBackward(out.data(), grad.data());
        auto dense_step = Clock::now() - d0;
        Check(shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr), "bwd");
        const auto d1 = Clock::now();
        dense->Finish();
        const auto t1 = Clock::now();
        dense_step += t1 - d1;
        if (s >= kWarmup) {
          steps.push_back(std::chrono::duration<double>(t1 - t0).count());
          dense_sum += std::chrono::duration<double>(dense_step).count();
        }
      }
      if (r == 0) {
        process_cpu = (CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / kSteps;
        thread_cpu = (CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - thread0) / kSteps;
        dense_seconds = dense_sum / kSteps;
        if (std::getenv("TIERED_STEP_BENCH_WINDOWS") != nullptr)
          std::fprintf(stderr, "window %s %s %.6f %.6f\n", tiered ? "tiered" : "memory",
                       pipelined ? "pipelined" : "plain", mono0, CpuSeconds(CLOCK_MONOTONIC));
      }
      if (pipelined) {
        Check(shardrec_embedding_input_dist_wait(c, nullptr), "wait");
        Check(shardrec_embedding_forward_distributed(c, out.data(), out.size(), nullptr), "fwd");
      }
      std::sort(steps.begin(), steps.end());
      median[r] = steps[steps.size() / 2];
      if (tiered) {
        shardrec_tier_stats_init(&stats[r], SHARDREC_TIER_STATS_VERSION);
        Check(shardrec_embedding_tier_stats(c, "t", &stats[r]), "stats");
      }
      shardrec_embedding_destroy(c);
    });
  }
  for (auto& t : ranks) t.join();
  Result res;
  res.median_step = median[0];
  res.process_cpu = process_cpu;
  res.thread_cpu = thread_cpu;
  res.dense = dense_seconds;
  if (tiered) {
    res.stats = stats[0];
    for (int r = 1; r < world; ++r) {
      res.stats.hits += stats[r].hits;
      res.stats.misses += stats[r].misses;
      res.stats.disk_reads += stats[r].disk_reads;
      res.stats.disk_read_bytes += stats[r].disk_read_bytes;
      res.stats.exposed_fetch_seconds += stats[r].exposed_fetch_seconds;
      res.stats.prefetched += stats[r].prefetched;
      res.stats.write_backs += stats[r].write_backs;
    }
    const double seen = static_cast<double>(res.stats.hits + res.stats.misses);
    res.stats.hit_rate = seen > 0 ? static_cast<double>(res.stats.hits) / seen : 0;
  }
  return res;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  Options opt;
  opt.dense_ms = argc > 2 ? std::atof(argv[2]) : 0.0;
  opt.world = argc > 3 ? std::atoi(argv[3]) : 1;
  const std::string mode = argc > 4 ? argv[4] : "sleep";
  opt.spin = mode == "spin";
  opt.dlrm = mode == "dlrm";
  std::vector<double> alphas{0.8, 1.05, 1.2};
  if (argc > 5) {
    alphas.clear();
    std::stringstream list(argv[5]);
    for (std::string a; std::getline(list, a, ',');) alphas.push_back(std::atof(a.c_str()));
  }
  const int blas = argc > 6 ? std::atoi(argv[6]) : 0;
  const std::string table = argc > 7 ? argv[7] : "fresh";
  opt.steady = table == "steady";
  if (rounds < 1 || opt.world < 1 || opt.world > 8 || opt.dense_ms < 0 || alphas.empty() ||
      (mode != "sleep" && mode != "spin" && mode != "dlrm") || (opt.dlrm && opt.dense_ms > 0) ||
      blas < 0 || (table != "fresh" && table != "steady")) {
    std::fprintf(
        stderr,
        "usage: tiered_step_bench [rounds>=1] [dense_ms>=0] [world 1..8] [sleep|spin|dlrm]"
        " [alphas, comma-separated] [blas threads>=0, 0: the library's default] [fresh|steady]\n"
        "(dlrm runs examples/dlrm's dense model: dense_ms 0)\n");
    return 2;
  }
  if (blas > 0) Check(shardrec_dense_set_blas_threads(blas), "blas threads");
  int32_t blas_threads = 0;
  Check(shardrec_dense_blas_threads(&blas_threads), "blas threads");
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/shardrec_tiered_bench";
  shardrec_table_constraints_t rw = SHARDREC_TABLE_CONSTRAINTS_INIT;
  rw.table = "t";
  rw.sharding_types = 1u << SHARDREC_SHARDING_ROW_WISE;
  shardrec_plan_t* plan = OneTablePlan(kRows, kDim, kBag, opt.world, kBatch, &rw, 1);
  std::vector<shardrec_comm_t*> comms(opt.world, nullptr);
  Check(shardrec_comm_create_local_group(comms.data(), opt.world, nullptr), "comm");
  // The dense gradients average over a group of their own, as over a mesh's global group.
  std::vector<shardrec_comm_t*> dense_comms(opt.world, nullptr);
  Check(shardrec_comm_create_local_group(dense_comms.data(), opt.world, nullptr), "dense comm");
  std::printf(
      "rows %lld dim %d, world %d (row-wise), batch %lld x bag %d per rank, cache 10%% of each "
      "shard's rows, dense work %s, BLAS threads %d, %s table, %d rounds of %d steps\n",
      static_cast<long long>(kRows), kDim, opt.world, static_cast<long long>(kBatch), kBag,
      opt.dlrm ? "examples/dlrm's dense model"
               : (std::to_string(opt.dense_ms) + " ms (" + mode + ")").c_str(),
      blas_threads, opt.steady ? "steady" : "fresh", rounds, kSteps);
  std::printf(
      "%-5s %-9s %10s %10s %12s %7s %9s %10s %6s %10s %9s %11s %6s %8s %8s %7s %8s %8s %7s\n",
      "alpha", "forward", "memory_ms", "tiered_ms", "ratio_range", "ratio", "dense_mem",
      "dense_tier", "hit", "disk/step", "B/read", "exposed_ms", "pf", "mem_cpu", "tier_cpu",
      "cpu_x", "rank_cpu", "wb/step", "qmax");
  for (double alpha : alphas) {
    std::vector<std::vector<Batch>> batches;
    for (int r = 0; r < opt.world; ++r) batches.push_back(MakeBatches(alpha, 7 + r));
    for (bool pipelined : {false, true}) {
      std::vector<double> mem, tier, ratio, mem_cpu, tier_cpu, rank_cpu, mem_dense, tier_dense;
      shardrec_tier_stats_t last{};
      for (int r = 0; r < rounds; ++r) {
        std::filesystem::remove_all(dir);
        const Result m = Run(plan, comms, dense_comms, batches, false, pipelined, dir, opt);
        const Result x = Run(plan, comms, dense_comms, batches, true, pipelined, dir, opt);
        mem.push_back(m.median_step);
        tier.push_back(x.median_step);
        ratio.push_back(x.median_step / m.median_step);
        mem_cpu.push_back(m.process_cpu);
        tier_cpu.push_back(x.process_cpu);
        rank_cpu.push_back(x.thread_cpu);
        mem_dense.push_back(m.dense);
        tier_dense.push_back(x.dense);
        last = x.stats;
      }
      const double steps = static_cast<double>(last.steps);
      std::printf(
          "%-5.2f %-9s %10.2f %10.2f %5.2f..%-5.2f %7.3f %9.2f %10.2f %6.3f %10.0f %9.0f %11.3f "
          "%6.2f %8.2f %8.2f %7.2f %8.2f %8.0f %7lld\n",
          alpha, pipelined ? "pipelined" : "plain", Median(mem) * 1e3, Median(tier) * 1e3,
          *std::min_element(ratio.begin(), ratio.end()),
          *std::max_element(ratio.begin(), ratio.end()), Median(ratio), Median(mem_dense) * 1e3,
          Median(tier_dense) * 1e3, last.hit_rate, static_cast<double>(last.disk_reads) / steps,
          last.disk_reads > 0
              ? static_cast<double>(last.disk_read_bytes) / static_cast<double>(last.disk_reads)
              : 0.0,
          last.exposed_fetch_seconds / steps * 1e3,
          last.misses > 0 ? static_cast<double>(last.prefetched) / static_cast<double>(last.misses)
                          : 0.0,
          Median(mem_cpu) * 1e3, Median(tier_cpu) * 1e3, Median(tier_cpu) / Median(mem_cpu),
          Median(rank_cpu) * 1e3, static_cast<double>(last.write_backs) / steps,
          static_cast<long long>(last.queue_max_depth));
      std::fflush(stdout);
    }
  }
  std::filesystem::remove_all(dir);
  for (shardrec_comm_t* c : comms) shardrec_comm_destroy(c);
  for (shardrec_comm_t* c : dense_comms) shardrec_comm_destroy(c);
  shardrec_plan_destroy(plan);
  return 0;
}
