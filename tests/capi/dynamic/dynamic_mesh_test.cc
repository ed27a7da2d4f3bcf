// Dynamic tables on 2D meshes through the C API (docs/dynamic-tables.md, "2D merge"): replicas
// trained on different batches hold different keys; after a sync every replica's table (ids,
// weights and optimizer states, read from a 1D checkpoint of its sharding group) equals the
// merge rule applied to the tables saved before the sync (a weights-only sync keeps each
// replica's own state of its ids); over capacity the survivors are the LRU order's and the same on
// every replica and in every run; a mesh checkpoint reloads bit-exact under another mesh and into a
// 1D collection, which then trains exactly as the mesh's first sharding group; a failed sync
// changes no dynamic row; a save before the sync is refused on every rank and writes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/replica.h"
#include "tests/capi/dynamic/dynamic_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

// A dynamic table by id: each row tensor's ("weights" and the optimizer states) row, fp32.
using Rows = std::map<std::string, std::vector<float>>;
using Table = std::map<int64_t, Rows>;

// Both tables of a checkpoint in `dir` (docs/checkpoint-format.md, "Dynamic tables"), read from
// its rank files' safetensors headers: per row block, the ids and each tensor's live rows.
std::vector<Table> ReadCheckpoint(const std::string& dir) {
  std::vector<Table> out(2);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    ++files;
    std::ifstream in(e.path(), std::ios::binary);
    uint64_t hlen = 0;
    in.read(reinterpret_cast<char*>(&hlen), 8);
    std::string header(hlen, '\0');
    in.read(header.data(), static_cast<std::streamsize>(hlen));
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const nlohmann::json h = nlohmann::json::parse(header);
    // key "table/tensor/rOFFSET_cCOL" -> its tensor of one row block
    std::map<std::string, std::vector<int64_t>> ids;  // "table/rOFFSET" -> ids
    for (const auto& [key, t] : h.items()) {
      if (key == "__metadata__") continue;
      const size_t a = key.find('/'), b = key.rfind('/');
      if (key.substr(a + 1, b - a - 1) != "ids") continue;
      const int64_t n = t["shape"][0].get<int64_t>();
      std::vector<int64_t>& v = ids[key.substr(0, a) + key.substr(b, key.find('_', b) - b)];
      v.resize(static_cast<size_t>(n));
      std::memcpy(v.data(), data.data() + t["data_offsets"][0].get<size_t>(), n * 8);
    }
    for (const auto& [key, t] : h.items()) {
      if (key == "__metadata__") continue;
      const size_t a = key.find('/'), b = key.rfind('/');
      const std::string table = key.substr(0, a), tensor = key.substr(a + 1, b - a - 1);
      if (tensor == "ids" || tensor == "last_seen" || tensor == "count" || tensor == "admission" ||
          tensor == "dynamic_meta" || tensor == "score")
        continue;
      EXPECT_EQ(key.substr(key.find('_', b)), "_c0") << "row-wise or table-wise only";
      const std::vector<int64_t>& v = ids.at(table + key.substr(b, key.find('_', b) - b));
      EXPECT_EQ(t["dtype"], "F32") << key;
      const int64_t cols = t["shape"].size() > 1 ? t["shape"][1].get<int64_t>() : 1;
      const size_t at = t["data_offsets"][0].get<size_t>();
      Table& tab = out[table == "t0" ? 0 : 1];
      for (size_t i = 0; i < v.size(); ++i) {
        std::vector<float>& row = tab[v[i]][tensor];
        row.resize(static_cast<size_t>(cols));
        std::memcpy(row.data(), data.data() + at + i * static_cast<size_t>(cols) * 4, cols * 4);
      }
    }
  }
  EXPECT_GT(files, 0u) << dir;
  return out;
}

// Both tables' scores in a checkpoint in `dir` (SCORE tables: the "score" record of each row
// block, beside its "ids"), by id.
std::vector<std::map<int64_t, double>> ReadScores(const std::string& dir) {
  std::vector<std::map<int64_t, double>> out(2);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::ifstream in(e.path(), std::ios::binary);
    uint64_t hlen = 0;
    in.read(reinterpret_cast<char*>(&hlen), 8);
    std::string header(hlen, '\0');
    in.read(header.data(), static_cast<std::streamsize>(hlen));
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const nlohmann::json h = nlohmann::json::parse(header);
    for (const auto& [key, t] : h.items()) {
      const size_t a = key.find('/'), b = key.rfind('/');
      if (key == "__metadata__" || key.substr(a + 1, b - a - 1) != "score") continue;
      const nlohmann::json& ids = h.at(key.substr(0, a) + "/ids" + key.substr(b));
      const auto n = t["shape"][0].get<size_t>();
      EXPECT_EQ(ids["shape"][0].get<size_t>(), n) << key;
      for (size_t i = 0; i < n; ++i) {
        int64_t id;
        double score;
        std::memcpy(&id, data.data() + ids["data_offsets"][0].get<size_t>() + i * 8, 8);
        std::memcpy(&score, data.data() + t["data_offsets"][0].get<size_t>() + i * 8, 8);
        out[key.substr(0, a) == "t0" ? 0 : 1][id] = score;
      }
    }
  }
  return out;
}

// The merge rule on tables saved by each replica (in replica order), before eviction: the
// union of the ids, each tensor the fp32 sum over the holders in replica order over their number.
Table Merge(const std::vector<Table>& replicas) {
  std::map<int64_t, std::vector<const Rows*>> holders;
  for (const Table& t : replicas)
    for (const auto& [id, rows] : t) holders[id].push_back(&rows);
  Table out;
  for (const auto& [id, hs] : holders) {
    Rows& r = out[id];
    if (hs.size() == 1) {
      r = *hs[0];
      continue;
    }
    for (const auto& [name, first] : *hs[0]) {
      std::vector<float> sum(first.size(), 0.0f);
      for (const Rows* h : hs)
        for (size_t c = 0; c < sum.size(); ++c) sum[c] += h->at(name)[c];
      for (float& x : sum) x /= static_cast<float>(hs.size());
      r[name] = sum;
    }
  }
  return out;
}

void ExpectSame(const Table& got, const Table& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [id, rows] : want) {
    auto it = got.find(id);
    ASSERT_NE(it, got.end()) << what << ": id " << id;
    ASSERT_EQ(it->second.size(), rows.size()) << what;
    for (const auto& [name, v] : rows)
      EXPECT_EQ(std::memcmp(it->second.at(name).data(), v.data(), v.size() * 4), 0)
          << what << ": id " << id << " tensor " << name;
  }
}

// Deterministic output gradients of one rank's step.
std::vector<float> Grads(int64_t n, int32_t step, int32_t rank) {
  std::vector<float> g(static_cast<size_t>(n));
  uint64_t x = 0x9e37u + static_cast<uint64_t>(step) * 131 + static_cast<uint64_t>(rank) * 7919;
  for (float& v : g) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(x >> 40) % 2001 - 1000) / 1000.0f;
  }
  return g;
}

// One forward and backward of `b`, the output kept in `out` when not null.
void TrainStep(shardrec_embedding_t* c, const RefBatch& b, int64_t dim, int32_t step, int32_t rank,
               std::vector<float>* out) {
  KjtHolder kjt(b, 3, false);
  std::vector<float> y(static_cast<size_t>(b.batch_size * dim));
  ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), y.data(), y.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  const std::vector<float> g = Grads(b.batch_size * dim, step, rank);
  ASSERT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  if (out != nullptr) *out = y;
}

struct MeshRank {
  shardrec_mesh_t* mesh = nullptr;
  shardrec_embedding_t* coll = nullptr;
  int32_t group = 0, shard_rank = 0, replica_rank = 0;
  ~MeshRank() {
    shardrec_embedding_destroy(coll);
    shardrec_mesh_destroy(mesh);
  }
};

void MakeMeshRank(int32_t world, int32_t shard_size, int r, const shardrec_plan_t* plan,
                  const shardrec_optimizer_config_t* opt, uint64_t seed, MeshRank* m) {
  shardrec_mesh_options_t mo;
  shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
  mo.sharding_group_size = shard_size;
  ASSERT_EQ(shardrec_mesh_create(&m->mesh, GroupComm(world, r), &mo), SHARDREC_OK)
      << shardrec_last_error();
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.seed = seed;
  ASSERT_EQ(shardrec_mesh_embedding_create(&m->coll, m->mesh, plan, opt, &o), SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_mesh_coords(m->mesh, &m->group, &m->shard_rank, nullptr, &m->replica_rank),
            SHARDREC_OK);
}

std::string Dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "shardrec_dynmesh_" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// A 1D checkpoint of one sharding group's collection (collective over the group).
void SaveGroup(shardrec_embedding_t* c, const std::string& dir) {
  ASSERT_EQ(shardrec_checkpoint_save(c, dir.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
}

std::string GroupDir(const std::string& dir, const char* stage, int32_t group) {
  return dir + "/" + stage + "_g" + std::to_string(group);
}

struct MeshCase {
  int32_t replicas, shard_size, optimizer;
  int32_t sharding = SHARDREC_SHARDING_ROW_WISE;
};

class DynamicMeshMerge : public ::testing::TestWithParam<MeshCase> {};

// R replicas x S ranks train different batches for 3 steps, sync, save a mesh checkpoint and
// train 2 more steps each.
TEST_P(DynamicMeshMerge, SyncCheckpointAndContinue) {
  const MeshCase p = GetParam();
  const int32_t world = p.replicas * p.shard_size;
  // A data-parallel table's copies agree on their inserts over the whole mesh (its gradients
  // reduce over the world), so its replicas never diverge and the merge keeps them as they are.
  const bool dp = p.sharding == SHARDREC_SHARDING_DATA_PARALLEL;
  DynScenario s = MakeDynScenario(p.shard_size, p.sharding, p.optimizer, 64, 24);
  DynScenario sw = s;  // the batches: one per world rank, so every replica sees other ids
  sw.base.world = world;
  sw.base.steps = 5;
  const auto batches = MakeDynBatches(sw);
  const int64_t dim = DynOutputDim(s);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  const std::string dir =
      Dir("merge_" + std::to_string(p.replicas) + "x" + std::to_string(p.shard_size));
  const std::string ckpt = dir + "/ckpt";
  std::mutex mu;
  std::vector<int32_t> replica_of_group(static_cast<size_t>(p.replicas), -1);
  std::map<std::pair<int32_t, int32_t>, int32_t> rank_of;       // (group, shard rank) -> world rank
  std::vector<std::vector<std::vector<float>>> outputs(world);  // [rank][step - 3]
  SpawnRanks(world, [&](int r) {
    MeshRank m;
    MakeMeshRank(world, p.shard_size, r, plan.get(), &opt, s.base.seed, &m);
    {
      std::lock_guard<std::mutex> lock(mu);
      replica_of_group[static_cast<size_t>(m.group)] = m.replica_rank;
      rank_of[{m.group, m.shard_rank}] = r;
    }
    for (int32_t step = 0; step < 3; ++step)
      TrainStep(m.coll, batches[step][r], dim, step, r, nullptr);
    SaveGroup(m.coll, GroupDir(dir, "pre", m.group));
    ASSERT_EQ(shardrec_mesh_sync(m.mesh, m.coll, SHARDREC_SYNC_WEIGHTS_AND_STATE), SHARDREC_OK)
        << shardrec_last_error();
    SaveGroup(m.coll, GroupDir(dir, "post", m.group));
    ASSERT_EQ(shardrec_checkpoint_save_mesh(m.mesh, m.coll, ckpt.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    for (int32_t step = 3; step < 5; ++step) {
      std::vector<float> y;
      TrainStep(m.coll, batches[step][r], dim, step, r, &y);
      outputs[r].push_back(y);
    }
  });
  if (HasFatalFailure()) return;
  std::vector<std::vector<Table>> pre(static_cast<size_t>(p.replicas));  // [replica][table]
  for (int32_t g = 0; g < p.replicas; ++g)
    pre[static_cast<size_t>(replica_of_group[g])] = ReadCheckpoint(GroupDir(dir, "pre", g));
  std::vector<std::vector<Table>> post;  // [group][table]
  for (int32_t g = 0; g < p.replicas; ++g) post.push_back(ReadCheckpoint(GroupDir(dir, "post", g)));
  for (int t = 0; t < 2; ++t) {
    std::vector<Table> before;
    for (const auto& x : pre) before.push_back(x[static_cast<size_t>(t)]);
    const Table want = Merge(before);
    // The replicas did diverge: some id is not held by all of them.
    size_t held_by_all = 0;
    for (const auto& [id, rows] : want) {
      bool all = true;
      for (const Table& x : before) all = all && x.count(id) > 0;
      held_by_all += all ? 1 : 0;
    }
    if (dp) {
      EXPECT_EQ(held_by_all, want.size()) << "table " << t;
      for (const Table& x : before)
        ExpectSame(x, want, "data-parallel copies, table " + std::to_string(t));
    } else {
      EXPECT_LT(held_by_all, want.size()) << "table " << t;
    }
    for (int32_t g = 0; g < p.replicas; ++g)
      ExpectSame(post[static_cast<size_t>(g)][static_cast<size_t>(t)], want,
                 "table " + std::to_string(t) + " group " + std::to_string(g));
  }

  // The checkpoint under another mesh: S' = 2 when S = 1, else 1, over 2 ranks.
  {
    const int32_t s2 = p.shard_size == 1 ? 2 : 1;
    DynScenario s_other = s;
    s_other.base.world = s2;
    PlanPtr plan2 = MakeDynPlan(s_other);
    ASSERT_NE(plan2, nullptr);
    SpawnRanks(2, [&](int r) {
      MeshRank m;
      MakeMeshRank(2, s2, r, plan2.get(), &opt, s.base.seed, &m);
      ASSERT_EQ(shardrec_checkpoint_load_mesh(m.mesh, m.coll, ckpt.c_str(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
      SaveGroup(m.coll, GroupDir(dir, "reloaded", m.group));
    });
    if (HasFatalFailure()) return;
    for (int32_t g = 0; g < 2 / s2; ++g) {
      const std::vector<Table> got = ReadCheckpoint(GroupDir(dir, "reloaded", g));
      for (int t = 0; t < 2; ++t)
        ExpectSame(got[static_cast<size_t>(t)], post[0][static_cast<size_t>(t)],
                   "reloaded table " + std::to_string(t));
    }
  }

  // Into a 1D collection of S ranks, trained on the first sharding group's batches: the same
  // outputs as that group's ranks after the sync. (Not for a data-parallel table: on the mesh it
  // trained on every group's batches.)
  if (dp) return;
  SpawnRanks(p.shard_size, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.base.seed;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(p.shard_size, r), &opt, &o),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    ASSERT_EQ(shardrec_checkpoint_load(c, ckpt.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    const int32_t wr = rank_of.at({0, r});
    for (int32_t step = 3; step < 5; ++step) {
      std::vector<float> y;
      TrainStep(c, batches[step][wr], dim, step, wr, &y);
      ASSERT_EQ(y.size(), outputs[wr][step - 3].size());
      EXPECT_EQ(std::memcmp(y.data(), outputs[wr][step - 3].data(), y.size() * 4), 0)
          << "1D rank " << r << " step " << step;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, DynamicMeshMerge,
    ::testing::Values(MeshCase{2, 1, SHARDREC_OPTIMIZER_ADAGRAD},
                      MeshCase{2, 2, SHARDREC_OPTIMIZER_ADAM},
                      MeshCase{2, 2, SHARDREC_OPTIMIZER_SGD, SHARDREC_SHARDING_DATA_PARALLEL},
                      MeshCase{2, 2, SHARDREC_OPTIMIZER_ADAGRAD, SHARDREC_SHARDING_TABLE_ROW_WISE}),
    [](const ::testing::TestParamInfo<MeshCase>& i) {
      return std::to_string(i.param.replicas) + "x" + std::to_string(i.param.shard_size) +
             "_sharding" + std::to_string(i.param.sharding);
    });

// Two replicas of one table-wise shard whose union of ids exceeds the capacity (each replica's
// own ids fit): the merge keeps the ids seen most recently (ties: the larger id), the same on
// both replicas and in a second run, each averaged over its holders.
TEST(DynamicMesh, OverCapacityKeepsTheLruOrderOnEveryReplica) {
  DynScenario s =
      MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 64, 24);
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;
  DynScenario sw = s;
  sw.base.world = 2;
  const auto batches = MakeDynBatches(sw);
  // Per replica and table: each id's last training forward (1-based); the capacity is the
  // larger replica's number of ids, so training evicts nothing and the merge must.
  std::vector<int32_t> table_of = {0, 1, 1};
  std::vector<std::vector<std::map<int64_t, int64_t>>> seen(
      2, std::vector<std::map<int64_t, int64_t>>(2));
  for (int32_t step = 0; step < s.base.steps; ++step) {
    for (int r = 0; r < 2; ++r) {
      const RefBatch& b = batches[step][r];
      size_t at = 0;
      for (int32_t f = 0; f < 3; ++f)
        for (int64_t i = 0; i < b.batch_size; ++i)
          for (int32_t k = 0; k < b.lengths[f * b.batch_size + i]; ++k)
            seen[r][table_of[f]][b.ids[at++]] = step + 1;
    }
  }
  std::vector<std::map<int64_t, int64_t>> last(2);  // per table: the maximum over the replicas
  for (int t = 0; t < 2; ++t) {
    for (int r = 0; r < 2; ++r)
      for (const auto& [id, step] : seen[r][t]) last[t][id] = std::max(last[t][id], step);
    s.base.tables[t].rows = static_cast<int64_t>(std::max(seen[0][t].size(), seen[1][t].size()));
    ASSERT_LT(s.base.tables[t].rows, static_cast<int64_t>(last[t].size()));
  }
  const int64_t dim = DynOutputDim(s);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  std::vector<std::vector<Table>> runs;
  for (int run = 0; run < 2; ++run) {
    const std::string dir = Dir("over_" + std::to_string(run));
    SpawnRanks(2, [&](int r) {
      MeshRank m;
      MakeMeshRank(2, 1, r, plan.get(), &opt, s.base.seed, &m);
      for (int32_t step = 0; step < s.base.steps; ++step)
        TrainStep(m.coll, batches[step][r], dim, step, r, nullptr);
      SaveGroup(m.coll, GroupDir(dir, "pre", m.replica_rank));
      ASSERT_EQ(shardrec_mesh_sync(m.mesh, m.coll, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
          << shardrec_last_error();
      SaveGroup(m.coll, GroupDir(dir, "post", m.replica_rank));
      shardrec_dynamic_table_stats_t st;
      shardrec_dynamic_table_stats_init(&st, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
      ASSERT_EQ(shardrec_embedding_dynamic_stats(m.coll, "t0", &st), SHARDREC_OK);
      EXPECT_EQ(st.size, s.base.tables[0].rows);
    });
    if (HasFatalFailure()) return;
    std::vector<Table> tables;
    const std::vector<Table> pre0 = ReadCheckpoint(GroupDir(dir, "pre", 0));
    const std::vector<Table> pre1 = ReadCheckpoint(GroupDir(dir, "pre", 1));
    const std::vector<Table> post0 = ReadCheckpoint(GroupDir(dir, "post", 0));
    const std::vector<Table> post1 = ReadCheckpoint(GroupDir(dir, "post", 1));
    for (size_t t = 0; t < 2; ++t) {
      Table want = Merge({pre0[t], pre1[t]});
      // The victims: the least recently seen, smaller id first.
      std::vector<std::pair<int64_t, int64_t>> order;
      for (const auto& [id, step] : last[t]) order.push_back({step, id});
      std::sort(order.begin(), order.end());
      const size_t excess = last[t].size() - static_cast<size_t>(s.base.tables[t].rows);
      for (size_t i = 0; i < excess; ++i) want.erase(order[i].second);
      const std::string what = "run " + std::to_string(run) + " table " + std::to_string(t);
      ExpectSame(post0[t], want, what + " replica 0");
      ExpectSame(post1[t], want, what + " replica 1");
      tables.push_back(post0[t]);
    }
    runs.push_back(tables);
  }
  for (int t = 0; t < 2; ++t) ExpectSame(runs[1][t], runs[0][t], "second run");
}

// A replica's score of an id (SCORE eviction): replicas score shared ids differently, with ties
// and negative scores among them.
double ReplicaScore(int64_t id, int32_t replica) {
  const uint64_t x = static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ull + replica * 0x51ull;
  return static_cast<double>((x >> 40) % 23) - 11.0;
}

// SCORE tables on two replicas of one table-wise shard whose union exceeds the capacity, each
// replica scoring its own ids: the sync keeps per id the maximum of its holders' scores, evicts
// the lowest (ties: the smaller id), the same on both replicas; the merged rows are the holders'
// average; a mesh checkpoint keeps the scores, and a 1D load of it has them (it saves them
// again).
TEST(DynamicMesh, ScoresMergeByMaximumAndEvictLowestFirst) {
  DynScenario s =
      MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 64, 24);
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_SCORE;
  DynScenario sw = s;
  sw.base.world = 2;
  const auto batches = MakeDynBatches(sw);
  const std::vector<int32_t> table_of = {0, 1, 1};
  std::vector<std::vector<std::set<int64_t>>> seen(2, std::vector<std::set<int64_t>>(2));
  for (int32_t step = 0; step < s.base.steps; ++step) {
    for (int r = 0; r < 2; ++r) {
      const RefBatch& b = batches[step][r];
      size_t at = 0;
      for (int32_t f = 0; f < 3; ++f)
        for (int64_t i = 0; i < b.batch_size; ++i)
          for (int32_t k = 0; k < b.lengths[f * b.batch_size + i]; ++k)
            seen[r][table_of[f]].insert(b.ids[at++]);
    }
  }
  std::vector<std::map<int64_t, double>> want_scores(2);  // per table: the maximum
  for (int t = 0; t < 2; ++t) {
    for (int r = 0; r < 2; ++r)
      for (int64_t id : seen[r][t]) {
        auto it = want_scores[t].find(id);
        const double x = ReplicaScore(id, r);
        if (it == want_scores[t].end() || x > it->second) want_scores[t][id] = x;
      }
    s.base.tables[t].rows = static_cast<int64_t>(std::max(seen[0][t].size(), seen[1][t].size()));
    ASSERT_LT(s.base.tables[t].rows, static_cast<int64_t>(want_scores[t].size()));
  }
  const int64_t dim = DynOutputDim(s);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  const std::string dir = Dir("scores");
  const std::string ckpt = dir + "/ckpt";
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, plan.get(), &opt, s.base.seed, &m);
    for (int32_t step = 0; step < s.base.steps; ++step)
      TrainStep(m.coll, batches[step][r], dim, step, r, nullptr);
    for (int t = 0; t < 2; ++t) {
      const std::vector<int64_t> ids(seen[m.replica_rank][t].begin(),
                                     seen[m.replica_rank][t].end());
      std::vector<double> scores;
      for (int64_t id : ids) scores.push_back(ReplicaScore(id, m.replica_rank));
      size_t num_set = 0;
      ASSERT_EQ(shardrec_embedding_dynamic_set_scores(m.coll, t == 0 ? "t0" : "t1", ids.data(),
                                                      scores.data(), ids.size(), &num_set),
                SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_EQ(num_set, ids.size());  // training evicted nothing: every id has its row
    }
    SaveGroup(m.coll, GroupDir(dir, "pre", m.replica_rank));
    ASSERT_EQ(shardrec_mesh_sync(m.mesh, m.coll, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
        << shardrec_last_error();
    SaveGroup(m.coll, GroupDir(dir, "post", m.replica_rank));
    ASSERT_EQ(shardrec_checkpoint_save_mesh(m.mesh, m.coll, ckpt.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  });
  if (HasFatalFailure()) return;
  SpawnRanks(1, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, r), &opt, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    ASSERT_EQ(shardrec_checkpoint_load(c, ckpt.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    SaveGroup(c, GroupDir(dir, "reloaded", 0));
  });
  if (HasFatalFailure()) return;
  const std::vector<Table> pre0 = ReadCheckpoint(GroupDir(dir, "pre", 0));
  const std::vector<Table> pre1 = ReadCheckpoint(GroupDir(dir, "pre", 1));
  for (const char* stage : {"post_r0", "post_r1", "reloaded"}) {
    const std::string at = std::string(stage) == "reloaded"  ? GroupDir(dir, "reloaded", 0)
                           : std::string(stage) == "post_r0" ? GroupDir(dir, "post", 0)
                                                             : GroupDir(dir, "post", 1);
    const std::vector<Table> got = ReadCheckpoint(at);
    const std::vector<std::map<int64_t, double>> scores = ReadScores(at);
    for (size_t t = 0; t < 2; ++t) {
      std::vector<std::pair<double, int64_t>> order;
      for (const auto& [id, x] : want_scores[t]) order.push_back({x, id});
      std::sort(order.begin(), order.end());
      std::map<int64_t, double> kept = want_scores[t];
      Table want = Merge({pre0[t], pre1[t]});
      const size_t excess = order.size() - static_cast<size_t>(s.base.tables[t].rows);
      for (size_t i = 0; i < excess; ++i) {
        kept.erase(order[i].second);
        want.erase(order[i].second);
      }
      const std::string what = std::string(stage) + " table " + std::to_string(t);
      ExpectSame(got[t], want, what);
      EXPECT_EQ(scores[t], kept) << what;
    }
  }
}

// A weights-only sync: the weights merge as in a full sync; each replica keeps its own optimizer
// state of the ids it held and takes the holders' average for the ids it gains.
TEST(DynamicMesh, WeightsOnlySyncKeepsEachReplicasOwnState) {
  DynScenario s =
      MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 64, 24);
  DynScenario sw = s;
  sw.base.world = 2;
  const auto batches = MakeDynBatches(sw);
  const int64_t dim = DynOutputDim(s);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  const std::string dir = Dir("weights_only");
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, plan.get(), &opt, s.base.seed, &m);
    for (int32_t step = 0; step < 3; ++step)
      TrainStep(m.coll, batches[step][r], dim, step, r, nullptr);
    SaveGroup(m.coll, GroupDir(dir, "pre", m.replica_rank));
    ASSERT_EQ(shardrec_mesh_sync(m.mesh, m.coll, SHARDREC_SYNC_WEIGHTS_ONLY), SHARDREC_OK)
        << shardrec_last_error();
    SaveGroup(m.coll, GroupDir(dir, "post", m.replica_rank));
  });
  if (HasFatalFailure()) return;
  const std::vector<Table> pre[2] = {ReadCheckpoint(GroupDir(dir, "pre", 0)),
                                     ReadCheckpoint(GroupDir(dir, "pre", 1))};
  for (int r = 0; r < 2; ++r) {
    const std::vector<Table> post = ReadCheckpoint(GroupDir(dir, "post", r));
    for (size_t t = 0; t < 2; ++t) {
      Table want = Merge({pre[0][t], pre[1][t]});
      for (auto& [id, rows] : want) {
        auto own = pre[r][t].find(id);
        if (own == pre[r][t].end()) continue;
        for (auto& [name, v] : rows)
          if (name != "weights") v = own->second.at(name);
      }
      ExpectSame(post[t], want, "replica " + std::to_string(r) + " table " + std::to_string(t));
    }
  }
}

int32_t FailingHook(void*, size_t, int32_t, void*) { return SHARDREC_EIO; }

// A sync that fails after the dynamic rows were gathered (here the fixed averaging's hook fails
// on every replica) leaves every dynamic table as it was; the next sync merges.
TEST(DynamicMesh, FailedSyncChangesNoDynamicRow) {
  DynScenario s =
      MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 64, 24);
  DynScenario sw = s;
  sw.base.world = 2;
  const auto batches = MakeDynBatches(sw);
  const int64_t dim = DynOutputDim(s);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  const std::string dir = Dir("failed_sync");
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, plan.get(), &opt, s.base.seed, &m);
    for (int32_t step = 0; step < 2; ++step)
      TrainStep(m.coll, batches[step][r], dim, step, r, nullptr);
    SaveGroup(m.coll, GroupDir(dir, "pre", m.replica_rank));
    ASSERT_EQ(shardrec_mesh_set_sync_hook(m.mesh, FailingHook, nullptr), SHARDREC_OK);
    EXPECT_NE(shardrec_mesh_sync(m.mesh, m.coll, SHARDREC_SYNC_DEFAULT), SHARDREC_OK);
    SaveGroup(m.coll, GroupDir(dir, "failed", m.replica_rank));
    ASSERT_EQ(shardrec_mesh_set_sync_hook(m.mesh, nullptr, nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_mesh_sync(m.mesh, m.coll, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
        << shardrec_last_error();
    SaveGroup(m.coll, GroupDir(dir, "post", m.replica_rank));
  });
  if (HasFatalFailure()) return;
  for (int r = 0; r < 2; ++r) {
    const std::vector<Table> pre = ReadCheckpoint(GroupDir(dir, "pre", r));
    const std::vector<Table> failed = ReadCheckpoint(GroupDir(dir, "failed", r));
    for (size_t t = 0; t < 2; ++t)
      ExpectSame(failed[t], pre[t], "after the failed sync, replica " + std::to_string(r));
  }
  const std::vector<Table> pre0 = ReadCheckpoint(GroupDir(dir, "pre", 0));
  const std::vector<Table> pre1 = ReadCheckpoint(GroupDir(dir, "pre", 1));
  for (int r = 0; r < 2; ++r) {
    const std::vector<Table> post = ReadCheckpoint(GroupDir(dir, "post", r));
    for (size_t t = 0; t < 2; ++t)
      ExpectSame(post[t], Merge({pre0[t], pre1[t]}),
                 "after the sync, replica " + std::to_string(r));
  }
}

// Replicas that trained on different ids and were not synced hold different keys: a mesh save
// fails on every rank and publishes nothing; after a sync it succeeds.
TEST(DynamicMesh, SaveBeforeSyncIsRefusedOnEveryRank) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_SGD, 64, 24);
  DynScenario sw = s;
  sw.base.world = 2;
  const auto batches = MakeDynBatches(sw);
  const int64_t dim = DynOutputDim(s);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  const std::string ckpt = Dir("refused") + "/ckpt";
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, plan.get(), &opt, s.base.seed, &m);
    TrainStep(m.coll, batches[0][r], dim, 0, r, nullptr);
    EXPECT_EQ(shardrec_checkpoint_save_mesh(m.mesh, m.coll, ckpt.c_str(), nullptr),
              SHARDREC_EUSAGE);
    EXPECT_NE(std::string(shardrec_last_error()).find("sync"), std::string::npos)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_mesh_sync(m.mesh, m.coll, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
        << shardrec_last_error();
  });
  EXPECT_FALSE(std::filesystem::exists(ckpt + "/manifest.json"));
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, plan.get(), &opt, s.base.seed, &m);
    TrainStep(m.coll, batches[0][r], dim, 0, r, nullptr);
    ASSERT_EQ(shardrec_mesh_sync(m.mesh, m.coll, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_EQ(shardrec_checkpoint_save_mesh(m.mesh, m.coll, ckpt.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  });
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/manifest.json"));
}

// A data-parallel dynamic table on a 2 x 1 mesh agrees over the world: a forward one sharding
// group refuses (its output buffer) or evaluates while the other trains fails on both groups and
// inserts nothing; the next forward trains on both.
TEST(DynamicMesh, DataParallelForwardRefusedInOneGroupFailsBoth) {
  DynScenario s =
      MakeDynScenario(1, SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_OPTIMIZER_SGD, 64, 24);
  DynScenario sw = s;
  sw.base.world = 2;
  const auto batches = MakeDynBatches(sw);
  const int64_t dim = DynOutputDim(s);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, plan.get(), &opt, s.base.seed, &m);
    auto size = [&] {
      shardrec_dynamic_table_stats_t st;
      shardrec_dynamic_table_stats_init(&st, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
      EXPECT_EQ(shardrec_embedding_dynamic_stats(m.coll, "t0", &st), SHARDREC_OK);
      return st.size;
    };
    const RefBatch& b = batches[0][r];
    KjtHolder kjt(b, 3, false);
    std::vector<float> y(static_cast<size_t>(b.batch_size * dim));
    const size_t short_len = r == 1 ? y.size() - 1 : y.size();
    EXPECT_EQ(shardrec_embedding_forward(m.coll, kjt.view(), y.data(), short_len, nullptr),
              SHARDREC_EINVAL)
        << "rank " << r;
    EXPECT_EQ(size(), 0) << "rank " << r;
    ASSERT_EQ(shardrec_embedding_set_training(m.coll, r == 0 ? 1 : 0), SHARDREC_OK);
    EXPECT_EQ(shardrec_embedding_forward(m.coll, kjt.view(), y.data(), y.size(), nullptr),
              SHARDREC_EUSAGE)
        << "rank " << r;
    EXPECT_EQ(size(), 0) << "rank " << r;
    ASSERT_EQ(shardrec_embedding_set_training(m.coll, 1), SHARDREC_OK);
    TrainStep(m.coll, b, dim, 0, r, nullptr);
    // Rank 0 of each sharding group reports its copy: both groups hold both groups' ids.
    EXPECT_GT(size(), 0) << "rank " << r;
  });
}

// A data-parallel dynamic table is agreed over the whole mesh, so a sync leaves it alone: with 3
// replicas (where an fp32 average of identical copies, sum / 3, need not give back their bits) its
// ids, weights and Adam states are bit for bit those of before the sync, on every replica. 3x1:
// both tables data-parallel (nothing is merged); 3x2: beside a row-wise table, which is merged.
TEST(DynamicMesh, DataParallelSyncKeepsTheBitsOnThreeReplicas) {
  for (int32_t shard_size : {1, 2}) {
    SCOPED_TRACE("3x" + std::to_string(shard_size));
    const int32_t world = 3 * shard_size;
    DynScenario s = MakeDynScenario(shard_size, SHARDREC_SHARDING_DATA_PARALLEL,
                                    SHARDREC_OPTIMIZER_ADAM, 64, 24);
    if (shard_size == 2) s.base.sharding[1] = SHARDREC_SHARDING_ROW_WISE;
    DynScenario sw = s;
    sw.base.world = world;
    sw.base.steps = 3;
    const auto batches = MakeDynBatches(sw);
    const int64_t dim = DynOutputDim(s);
    PlanPtr plan = MakeDynPlan(s);
    ASSERT_NE(plan, nullptr);
    const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
    const std::string dir = Dir("dp_bits_3x" + std::to_string(shard_size));
    SpawnRanks(world, [&](int r) {
      MeshRank m;
      MakeMeshRank(world, shard_size, r, plan.get(), &opt, s.base.seed, &m);
      for (int32_t step = 0; step < 3; ++step)
        TrainStep(m.coll, batches[step][r], dim, step, r, nullptr);
      SaveGroup(m.coll, GroupDir(dir, "pre", m.group));
      ASSERT_EQ(shardrec_mesh_sync(m.mesh, m.coll, SHARDREC_SYNC_WEIGHTS_AND_STATE), SHARDREC_OK)
          << shardrec_last_error();
      SaveGroup(m.coll, GroupDir(dir, "post", m.group));
    });
    if (HasFatalFailure()) return;
    const std::vector<Table> first = ReadCheckpoint(GroupDir(dir, "pre", 0));
    ASSERT_FALSE(first[0].empty());
    for (int32_t g = 0; g < 3; ++g) {
      const std::vector<Table> pre = ReadCheckpoint(GroupDir(dir, "pre", g));
      const std::vector<Table> post = ReadCheckpoint(GroupDir(dir, "post", g));
      ExpectSame(pre[0], first[0], "t0 before the sync, group " + std::to_string(g));
      ExpectSame(post[0], first[0], "t0 after the sync, group " + std::to_string(g));
      if (shard_size == 1)
        ExpectSame(post[1], first[1], "t1 after the sync, group " + std::to_string(g));
    }
  }
}

}  // namespace
}  // namespace shardrec::testing
