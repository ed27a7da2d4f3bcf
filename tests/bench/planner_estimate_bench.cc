// The planner's estimated training step against the measured one, through the public C API
// (issue 14, "a planner whose estimate matches the clock"). Each case calibrates the topology
// (shardrec_topology_calibrate, ranks as threads of this process), plans, reads the estimate
// from shardrec_plan_stats, then times forward + backward on every rank. Reports est_ms,
// median_ms and their ratio (the target: within 2x), plus the uncalibrated (host default)
// estimate's ratio for comparison.
//
// Cases: "e2e" is embedding_e2e_bench's configuration (8 tables of 100k-1M rows, dims 64/128,
// 2048 samples per rank, bags of ~20, row-wise Adagrad; world 1 with 2 threads, world 2 with 1
// thread per rank); "small" is the calibrate test's model (4 tables of 10k-50k rows, 256
// samples per rank, bags of ~10) at world 1, 2 and 4.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/bench/rank_threads.h"

namespace {

using Clock = std::chrono::steady_clock;

void Check(shardrec_status_t rc, const char* what) {
  if (rc != SHARDREC_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, shardrec_last_error());
    std::abort();
  }
}

struct Model {
  std::vector<int64_t> rows;
  std::vector<int32_t> dims;
  int64_t batch;
  int bag;
};

const Model kE2E{{1000000, 500000, 200000, 100000, 1000000, 300000, 100000, 700000},
                 {128, 64, 128, 64, 64, 128, 128, 64},
                 2048,
                 20};
const Model kSmall{{20000, 50000, 10000, 30000}, {64, 32, 128, 64}, 256, 10};

double EstimatedStepMs(const shardrec_plan_t* plan) {
  char* text = nullptr;
  Check(shardrec_plan_stats(plan, &text, nullptr), "stats");
  const std::string s = text;
  shardrec_free(text);
  // PLANNER_ESTIMATE_STATS=1 prints the stats table of every plan (the estimate's breakdown).
  if (std::getenv("PLANNER_ESTIMATE_STATS") != nullptr) std::printf("%s\n", s.c_str());
  const std::string key = "estimated step cost of the busiest rank: ";
  const size_t at = s.find(key);
  if (at == std::string::npos) std::abort();
  return std::strtod(s.c_str() + at + key.size(), nullptr);
}

shardrec_plan_t* MakePlan(const Model& m, int world, int threads, bool calibrate) {
  const int n = static_cast<int>(m.rows.size());
  std::vector<std::string> names;
  for (int t = 0; t < n; ++t) names.push_back("t" + std::to_string(t));
  std::vector<shardrec_feature_config_t> features(n);
  std::vector<shardrec_table_config_t> tables(n);
  std::vector<int32_t> feature_of(n);
  for (int t = 0; t < n; ++t) {
    features[t] = SHARDREC_FEATURE_CONFIG_INIT;
    features[t].name = names[t].c_str();
    features[t].pooling_factor = static_cast<float>(m.bag);
    feature_of[t] = t;
    tables[t] = SHARDREC_TABLE_CONFIG_INIT;
    tables[t].name = names[t].c_str();
    tables[t].rows = m.rows[t];
    tables[t].dim = m.dims[t];
    tables[t].features = &feature_of[t];
    tables[t].num_features = 1;
  }
  shardrec_topology_t topo = SHARDREC_TOPOLOGY_INIT;
  topo.world_size = world;
  topo.batch_size = static_cast<int32_t>(m.batch);
  topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  if (calibrate) {
    shardrec_calibrate_options_t o = SHARDREC_CALIBRATE_OPTIONS_INIT;
    o.ranks_share_memory = 1;
    o.threads_per_rank = threads;
    Check(shardrec_topology_calibrate(&topo, &o, nullptr), "calibrate");
  }
  shardrec_plan_t* plan = nullptr;
  Check(shardrec_plan_create(&plan, tables.data(), tables.size(), features.data(), features.size(),
                             &topo, nullptr, 0),
        "plan");
  return plan;
}

void Run(benchmark::State& state, const Model& m) {
  const int world = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const int n = static_cast<int>(m.rows.size());
  shardrec_plan_t* plan = MakePlan(m, world, threads, true);
  shardrec_plan_t* uncalibrated = MakePlan(m, world, threads, false);
  const double est = EstimatedStepMs(plan);
  const double est_default = EstimatedStepMs(uncalibrated);
  std::vector<shardrec_comm_t*> comms(world);
  Check(shardrec_comm_create_local_group(comms.data(), world, nullptr), "comms");
  std::vector<shardrec_embedding_t*> colls(world);
  // Four batches per rank in rotation, as embedding_e2e_bench: a repeated batch would find its
  // rows in cache and time a step no training run sees.
  constexpr int kBatches = 4;
  std::vector<std::vector<int32_t>> lengths(world * kBatches);
  std::vector<std::vector<int64_t>> ids(world * kBatches);
  std::vector<std::vector<float>> out(world), grad(world);
  shardrec::bench::RankThreads ranks(world);
  ranks.Run([&](int r) {
    shardrec_embedding_options_t o = SHARDREC_EMBEDDING_OPTIONS_INIT;
    o.num_threads = threads;
    Check(shardrec_embedding_create(&colls[r], plan, comms[r], nullptr, &o), "create");
    int64_t dim = 0;
    shardrec_embedding_output_dim(colls[r], &dim);
    std::mt19937_64 rng(11 + r);
    for (int k = r * kBatches; k < (r + 1) * kBatches; ++k)
      for (int t = 0; t < n; ++t)
        for (int64_t b = 0; b < m.batch; ++b) {
          const int32_t len = m.bag - m.bag / 4 + static_cast<int32_t>(rng() % (m.bag / 2 + 1));
          lengths[k].push_back(len);
          for (int32_t i = 0; i < len; ++i)
            ids[k].push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(m.rows[t])));
        }
    out[r].assign(static_cast<size_t>(m.batch * dim), 0.0f);
    grad[r].assign(out[r].size(), 1e-4f);
  });
  int batch = 0;
  auto step = [&](int r) {
    const int k = r * kBatches + batch % kBatches;
    shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
    v.batch_size = m.batch;
    v.num_features = n;
    v.lengths = lengths[k].data();
    v.num_lengths = lengths[k].size();
    v.values = ids[k].data();
    v.values_dtype = SHARDREC_DTYPE_INT64;
    v.num_values = ids[k].size();
    Check(shardrec_embedding_forward(colls[r], &v, out[r].data(), out[r].size(), nullptr), "fwd");
    Check(shardrec_embedding_backward(colls[r], grad[r].data(), grad[r].size(), nullptr), "bwd");
  };
  for (int i = 0; i < kBatches; ++i, ++batch) ranks.Run(step);  // warm-up: first touches
  std::vector<double> times;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    ranks.Run(step);
    ++batch;
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    state.SetIterationTime(dt);
    times.push_back(dt * 1e3);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  state.counters["est_ms"] = est;
  state.counters["median_ms"] = median;
  state.counters["est/measured"] = est / median;
  state.counters["default_est/measured"] = est_default / median;
  for (auto* c : colls) shardrec_embedding_destroy(c);
  for (auto* c : comms) shardrec_comm_destroy(c);
  shardrec_plan_destroy(plan);
  shardrec_plan_destroy(uncalibrated);
}

void BM_PlannerEstimate_Small(benchmark::State& state) { Run(state, kSmall); }
void BM_PlannerEstimate_E2E(benchmark::State& state) { Run(state, kE2E); }

BENCHMARK(BM_PlannerEstimate_Small)
    ->Args({1, 1})
    ->Args({2, 1})
    ->Args({4, 1})
    ->Iterations(20)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlannerEstimate_E2E)
    ->Args({1, 2})
    ->Args({2, 1})
    ->Iterations(15)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
