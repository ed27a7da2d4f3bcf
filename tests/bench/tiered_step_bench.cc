// Tiered tables against the same table in memory, through the public C API (docs/disk-tier.md,
// issue 62): the training step of one row-wise Adagrad table (400k rows, dim 32, fp32) read by
// one feature (1024 samples, bags of 16 Zipf ids), in memory and tiered with a cache of 10 % of
// its rows, each with plain forwards and with the pipelined input distribution (the tiered run
// then reads the next batch's misses while the previous batch trains). World 1. The modes run
// interleaved, in rounds, each on a fresh collection with 10 warm-up steps before the timed ones;
// printed per Zipf exponent: the median step of each mode over the rounds (with the smallest and
// largest round medians), tiered over memory, the hit rate, disk reads and the exposed fetch wait
// per step (the time a forward waited for rows from disk or the write-back queue).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/bench/capi_bench_util.h"

namespace {

using shardrec::bench::Check;
using Clock = std::chrono::steady_clock;

constexpr int64_t kRows = 400000;
constexpr int32_t kDim = 32;
constexpr int64_t kBatch = 1024;
constexpr int32_t kBag = 16;
constexpr int kWarmup = 10;
constexpr int kSteps = 40;
constexpr int kBatches = 16;  // distinct batches, replayed in turn

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

struct Result {
  double median_step = 0;
  shardrec_tier_stats_t stats{};
  bool tiered = false;
};

// kSteps timed training steps (after kWarmup) of a fresh collection; per-step median seconds.
Result Run(const shardrec_plan_t* plan, shardrec_comm_t* comm, const std::vector<Batch>& batches,
           bool tiered, bool pipelined, const std::string& dir) {
  shardrec_table_tier_t tier = SHARDREC_TABLE_TIER_INIT;
  tier.table = "t";
  tier.dir = dir.c_str();
  // A cached row: 32 fp32 weights, 1 row-wise Adagrad float, 32 bytes of metadata.
  tier.cache_bytes = kRows / 10 * (kDim * 4 + 4 + 32);
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  if (tiered) {
    o.tiers = &tier;
    o.num_tiers = 1;
  }
  shardrec_embedding_t* c = nullptr;
  Check(shardrec_embedding_create(&c, plan, comm, nullptr, &o), "create");
  std::vector<float> out(kBatch * kDim), grad(kBatch * kDim, 0.01f);
  std::vector<double> steps;
  auto view = [&](int s) { return View(batches[static_cast<size_t>(s) % batches.size()]); };
  if (pipelined) {
    const shardrec_kjt_view_t v = view(0);
    Check(shardrec_embedding_input_dist_start(c, &v, nullptr), "start");
  }
  for (int s = 0; s < kWarmup + kSteps; ++s) {
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
    Check(shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr), "bwd");
    if (s >= kWarmup) steps.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (pipelined) {
    Check(shardrec_embedding_input_dist_wait(c, nullptr), "wait");
    Check(shardrec_embedding_forward_distributed(c, out.data(), out.size(), nullptr), "fwd");
  }
  Result r;
  std::sort(steps.begin(), steps.end());
  r.median_step = steps[steps.size() / 2];
  r.tiered = tiered;
  if (tiered) {
    shardrec_tier_stats_init(&r.stats, SHARDREC_TIER_STATS_VERSION);
    Check(shardrec_embedding_tier_stats(c, "t", &r.stats), "stats");
  }
  shardrec_embedding_destroy(c);
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/shardrec_tiered_bench";
  shardrec_feature_config_t f;
  shardrec_feature_config_init(&f, SHARDREC_FEATURE_CONFIG_VERSION);
  f.name = "f";
  f.pooling_factor = kBag;
  int32_t feature = 0;
  shardrec_table_config_t t;
  shardrec_table_config_init(&t, SHARDREC_TABLE_CONFIG_VERSION);
  t.name = "t";
  t.rows = kRows;
  t.dim = kDim;
  t.features = &feature;
  t.num_features = 1;
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = 1;
  topo.batch_size = static_cast<int32_t>(kBatch);
  topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  shardrec_plan_t* plan = nullptr;
  Check(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, nullptr, 0), "plan");
  shardrec_comm_t* comm = nullptr;
  Check(shardrec_comm_create_local_group(&comm, 1, nullptr), "comm");
  std::printf("rows %lld dim %d, batch %lld x bag %d, cache 10%% of rows, %d rounds of %d steps\n",
              static_cast<long long>(kRows), kDim, static_cast<long long>(kBatch), kBag, rounds,
              kSteps);
  std::printf("%-5s %-9s %10s %10s %10s %7s %8s %12s %12s\n", "alpha", "forward", "memory_ms",
              "tiered_ms", "min..max", "ratio", "hit", "disk/step", "exposed_ms");
  for (double alpha : {0.8, 1.05, 1.2}) {
    const std::vector<Batch> batches = MakeBatches(alpha, 7);
    for (bool pipelined : {false, true}) {
      std::vector<double> mem, tier, ratio;
      shardrec_tier_stats_t last{};
      for (int r = 0; r < rounds; ++r) {
        std::filesystem::remove_all(dir);
        const Result m = Run(plan, comm, batches, false, pipelined, dir);
        const Result x = Run(plan, comm, batches, true, pipelined, dir);
        mem.push_back(m.median_step);
        tier.push_back(x.median_step);
        ratio.push_back(x.median_step / m.median_step);
        last = x.stats;
      }
      const double steps = static_cast<double>(last.steps);
      std::printf("%-5.2f %-9s %10.2f %10.2f %4.2f..%-4.2f %7.3f %8.3f %12.0f %12.3f\n", alpha,
                  pipelined ? "pipelined" : "plain", Median(mem) * 1e3, Median(tier) * 1e3,
                  *std::min_element(ratio.begin(), ratio.end()),
                  *std::max_element(ratio.begin(), ratio.end()), Median(ratio), last.hit_rate,
                  static_cast<double>(last.disk_reads) / steps,
                  last.exposed_fetch_seconds / steps * 1e3);
    }
  }
  std::filesystem::remove_all(dir);
  shardrec_comm_destroy(comm);
  shardrec_plan_destroy(plan);
  return 0;
}
