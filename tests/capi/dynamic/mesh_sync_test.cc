// Dynamic tables on 2D meshes through the C API, the sync's other cases (docs/dynamic-tables.md,
// "2D merge"): a weights-only sync keeps each replica's own optimizer state of its ids; a failed
// sync changes no dynamic row; a save before the sync is refused on every rank and writes
// nothing; a data-parallel dynamic table agrees over the whole mesh, so a forward refused in one
// sharding group fails both and a sync leaves its bits alone; a delta taken across a sync is an
// ordinary one (not flagged full) that replays each replica's table at the mark to the merged one.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/replica.h"
#include "tests/capi/dynamic/mesh_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

// A weights-only sync: the weights merge as in a full sync; each replica keeps its own optimizer
// state of the ids it held and takes the holders' average for the ids it gains.
TEST(DynamicMesh, WeightsOnlySyncKeepsEachReplicasOwnState) {
  const MeshScenario c = PlanMesh(
      MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 64, 24), 2);
  ASSERT_NE(c.plan, nullptr);
  const auto& batches = c.batches;
  const int64_t dim = c.dim;
  const std::string dir = FreshDir("weights_only");
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, c.plan.get(), &c.opt, c.s.base.seed, &m);
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

// A merge keeps the table's history since the mark (docs/dynamic-tables.md, "Loads and full
// deltas"): every merged row is a changed row and the ids it dropped are tombstones, so the delta
// is not flagged full and, replayed onto each replica's table at the mark, gives its merged
// table. 16 slots for 24 ids, LRU: training and the merge both drop ids.
TEST(DynamicMesh, DeltaAcrossASyncIsExactAndNotFull) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_SGD, 16, 24);
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;
  const MeshScenario c = PlanMesh(s, 2, 4);
  ASSERT_NE(c.plan, nullptr);
  const std::string dir = FreshDir("delta_sync");
  struct Got {
    std::vector<int64_t> ids, tombstones;
    std::vector<float> rows;
    uint32_t flags = 0xffffffffu;
  };
  Got got[2][2];  // [replica][table]
  const char* names[2] = {"t0", "t1"};
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, c.plan.get(), &c.opt, c.s.base.seed, &m);
    for (int32_t step = 0; step < 2; ++step)
      TrainStep(m.coll, c.batches[step][r], c.dim, step, r, nullptr);
    SaveGroup(m.coll, GroupDir(dir, "mark", m.replica_rank));
    for (const char* t : names) ASSERT_EQ(shardrec_embedding_dynamic_mark(m.coll, t), SHARDREC_OK);
    for (int32_t step = 2; step < 4; ++step)
      TrainStep(m.coll, c.batches[step][r], c.dim, step, r, nullptr);
    ASSERT_EQ(shardrec_mesh_sync(m.mesh, m.coll, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
        << shardrec_last_error();
    SaveGroup(m.coll, GroupDir(dir, "post", m.replica_rank));
    for (int t = 0; t < 2; ++t) {
      Got& g = got[m.replica_rank][t];
      const auto dim = static_cast<size_t>(s.base.tables[static_cast<size_t>(t)].dim);
      size_t n = 0, nt = 0;
      shardrec_embedding_dynamic_delta_ext(m.coll, names[t], nullptr, nullptr, 0, nullptr, 0, &n,
                                           &nt, &g.flags);
      g.ids.resize(n);
      g.rows.resize(n * dim);
      g.tombstones.resize(nt);
      ASSERT_EQ(shardrec_embedding_dynamic_delta_ext(m.coll, names[t], g.ids.data(), g.rows.data(),
                                                     n, g.tombstones.data(), nt, &n, &nt, &g.flags),
                SHARDREC_OK)
          << shardrec_last_error();
    }
  });
  if (HasFatalFailure()) return;
  size_t tombstones = 0;
  for (int r = 0; r < 2; ++r) {
    const std::vector<Table> at = ReadCheckpoint(GroupDir(dir, "mark", r));
    const std::vector<Table> post = ReadCheckpoint(GroupDir(dir, "post", r));
    for (size_t t = 0; t < 2; ++t) {
      const Got& g = got[r][t];
      const std::string what = "replica " + std::to_string(r) + " table " + std::to_string(t);
      EXPECT_EQ(g.flags, 0u) << what;
      const size_t dim = g.ids.empty() ? 0 : g.rows.size() / g.ids.size();
      std::map<int64_t, std::vector<float>> replayed;
      for (const auto& [id, rows] : at[t]) replayed[id] = rows.at("weights");
      for (size_t i = 0; i < g.ids.size(); ++i)
        replayed[g.ids[i]].assign(g.rows.begin() + static_cast<int64_t>(i * dim),
                                  g.rows.begin() + static_cast<int64_t>((i + 1) * dim));
      for (int64_t id : g.tombstones) replayed.erase(id);
      tombstones += g.tombstones.size();
      ASSERT_EQ(replayed.size(), post[t].size()) << what;
      for (const auto& [id, rows] : post[t]) {
        auto it = replayed.find(id);
        ASSERT_NE(it, replayed.end()) << what << " id " << id;
        const std::vector<float>& w = rows.at("weights");
        EXPECT_TRUE(it->second.size() == w.size() &&
                    std::memcmp(it->second.data(), w.data(), w.size() * sizeof(float)) == 0)
            << what << " id " << id;
      }
    }
  }
  EXPECT_GT(tombstones, 0u);
}

int32_t FailingHook(void*, size_t, int32_t, void*) { return SHARDREC_EIO; }

// A sync that fails after the dynamic rows were gathered (here the fixed averaging's hook fails
// on every replica: t1 is a fixed table, t0 a dynamic one) leaves every dynamic table as it was;
// the next sync merges.
TEST(DynamicMesh, FailedSyncChangesNoDynamicRow) {
  DynScenario s =
      MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 64, 24);
  s.fixed_table = 1;
  for (size_t i = 0; i < s.pools[1].size(); ++i) s.pools[1][i] = static_cast<int64_t>(i * 2);
  const MeshScenario c = PlanMesh(s, 2);
  ASSERT_NE(c.plan, nullptr);
  const auto& batches = c.batches;
  const int64_t dim = c.dim;
  const std::string dir = FreshDir("failed_sync");
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, c.plan.get(), &c.opt, c.s.base.seed, &m);
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
    ExpectSame(failed[0], pre[0], "after the failed sync, replica " + std::to_string(r));
  }
  const std::vector<Table> pre0 = ReadCheckpoint(GroupDir(dir, "pre", 0));
  const std::vector<Table> pre1 = ReadCheckpoint(GroupDir(dir, "pre", 1));
  for (int r = 0; r < 2; ++r) {
    const std::vector<Table> post = ReadCheckpoint(GroupDir(dir, "post", r));
    ExpectSame(post[0], Merge({pre0[0], pre1[0]}), "after the sync, replica " + std::to_string(r));
  }
}

// Replicas that trained on different ids and were not synced hold different keys: a mesh save
// fails on every rank and publishes nothing; after a sync it succeeds.
TEST(DynamicMesh, SaveBeforeSyncIsRefusedOnEveryRank) {
  const MeshScenario c =
      PlanMesh(MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_SGD, 64, 24), 2);
  ASSERT_NE(c.plan, nullptr);
  const auto& batches = c.batches;
  const int64_t dim = c.dim;
  const std::string ckpt = FreshDir("refused") + "/ckpt";
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, c.plan.get(), &c.opt, c.s.base.seed, &m);
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
    MakeMeshRank(2, 1, r, c.plan.get(), &c.opt, c.s.base.seed, &m);
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
  const MeshScenario c = PlanMesh(
      MakeDynScenario(1, SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_OPTIMIZER_SGD, 64, 24), 2);
  ASSERT_NE(c.plan, nullptr);
  const auto& batches = c.batches;
  const int64_t dim = c.dim;
  SpawnRanks(2, [&](int r) {
    MeshRank m;
    MakeMeshRank(2, 1, r, c.plan.get(), &c.opt, c.s.base.seed, &m);
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
    const MeshScenario c = PlanMesh(s, world, 3);
    ASSERT_NE(c.plan, nullptr);
    const std::string dir = FreshDir("dp_bits_3x" + std::to_string(shard_size));
    SpawnRanks(world, [&](int r) {
      MeshRank m;
      MakeMeshRank(world, shard_size, r, c.plan.get(), &c.opt, s.base.seed, &m);
      for (int32_t step = 0; step < 3; ++step)
        TrainStep(m.coll, c.batches[step][r], c.dim, step, r, nullptr);
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
