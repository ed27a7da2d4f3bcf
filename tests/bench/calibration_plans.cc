// The plan the planner picks for the TorchRec side by side's default configuration at world 2 on
// one host (8 tables of 100k-1M rows, dims 64/128, bags of 20, 2048 samples per rank, row-wise
// Adagrad; TW, RW and CW offered, as torchrec_side_by_side.py does) with this machine's
// calibration, priced two ways from the same measurement: the intra-node figures of the
// shared-memory transport the ranks use (what shardrec_topology_calibrate writes since
// 2026-11-29) and the loopback TCP figures it wrote before. Prints both plans' sharding types and
// estimated step costs, and whether they differ. Ranks are processes (as in the side by side);
// `threads` as an argument prices them as threads of one process instead. With `time` and plans
// that differ, it then measures both plans' training step (forward + backward, two rank threads
// of a local group, 1 thread per rank, batches of bags of 16-24 ids, row-wise Adagrad),
// alternating the plans over several rounds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"

namespace {

void Check(shardrec_status_t rc, const char* what) {
  if (rc != SHARDREC_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, shardrec_last_error());
    std::exit(1);
  }
}

constexpr int kTables = 8;
const int64_t kRows[kTables] = {1000000, 500000, 200000, 100000, 1000000, 300000, 100000, 700000};
const int32_t kDims[kTables] = {128, 64, 128, 64, 64, 128, 128, 64};
const char* kTypeNames[] = {"DP", "TW", "RW", "CW", "TWRW", "TWCW", "GRID"};

constexpr int64_t kBatch = 2048;

// Plans the configuration on `topo`; prints one line per table and the estimate; returns the
// plan's layout as text ("t0:TW@1 ...") for the comparison and the plan in *out.
std::string PlanAndPrint(const shardrec_topology_t& topo, const char* label,
                         shardrec_plan_t** out) {
  std::vector<std::string> names(kTables);
  std::vector<shardrec_feature_config_t> features(kTables);
  std::vector<shardrec_table_config_t> tables(kTables);
  std::vector<shardrec_table_constraints_t> cons(kTables);
  std::vector<int32_t> feature_of(kTables);
  for (int t = 0; t < kTables; ++t) {
    names[t] = "t" + std::to_string(t);
    features[t] = SHARDREC_FEATURE_CONFIG_INIT;
    features[t].name = names[t].c_str();
    features[t].pooling_factor = 20.0f;
    feature_of[t] = t;
    tables[t] = SHARDREC_TABLE_CONFIG_INIT;
    tables[t].name = names[t].c_str();
    tables[t].rows = kRows[t];
    tables[t].dim = kDims[t];
    tables[t].features = &feature_of[t];
    tables[t].num_features = 1;
    cons[t] = SHARDREC_TABLE_CONSTRAINTS_INIT;
    cons[t].table = names[t].c_str();
    cons[t].sharding_types = (1u << SHARDREC_SHARDING_TABLE_WISE) |
                             (1u << SHARDREC_SHARDING_ROW_WISE) |
                             (1u << SHARDREC_SHARDING_COLUMN_WISE);
  }
  shardrec_plan_t* plan = nullptr;
  Check(shardrec_plan_create(&plan, tables.data(), kTables, features.data(), kTables, &topo,
                             cons.data(), kTables),
        "shardrec_plan_create");
  std::string layout;
  for (size_t t = 0; t < kTables; ++t) {
    int32_t type = 0;
    size_t shards = 0;
    Check(shardrec_plan_table_sharding(plan, t, &type, &shards), "shardrec_plan_table_sharding");
    layout += names[t] + ":" + kTypeNames[type];
    for (size_t s = 0; s < shards; ++s) {
      shardrec_shard_t shard;
      Check(shardrec_plan_shard(plan, t, s, &shard), "shardrec_plan_shard");
      layout += "@" + std::to_string(shard.rank);
    }
    layout += " ";
  }
  char* text = nullptr;
  Check(shardrec_plan_stats(plan, &text, nullptr), "shardrec_plan_stats");
  std::printf("=== %s\nlayout: %s\n%s\n", label, layout.c_str(), text);
  shardrec_free(text);
  *out = plan;
  return layout;
}

// Mean ms of `steps` training steps of `plan` at world 2 (rank threads), after 3 warm-up steps:
// the slower rank's wall time over the steps.
double StepMs(const shardrec_plan_t* plan, int steps) {
  constexpr int kWorld = 2, kBatches = 4;
  shardrec_comm_t* comms[kWorld];
  Check(shardrec_comm_create_local_group(comms, kWorld, nullptr), "create_local_group");
  double ms[kWorld] = {0, 0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      shardrec_embedding_options_t o = SHARDREC_EMBEDDING_OPTIONS_INIT;
      o.num_threads = 1;
      shardrec_embedding_t* coll = nullptr;
      Check(shardrec_embedding_create(&coll, plan, comms[r], nullptr, &o), "embedding_create");
      int64_t dim = 0;
      shardrec_embedding_output_dim(coll, &dim);
      std::mt19937_64 rng(1000 * r + 7);
      std::vector<std::vector<int32_t>> lengths(kBatches);
      std::vector<std::vector<int64_t>> ids(kBatches);
      for (int k = 0; k < kBatches; ++k)
        for (int t = 0; t < kTables; ++t)
          for (int64_t b = 0; b < kBatch; ++b) {
            const int32_t len = 16 + static_cast<int32_t>(rng() % 9);
            lengths[k].push_back(len);
            for (int32_t i = 0; i < len; ++i)
              ids[k].push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(kRows[t])));
          }
      std::vector<float> out(static_cast<size_t>(kBatch * dim)), grad(out.size(), 1e-4f);
      auto step = [&](int it) {
        const int k = it % kBatches;
        shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
        v.batch_size = kBatch;
        v.num_features = kTables;
        v.lengths = lengths[k].data();
        v.num_lengths = lengths[k].size();
        v.values = ids[k].data();
        v.values_dtype = SHARDREC_DTYPE_INT64;
        v.num_values = ids[k].size();
        Check(shardrec_embedding_forward(coll, &v, out.data(), out.size(), nullptr), "forward");
        Check(shardrec_embedding_backward(coll, grad.data(), grad.size(), nullptr), "backward");
      };
      for (int it = 0; it < 3; ++it) step(it);
      const auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < steps; ++it) step(it);
      ms[r] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
          steps;
      shardrec_embedding_destroy(coll);
    });
  }
  for (auto& t : ranks) t.join();
  for (auto* c : comms) shardrec_comm_destroy(c);
  return std::max(ms[0], ms[1]);
}

}  // namespace

int main(int argc, char** argv) {
  bool threads = false, time = false;
  for (int i = 1; i < argc; ++i) {
    threads = threads || std::strcmp(argv[i], "threads") == 0;
    time = time || std::strcmp(argv[i], "time") == 0;
  }
  shardrec_topology_t shm = SHARDREC_TOPOLOGY_INIT;
  shm.world_size = 2;
  shm.batch_size = 2048;
  shm.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  shardrec_calibrate_options_t opts = SHARDREC_CALIBRATE_OPTIONS_INIT;
  opts.ranks_share_memory = threads ? 1 : 0;
  shardrec_calibration_t cal = SHARDREC_CALIBRATION_INIT;
  Check(shardrec_topology_calibrate(&shm, &opts, &cal), "shardrec_topology_calibrate");
  std::printf(
      "calibration (%s): gather %.3g GB/s; shared memory %.3g GB/s, %.3g us per all-reduce "
      "(used: %d); loopback %.3g GB/s, %.3g us; hand-off %.3g us; %.0f ms\n",
      threads ? "ranks as threads" : "ranks as processes", cal.gather_bandwidth / 1e9,
      cal.shm_bandwidth / 1e9, cal.shm_latency * 1e6, cal.shm_used, cal.loopback_bandwidth / 1e9,
      cal.loopback_latency * 1e6, cal.handoff_latency * 1e6, cal.elapsed * 1e3);
  // What the calibration wrote before: the loopback figures for every route.
  shardrec_topology_t loopback = shm;
  loopback.intra_node_bandwidth = cal.loopback_bandwidth;
  loopback.collective_latency =
      cal.loopback_latency + (opts.ranks_share_memory ? cal.handoff_latency : 0.0);
  shardrec_plan_t* old_plan = nullptr;
  shardrec_plan_t* new_plan = nullptr;
  const std::string before =
      PlanAndPrint(loopback, "old calibration (loopback TCP figures)", &old_plan);
  const std::string after = PlanAndPrint(shm, "new calibration (shared-memory figures)", &new_plan);
  std::printf("plans %s\n", before == after ? "identical" : "DIFFER");
  if (time && before != after) {
    // Alternated, so a change in the machine's load shows in both.
    for (int round = 0; round < 3; ++round) {
      const double a = StepMs(old_plan, 20), b = StepMs(new_plan, 20);
      std::printf("round %d: step ms, old plan %.2f, new plan %.2f (new/old %.3f)\n", round, a, b,
                  b / a);
      std::fflush(stdout);
    }
  }
  shardrec_plan_destroy(old_plan);
  shardrec_plan_destroy(new_plan);
  return 0;
}
