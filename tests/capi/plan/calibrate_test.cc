// shardrec_topology_calibrate through the public C API: argument checks, plausible figures
// within the time limit, and the point of it all: with a calibrated topology, the planner's
// estimated step (printed by shardrec_plan_stats) is within a factor of the measured training
// step of a small model (4 tables of 10k-50k rows, 1024 samples per rank, bags of ~10), at
// world 1 and 2 (ranks as threads).
//
// The bound is 4x either way (below: 4x times a sanitizer's slowdown), not the 2x the
// benchmarks report: this model is small (few hundred samples, so fixed costs the model prices
// coarsely weigh more), and the test must hold on a loaded 2-core machine where the step and the
// calibration are disturbed independently.
// Each ratio uses the median of several steps and is retried (fresh calibration) before failing.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/support/slowdown.h"

namespace {

using Clock = std::chrono::steady_clock;

TEST(CapiCalibrate, RejectsBadArgumentsWithoutWriting) {
  shardrec_topology_t topo;
  ASSERT_EQ(shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION), SHARDREC_OK);
  EXPECT_EQ(shardrec_topology_calibrate(nullptr, nullptr, nullptr), SHARDREC_EINVAL);

  shardrec_topology_t v1;
  ASSERT_EQ(shardrec_topology_init(&v1, 1), SHARDREC_OK);
  EXPECT_EQ(shardrec_topology_calibrate(&v1, nullptr, nullptr), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("version"), std::string::npos);
  EXPECT_EQ(v1.memory_bandwidth, 0.0);

  shardrec_calibrate_options_t opts;
  ASSERT_EQ(shardrec_calibrate_options_init(&opts, SHARDREC_CALIBRATE_OPTIONS_VERSION),
            SHARDREC_OK);
  opts.time_budget = -1.0;
  EXPECT_EQ(shardrec_topology_calibrate(&topo, &opts, nullptr), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("time_budget"), std::string::npos);
  opts.time_budget = 0.0;
  shardrec_calibration_t cal = SHARDREC_CALIBRATION_INIT;
  cal.version = 0;
  EXPECT_EQ(shardrec_topology_calibrate(&topo, &opts, &cal), SHARDREC_EINVAL);
  EXPECT_EQ(topo.memory_bandwidth, 0.0);
  EXPECT_EQ(topo.intra_node_bandwidth, 0.0);
  EXPECT_EQ(topo.collective_latency, 0.0);

  topo.collective_latency = -1e-6;
  shardrec_plan_t* plan = nullptr;
  shardrec_feature_config_t f = SHARDREC_FEATURE_CONFIG_INIT;
  f.name = "f";
  int32_t fi = 0;
  shardrec_table_config_t t = SHARDREC_TABLE_CONFIG_INIT;
  t.name = "t";
  t.rows = 10;
  t.dim = 4;
  t.features = &fi;
  t.num_features = 1;
  EXPECT_EQ(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, nullptr, 0), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("collective_latency"), std::string::npos);
  EXPECT_EQ(plan, nullptr);
}

TEST(CapiCalibrate, ReturnsPlausibleFiguresQuickly) {
  for (int share = 0; share < 2; ++share) {
    shardrec_topology_t topo;
    ASSERT_EQ(shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION), SHARDREC_OK);
    shardrec_calibrate_options_t opts = SHARDREC_CALIBRATE_OPTIONS_INIT;
    opts.ranks_share_memory = share;
    shardrec_calibration_t cal;
    ASSERT_EQ(shardrec_calibration_init(&cal, SHARDREC_CALIBRATION_VERSION), SHARDREC_OK);
    const auto t0 = Clock::now();
    ASSERT_EQ(shardrec_topology_calibrate(&topo, &opts, &cal), SHARDREC_OK)
        << shardrec_last_error();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    // Under a second on an idle machine (0.3-0.7 s on the 2-core VM, the shared-memory probe's
    // local group taking 40-70 ms of it); 2 s leaves room for a loaded one (0.9-1.4 s seen at
    // load 4-5).
    EXPECT_LT(wall, 2.0 * shardrec::testing::kSlowdown);
    EXPECT_LE(cal.elapsed, wall);
    EXPECT_GT(cal.elapsed, 0.0);
    // Plausible for any machine that runs this: 100 MB/s .. 1 TB/s, 10 ns .. 10 ms.
    for (double bw : {cal.gather_bandwidth, cal.stream_bandwidth, cal.loopback_bandwidth}) {
      EXPECT_GT(bw, 1e8);
      EXPECT_LT(bw, 1e12);
    }
    for (double s : {cal.loopback_latency, cal.handoff_latency}) {
      EXPECT_GT(s, 1e-8);
      EXPECT_LT(s, 1e-2);
    }
    // Written into the topology, in its units (bytes/s, seconds).
    EXPECT_EQ(topo.memory_bandwidth, cal.gather_bandwidth);
    // One rank is one host: its route (shared memory, as for any one-host group, unless the
    // transport is unavailable: then loopback TCP) prices the collectives; rank threads of a
    // local group also wait on each other.
    EXPECT_EQ(topo.intra_node_bandwidth, cal.shm_used ? cal.shm_bandwidth : cal.loopback_bandwidth);
    EXPECT_DOUBLE_EQ(topo.collective_latency,
                     (cal.shm_used ? cal.shm_latency : cal.loopback_latency) +
                         (share ? cal.handoff_latency : 0.0));
    EXPECT_EQ(topo.inter_node_bandwidth, 0.0);  // not measured: left as it was
    // One rank never oversubscribes: the host default, made explicit.
    EXPECT_EQ(cal.oversubscription, 1.0);
    EXPECT_NEAR(topo.per_id_cost, 15e-9, 1e-15);
  }
}

TEST(CapiCalibrate, OversubscribedRanksScaleThePerIdCost) {
  // The CPUs this process may run on (its affinity mask), as the library counts them.
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  const int cores = CPU_COUNT(&mask);
  shardrec_topology_t topo = SHARDREC_TOPOLOGY_INIT;
  topo.world_size = 2 * cores;
  topo.per_id_cost = 10e-9;
  shardrec_calibrate_options_t opts = SHARDREC_CALIBRATE_OPTIONS_INIT;
  opts.ranks_share_memory = 1;
  shardrec_calibration_t cal = SHARDREC_CALIBRATION_INIT;
  ASSERT_EQ(shardrec_topology_calibrate(&topo, &opts, &cal), SHARDREC_OK) << shardrec_last_error();
  EXPECT_EQ(cal.oversubscription, 2.0);
  EXPECT_EQ(topo.per_id_cost, 10e-9);  // the caller's own value stands
  EXPECT_DOUBLE_EQ(topo.collective_latency,
                   (cal.shm_used ? cal.shm_latency : cal.loopback_latency) + cal.handoff_latency);
  EXPECT_GT(cal.handoff_latency, 0.0);
  // ranks_per_machine overrides the topology's node size (a 2D mesh: several sharding groups
  // on one machine).
  shardrec_topology_t group = SHARDREC_TOPOLOGY_INIT;
  group.world_size = 1;
  shardrec_calibrate_options_t machine = SHARDREC_CALIBRATE_OPTIONS_INIT;
  machine.ranks_share_memory = 1;
  machine.ranks_per_machine = 2 * cores;
  ASSERT_EQ(shardrec_topology_calibrate(&group, &machine, &cal), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(cal.oversubscription, 2.0);
  EXPECT_NEAR(group.per_id_cost, 30e-9, 1e-15);  // the default, scaled
  // Calibrating again does not scale it again.
  ASSERT_EQ(shardrec_topology_calibrate(&group, &machine, nullptr), SHARDREC_OK);
  EXPECT_NEAR(group.per_id_cost, 30e-9, 1e-15);
  // The largest machine the options allow still calibrates as fast as a small one: the gather
  // uses at most one thread per CPU and the barrier at most four per CPU.
  machine.ranks_per_machine = 65536;
  const auto t0 = Clock::now();
  ASSERT_EQ(shardrec_topology_calibrate(&group, &machine, &cal), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(),
            2.0 * shardrec::testing::kSlowdown);
  EXPECT_EQ(cal.oversubscription, 65536.0 / cores);
  EXPECT_GT(cal.gather_bandwidth, 0.0);
  machine.ranks_per_machine = -1;
  EXPECT_EQ(shardrec_topology_calibrate(&group, &machine, nullptr), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("ranks_per_machine"), std::string::npos);
  // A bad ranks_per_node is refused before anything is measured or written.
  shardrec_topology_t bad = SHARDREC_TOPOLOGY_INIT;
  bad.ranks_per_node = 3;  // > world_size 1
  EXPECT_EQ(shardrec_topology_calibrate(&bad, nullptr, nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(bad.memory_bandwidth, 0.0);
  opts.threads_per_rank = 257;
  EXPECT_EQ(shardrec_topology_calibrate(&topo, &opts, nullptr), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("threads_per_rank"), std::string::npos);
}

// The figures of the shared-memory transport: measured, finite and plausible, and the ones the
// topology takes when its ranks share a host; the loopback ones where they cannot (the transport
// turned off, more ranks per host than it serves) and, for the collective latency, where the
// group spans hosts (its own collectives run on Gloo).
TEST(CapiCalibrate, RanksOfOneHostArePricedAtTheSharedMemoryFigures) {
  shardrec_topology_t one_host = SHARDREC_TOPOLOGY_INIT;
  one_host.world_size = 2;
  shardrec_calibration_t cal = SHARDREC_CALIBRATION_INIT;
  ASSERT_EQ(shardrec_topology_calibrate(&one_host, nullptr, &cal), SHARDREC_OK)
      << shardrec_last_error();
  // This machine's /dev/shm holds a segment (the transport tests in tests/impl/comm need it).
  ASSERT_EQ(cal.shm_used, 1);
  EXPECT_TRUE(std::isfinite(cal.shm_bandwidth) && std::isfinite(cal.shm_latency));
  EXPECT_GT(cal.shm_bandwidth, 1e8);
  EXPECT_LT(cal.shm_bandwidth, 1e12);
  EXPECT_GT(cal.shm_latency, 1e-8);
  EXPECT_LT(cal.shm_latency, 1e-2);
  EXPECT_EQ(one_host.intra_node_bandwidth, cal.shm_bandwidth);
  EXPECT_EQ(one_host.collective_latency, cal.shm_latency);  // processes: no hand-off

  // Two hosts of two ranks: the per-host groups use shared memory, the world's collectives Gloo.
  shardrec_topology_t two_hosts = SHARDREC_TOPOLOGY_INIT;
  two_hosts.world_size = 4;
  two_hosts.ranks_per_node = 2;
  ASSERT_EQ(shardrec_topology_calibrate(&two_hosts, nullptr, &cal), SHARDREC_OK);
  EXPECT_EQ(cal.shm_used, 1);
  EXPECT_EQ(two_hosts.intra_node_bandwidth, cal.shm_bandwidth);
  EXPECT_EQ(two_hosts.collective_latency, cal.loopback_latency);

  // More ranks on a host than the transport serves keep Gloo: measured, not used.
  shardrec_topology_t crowded = SHARDREC_TOPOLOGY_INIT;
  crowded.world_size = 17;
  ASSERT_EQ(shardrec_topology_calibrate(&crowded, nullptr, &cal), SHARDREC_OK);
  EXPECT_EQ(cal.shm_used, 0);
  EXPECT_GT(cal.shm_bandwidth, 0.0);
  EXPECT_EQ(crowded.intra_node_bandwidth, cal.loopback_bandwidth);
  EXPECT_EQ(crowded.collective_latency, cal.loopback_latency);

  // With the transport turned off (as its communicators would be), the loopback figures.
  const char* was = std::getenv("SHARDREC_SHM");
  const std::string saved = was != nullptr ? was : "";
  ::setenv("SHARDREC_SHM", "0", 1);
  shardrec_topology_t off = SHARDREC_TOPOLOGY_INIT;
  off.world_size = 2;
  const shardrec_status_t rc = shardrec_topology_calibrate(&off, nullptr, &cal);
  if (was != nullptr)
    ::setenv("SHARDREC_SHM", saved.c_str(), 1);
  else
    ::unsetenv("SHARDREC_SHM");
  ASSERT_EQ(rc, SHARDREC_OK) << shardrec_last_error();
  EXPECT_EQ(cal.shm_used, 0);
  EXPECT_EQ(cal.shm_bandwidth, 0.0);
  EXPECT_EQ(cal.shm_latency, 0.0);
  EXPECT_EQ(off.intra_node_bandwidth, cal.loopback_bandwidth);
  EXPECT_EQ(off.collective_latency, cal.loopback_latency);
}

// A caller built against the version-1 struct has no shared-memory fields: they are not written.
TEST(CapiCalibrate, VersionOneCalibrationGetsNoSharedMemoryFields) {
  shardrec_calibration_t cal;
  cal.shm_bandwidth = -1.0;
  cal.shm_latency = -1.0;
  cal.shm_used = -1;
  ASSERT_EQ(shardrec_calibration_init(&cal, 1), SHARDREC_OK);
  EXPECT_EQ(cal.shm_bandwidth, -1.0);  // init writes only version 1's fields
  shardrec_topology_t topo = SHARDREC_TOPOLOGY_INIT;
  topo.world_size = 2;
  ASSERT_EQ(shardrec_topology_calibrate(&topo, nullptr, &cal), SHARDREC_OK);
  EXPECT_GT(cal.loopback_bandwidth, 0.0);
  EXPECT_EQ(cal.shm_bandwidth, -1.0);
  EXPECT_EQ(cal.shm_latency, -1.0);
  EXPECT_EQ(cal.shm_used, -1);
  EXPECT_EQ(cal.version, 1u);
}

double EstimatedStepMs(const shardrec_plan_t* plan);

// The planner prices a world-2 plan made with a calibrated topology at the shared-memory figure:
// exactly as a topology given that bandwidth by hand, and unlike one given the loopback figure.
// Two table-wise tables pinned to different ranks, so every plan is the same layout and only
// the price of its all-to-alls differs.
TEST(CapiCalibrate, PlannerPricesIntraNodeCollectivesAtTheSharedMemoryFigure) {
  shardrec_topology_t calibrated = SHARDREC_TOPOLOGY_INIT;
  calibrated.world_size = 2;
  calibrated.batch_size = 4096;
  shardrec_calibration_t cal = SHARDREC_CALIBRATION_INIT;
  ASSERT_EQ(shardrec_topology_calibrate(&calibrated, nullptr, &cal), SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(cal.shm_used, 1);
  const char* names[2] = {"a", "b"};
  shardrec_feature_config_t features[2];
  shardrec_table_config_t tables[2];
  shardrec_table_constraints_t pins[2];
  int32_t feature_of[2] = {0, 1}, rank_of[2] = {0, 1};
  for (int t = 0; t < 2; ++t) {
    features[t] = SHARDREC_FEATURE_CONFIG_INIT;
    features[t].name = names[t];
    features[t].pooling_factor = 20;
    tables[t] = SHARDREC_TABLE_CONFIG_INIT;
    tables[t].name = names[t];
    tables[t].rows = 100000;
    tables[t].dim = 128;
    tables[t].features = &feature_of[t];
    tables[t].num_features = 1;
    pins[t] = SHARDREC_TABLE_CONSTRAINTS_INIT;
    pins[t].table = names[t];
    pins[t].sharding_types = 1u << SHARDREC_SHARDING_TABLE_WISE;
    pins[t].ranks = &rank_of[t];
    pins[t].num_ranks = 1;
  }
  auto cost = [&](const shardrec_topology_t& topo, std::string* stats) {
    shardrec_plan_t* plan = nullptr;
    EXPECT_EQ(shardrec_plan_create(&plan, tables, 2, features, 2, &topo, pins, 2), SHARDREC_OK)
        << shardrec_last_error();
    if (plan == nullptr) return -1.0;
    char* text = nullptr;
    EXPECT_EQ(shardrec_plan_stats(plan, &text, nullptr), SHARDREC_OK);
    *stats = text;
    shardrec_free(text);
    const double ms = EstimatedStepMs(plan);
    shardrec_plan_destroy(plan);
    return ms;
  };
  shardrec_topology_t by_hand = calibrated, loopback = calibrated;
  by_hand.intra_node_bandwidth = cal.shm_bandwidth;
  loopback.intra_node_bandwidth = cal.loopback_bandwidth;
  std::string calibrated_stats, by_hand_stats, loopback_stats;
  const double at_calibrated = cost(calibrated, &calibrated_stats);
  const double at_shm = cost(by_hand, &by_hand_stats);
  const double at_loopback = cost(loopback, &loopback_stats);
  EXPECT_GT(at_calibrated, 0.0);
  EXPECT_EQ(at_calibrated, at_shm);
  EXPECT_EQ(calibrated_stats, by_hand_stats);
  // The all-to-alls are priced by bandwidth: the faster route costs less (the two figures
  // differ by several times on any machine that has the transport; 5 % is a loose margin).
  if (cal.shm_bandwidth > 1.05 * cal.loopback_bandwidth) {
    EXPECT_LT(at_calibrated, at_loopback);
  } else if (cal.loopback_bandwidth > 1.05 * cal.shm_bandwidth) {
    EXPECT_GT(at_calibrated, at_loopback);
  }
}

constexpr int kTables = 4;
constexpr int64_t kBatch = 1024;
constexpr int kBag = 10;
const int64_t kRows[kTables] = {20000, 50000, 10000, 30000};
const int32_t kDims[kTables] = {64, 32, 128, 64};

double EstimatedStepMs(const shardrec_plan_t* plan) {
  char* text = nullptr;
  EXPECT_EQ(shardrec_plan_stats(plan, &text, nullptr), SHARDREC_OK);
  const std::string s = text;
  shardrec_free(text);
  const std::string key = "estimated step cost of the busiest rank: ";
  const size_t at = s.find(key);
  EXPECT_NE(at, std::string::npos) << s;
  if (at == std::string::npos) return -1;
  EXPECT_NE(s.find(" ms", at), std::string::npos);  // the unit is printed
  return std::strtod(s.c_str() + at + key.size(), nullptr);
}

// Median wall time (ms) of a forward + backward over every rank (threads), after warm-up.
double MeasuredStepMs(const shardrec_plan_t* plan, int world) {
  std::vector<shardrec_comm_t*> comms(world);
  EXPECT_EQ(shardrec_comm_create_local_group(comms.data(), world, nullptr), SHARDREC_OK);
  std::vector<shardrec_embedding_t*> colls(world);
  // Four batches per rank in rotation: a repeated batch would find its rows in cache.
  constexpr int kBatches = 4;
  std::vector<std::vector<int32_t>> lengths(world * kBatches);
  std::vector<std::vector<int64_t>> ids(world * kBatches);
  std::vector<std::vector<float>> out(world), grad(world);
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r) {
    ts.emplace_back([&, r] {
      shardrec_embedding_options_t o = SHARDREC_EMBEDDING_OPTIONS_INIT;
      o.num_threads = 1;
      EXPECT_EQ(shardrec_embedding_create(&colls[r], plan, comms[r], nullptr, &o), SHARDREC_OK);
      int64_t dim = 0;
      shardrec_embedding_output_dim(colls[r], &dim);
      std::mt19937_64 rng(5 + r);
      for (int k = r * kBatches; k < (r + 1) * kBatches; ++k)
        for (int t = 0; t < kTables; ++t)
          for (int64_t b = 0; b < kBatch; ++b) {
            const int32_t len = kBag - 3 + static_cast<int32_t>(rng() % 7);
            lengths[k].push_back(len);
            for (int32_t i = 0; i < len; ++i)
              ids[k].push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(kRows[t])));
          }
      out[r].assign(static_cast<size_t>(kBatch * dim), 0.0f);
      grad[r].assign(out[r].size(), 1e-3f);
    });
  }
  for (auto& t : ts) t.join();
  ts.clear();
  std::vector<double> times;
  for (int it = 0; it < 16; ++it) {
    const auto t0 = Clock::now();
    for (int r = 0; r < world; ++r) {
      ts.emplace_back([&, r, it] {
        const int k = r * kBatches + it % kBatches;
        shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
        v.batch_size = kBatch;
        v.num_features = kTables;
        v.lengths = lengths[k].data();
        v.num_lengths = lengths[k].size();
        v.values = ids[k].data();
        v.values_dtype = SHARDREC_DTYPE_INT64;
        v.num_values = ids[k].size();
        EXPECT_EQ(shardrec_embedding_forward(colls[r], &v, out[r].data(), out[r].size(), nullptr),
                  SHARDREC_OK);
        EXPECT_EQ(shardrec_embedding_backward(colls[r], grad[r].data(), grad[r].size(), nullptr),
                  SHARDREC_OK);
      });
    }
    for (auto& t : ts) t.join();
    ts.clear();
    if (it >= 2)
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  for (auto* c : colls) shardrec_embedding_destroy(c);
  for (auto* c : comms) shardrec_comm_destroy(c);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Estimate / measured for one world size, with a fresh calibration.
double Ratio(int world) {
  std::vector<std::string> names;
  for (int t = 0; t < kTables; ++t) names.push_back("t" + std::to_string(t));
  std::vector<shardrec_feature_config_t> features(kTables);
  std::vector<shardrec_table_config_t> tables(kTables);
  std::vector<int32_t> feature_of(kTables);
  for (int t = 0; t < kTables; ++t) {
    features[t] = SHARDREC_FEATURE_CONFIG_INIT;
    features[t].name = names[t].c_str();
    features[t].pooling_factor = kBag;
    feature_of[t] = t;
    tables[t] = SHARDREC_TABLE_CONFIG_INIT;
    tables[t].name = names[t].c_str();
    tables[t].rows = kRows[t];
    tables[t].dim = kDims[t];
    tables[t].features = &feature_of[t];
    tables[t].num_features = 1;
  }
  shardrec_topology_t topo = SHARDREC_TOPOLOGY_INIT;
  topo.world_size = world;
  topo.batch_size = static_cast<int32_t>(kBatch);
  topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  shardrec_calibrate_options_t opts = SHARDREC_CALIBRATE_OPTIONS_INIT;
  opts.ranks_share_memory = 1;  // ranks are threads of this process
  EXPECT_EQ(shardrec_topology_calibrate(&topo, &opts, nullptr), SHARDREC_OK);
  shardrec_plan_t* plan = nullptr;
  EXPECT_EQ(shardrec_plan_create(&plan, tables.data(), kTables, features.data(), kTables, &topo,
                                 nullptr, 0),
            SHARDREC_OK)
      << shardrec_last_error();
  if (plan == nullptr) return -1;
  const double est = EstimatedStepMs(plan);
  const double measured = MeasuredStepMs(plan, world);
  shardrec_plan_destroy(plan);
  std::printf("world %d: estimated %.3f ms, measured %.3f ms, ratio %.2f\n", world, est, measured,
              est / measured);
  return est / measured;
}

TEST(CapiCalibrate, EstimatedStepIsWithinFourTimesOfTheMeasuredStep) {
  // The model prices a release build. A sanitized build slows the step's scalar host work
  // (routing, sorting, packing: a check per element) several times more than the vectorised
  // lookup kernel the calibration times (a check per vector), so there the estimate falls short
  // by up to that slowdown as well (ASan: 0.20-0.23 observed where release gives ~1).
  const double lowest = 0.25 / shardrec::testing::kSlowdown;
  for (int world : {1, 2}) {
    double ratio = 0;
    // A disturbed calibration or step on a shared machine is retried with fresh measurements.
    for (int attempt = 0; attempt < 3; ++attempt) {
      ratio = Ratio(world);
      if (ratio >= lowest && ratio <= 4.0) break;
    }
    EXPECT_GE(ratio, lowest) << "world " << world;
    EXPECT_LE(ratio, 4.0) << "world " << world;
  }
}

}  // namespace
