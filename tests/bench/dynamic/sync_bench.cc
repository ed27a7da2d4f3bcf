// The 2D sync of a dynamic table through the public C API (docs/dynamic-tables.md, "2D merge"):
// two replicas (ranks as threads, sharding groups of one rank) of a row-wise Adagrad table of
// 256k rows (dim 64) holding 200k ids, trained on uniform batches (1024 samples, bags of 8) of
// those ids for `steps` steps between syncs. Three syncs are timed in turn in each iteration,
// each after its own `steps` training steps: the dynamic table's merge as it runs (gathering the
// rows of the ids some replica changed since the last sync), the same merge after a checkpoint
// save and reload on every rank (untimed), which makes it gather every row, and the same table
// as a fixed one, whose sync all-reduces every row (what TorchRec's 2D sync does). Counters: the
// median of each (ms), every_row_over_changed and fixed_over_dynamic (> 1: the changed-rows
// merge is faster), and the bytes each rank sent in the last sync of each kind.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/bench/capi_bench_util.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kReplicas = 2;
constexpr int64_t kCapacity = 1 << 18, kIds = 200000, kBatch = 1024;
constexpr int32_t kDim = 64, kBag = 8;

using shardrec::bench::Check;
using shardrec::bench::Scatter;

void OnRanks(const std::function<void(int)>& job) {
  std::vector<std::thread> ts;
  for (int r = 0; r < kReplicas; ++r) ts.emplace_back(job, r);
  for (auto& t : ts) t.join();
}

// A mesh of kReplicas replicas of one rank each, with a collection of one table of kCapacity
// rows, dynamic or fixed.
struct Replicas {
  shardrec_plan_t* plan = nullptr;
  shardrec_comm_t* comms[kReplicas] = {};
  shardrec_mesh_t* meshes[kReplicas] = {};
  shardrec_embedding_t* colls[kReplicas] = {};
  bool dynamic = false;
  std::mt19937_64 rng[kReplicas];

  explicit Replicas(bool dyn) : dynamic(dyn) {
    shardrec_dynamic_table_config_t d;
    shardrec_dynamic_table_config_init(&d, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
    d.eviction = SHARDREC_EVICTION_LRU;
    shardrec_feature_config_t f;
    shardrec_feature_config_init(&f, SHARDREC_FEATURE_CONFIG_VERSION);
    f.name = "f0";
    f.pooling_factor = kBag;
    const int32_t feature = 0;
    shardrec_table_config_t t;
    shardrec_table_config_init(&t, SHARDREC_TABLE_CONFIG_VERSION);
    t.name = "t0";
    t.rows = kCapacity;
    t.dim = kDim;
    t.features = &feature;
    t.num_features = 1;
    t.dynamic = dynamic ? &d : nullptr;
    shardrec_topology_t topo;
    shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
    topo.world_size = 1;
    topo.batch_size = static_cast<int32_t>(kBatch);
    topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
    Check(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, nullptr, 0), "plan");
    Check(shardrec_comm_create_local_group(comms, kReplicas, nullptr), "comms");
    OnRanks([this](int r) {
      shardrec_mesh_options_t mo;
      shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
      mo.sharding_group_size = 1;
      Check(shardrec_mesh_create(&meshes[r], comms[r], &mo), "mesh");
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      o.num_threads = 1;
      Check(shardrec_mesh_embedding_create(&colls[r], meshes[r], plan, nullptr, &o), "create");
      rng[r].seed(7 + static_cast<uint64_t>(r));
    });
    // Every id (a fixed table: its rows) once on each replica, then a sync: the replicas start
    // alike, as after any sync.
    for (int64_t first = 0; first < kIds; first += kBatch * kBag)
      Train([first](int, std::mt19937_64&, int64_t i) { return (first + i) % kIds; });
    Sync(nullptr);
  }
  ~Replicas() {
    for (auto* c : colls) shardrec_embedding_destroy(c);
    for (auto* m : meshes) shardrec_mesh_destroy(m);
    for (auto* c : comms) shardrec_comm_destroy(c);
    shardrec_plan_destroy(plan);
  }

  // One step on every replica; the i-th id of replica r's batch is id(r, rng, i).
  void Train(const std::function<int64_t(int, std::mt19937_64&, int64_t)>& id) {
    OnRanks([&](int r) {
      std::vector<int32_t> lengths(kBatch, kBag);
      std::vector<int64_t> ids(static_cast<size_t>(kBatch * kBag));
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t x = id(r, rng[r], static_cast<int64_t>(i));
        ids[i] = dynamic ? Scatter(x) : x;
      }
      shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
      v.batch_size = kBatch;
      v.num_features = 1;
      v.lengths = lengths.data();
      v.num_lengths = lengths.size();
      v.values = ids.data();
      v.values_dtype = SHARDREC_DTYPE_INT64;
      v.num_values = ids.size();
      std::vector<float> out(static_cast<size_t>(kBatch * kDim)), grad(out.size(), 1e-3f);
      Check(shardrec_embedding_forward(colls[r], &v, out.data(), out.size(), nullptr), "forward");
      Check(shardrec_embedding_backward(colls[r], grad.data(), grad.size(), nullptr), "backward");
    });
  }

  // `steps` steps of uniform ids, then (when `reload_dir`) a checkpoint save and load on every
  // replica, then a sync, which alone is timed; wall seconds. `bytes`: replica 0's sync bytes.
  double Round(int steps, const char* reload_dir, uint64_t* bytes) {
    for (int s = 0; s < steps; ++s)
      Train([](int, std::mt19937_64& g, int64_t) { return static_cast<int64_t>(g() % kIds); });
    if (reload_dir != nullptr)
      OnRanks([&](int r) {
        const std::string dir = std::string(reload_dir) + "/r" + std::to_string(r);
        Check(shardrec_checkpoint_save(colls[r], dir.c_str(), nullptr), "save");
        Check(shardrec_checkpoint_load(colls[r], dir.c_str(), nullptr), "load");
      });
    const auto t0 = Clock::now();
    Sync(bytes);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void Sync(uint64_t* bytes) {
    OnRanks([&](int r) {
      Check(shardrec_mesh_sync(meshes[r], colls[r], SHARDREC_SYNC_DEFAULT), "sync");
      if (r == 0 && bytes != nullptr)
        Check(shardrec_mesh_sync_stats(meshes[r], bytes, nullptr, nullptr), "stats");
    });
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// state.range(0): training steps between syncs.
void BM_DynamicSync(benchmark::State& state) {
  const int steps = static_cast<int>(state.range(0));
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("shardrec_sync_bench_" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  Replicas changed(true), every(true), fixed(false);
  std::vector<double> tc, te, tf;
  uint64_t bc = 0, be = 0, bf = 0;
  for (auto _ : state) {
    tc.push_back(changed.Round(steps, nullptr, &bc));
    te.push_back(every.Round(steps, dir.c_str(), &be));
    tf.push_back(fixed.Round(steps, nullptr, &bf));
    state.SetIterationTime(tc.back());
  }
  std::filesystem::remove_all(dir);
  state.counters["changed_ms"] = Median(tc) * 1e3;
  state.counters["every_row_ms"] = Median(te) * 1e3;
  state.counters["fixed_ms"] = Median(tf) * 1e3;
  state.counters["every_row_over_changed"] = Median(te) / Median(tc);
  state.counters["fixed_over_dynamic"] = Median(tf) / Median(tc);
  state.counters["changed_MB"] = static_cast<double>(bc) / 1e6;
  state.counters["every_row_MB"] = static_cast<double>(be) / 1e6;
  state.counters["fixed_MB"] = static_cast<double>(bf) / 1e6;
}

BENCHMARK(BM_DynamicSync)
    ->Arg(1)
    ->Arg(8)
    ->ArgName("steps")
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(7);

}  // namespace

BENCHMARK_MAIN();
