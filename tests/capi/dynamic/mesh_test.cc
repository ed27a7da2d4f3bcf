// Dynamic tables on 2D meshes through the C API (docs/dynamic-tables.md, "2D merge"): replicas
// trained on different batches hold different keys; after a sync every replica's table (ids,
// weights and optimizer states, read from a 1D checkpoint of its sharding group) equals the
// merge rule applied to the tables saved before the sync; over capacity the survivors are the LRU
// (or SCORE) order's and the same on every replica and in every run; a mesh checkpoint reloads
// bit-exact under another mesh and into a 1D collection, which then trains exactly as the mesh's
// first sharding group. The sync's other cases are in mesh_sync_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/replica.h"
#include "tests/capi/dynamic/mesh_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

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
      FreshDir("merge_" + std::to_string(p.replicas) + "x" + std::to_string(p.shard_size));
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
    const std::string dir = FreshDir("over_" + std::to_string(run));
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
  const std::string dir = FreshDir("scores");
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

}  // namespace
}  // namespace shardrec::testing
