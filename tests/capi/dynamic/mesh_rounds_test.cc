// Dynamic tables on 2D meshes over many syncs (docs/dynamic-tables.md, "2D merge"): after the
// first sync a merge gathers only the rows of the ids some replica changed since the last one
// and takes the others from each replica's own table. Each case trains five rounds of two steps
// and syncs after each (weights and state, then weights only, then both again), twice: as is, and
// with every rank saving and reloading its sharding group's checkpoint before each sync (a load
// ends the change tracking, so that sync gathers every row). Both runs must hold the same rows,
// bit for bit, after every sync (the merged tables read from checkpoints, and every pool id
// looked up); with room for every id, each sync's result is the merge rule applied to the tables
// before it, and the syncs that may gather only the changed rows send fewer bytes (never more).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/replica.h"
#include "tests/capi/dynamic/mesh_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

struct RoundsCase {
  const char* name;
  int32_t replicas, shard_size, sharding, optimizer, eviction;
  int32_t admission = 1;
  int64_t capacity = 256;  // rows per table; the pools hold 160 ids each
  int32_t dtype = SHARDREC_DTYPE_FLOAT32;
};

constexpr int32_t kRounds = 5, kStepsPerRound = 2, kDistinct = 160;
constexpr int32_t kModes[kRounds] = {SHARDREC_SYNC_WEIGHTS_AND_STATE,
                                     SHARDREC_SYNC_WEIGHTS_AND_STATE, SHARDREC_SYNC_WEIGHTS_ONLY,
                                     SHARDREC_SYNC_WEIGHTS_ONLY, SHARDREC_SYNC_WEIGHTS_AND_STATE};

// A replica's eviction score of an id at a step (SCORE tables): replicas disagree, with ties.
double RoundScore(int64_t id, int32_t step, int32_t replica) {
  const uint64_t x = static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ull +
                     static_cast<uint64_t>(step) * 0x2545f491ull + replica * 0x51ull;
  return static_cast<double>((x >> 40) % 17) - 8.0;
}

// What one run leaves, per round: every world rank's lookup of every pool id after the sync and
// its sync's bytes.
struct RoundsRun {
  std::vector<std::vector<std::vector<float>>> probe;  // [round][rank]
  std::vector<std::vector<uint64_t>> bytes;            // [round][rank]
};

class DynamicMeshRounds : public ::testing::TestWithParam<RoundsCase> {
 protected:
  void SetUp() override {
    const RoundsCase& p = GetParam();
    DynScenario s = MakeDynScenario(p.shard_size, p.sharding, p.optimizer, p.capacity, kDistinct);
    for (auto& d : s.dynamic) {
      d.eviction = p.eviction;
      d.admission_threshold = p.admission;
    }
    for (auto& t : s.base.tables) t.dtype = p.dtype;
    world_ = p.replicas * p.shard_size;
    c_ = PlanMesh(s, world_, kRounds * kStepsPerRound);
    ASSERT_NE(c_.plan, nullptr);
  }

  // One sample per pool id: feature f0 reads t0's pool, f1 t1's, f2 nothing.
  RefBatch Probe() const {
    RefBatch b;
    b.batch_size = kDistinct;
    b.lengths.assign(static_cast<size_t>(3 * b.batch_size), 0);
    for (int32_t f = 0; f < 2; ++f)
      for (size_t i = 0; i < c_.s.pools[f].size(); ++i) {
        b.lengths[static_cast<size_t>(f * b.batch_size) + i] = 1;
        b.ids.push_back(c_.s.pools[f][i]);
      }
    return b;
  }

  // Trains the rounds on a fresh mesh; `reload`: every rank saves and reloads its group's
  // checkpoint before each sync. Saves each group's checkpoint before ("pre") and after ("post")
  // each sync under `dir`.
  RoundsRun Run(bool reload, const std::string& dir) {
    const RoundsCase& p = GetParam();
    RoundsRun run;
    run.probe.assign(kRounds, std::vector<std::vector<float>>(static_cast<size_t>(world_)));
    run.bytes.assign(kRounds, std::vector<uint64_t>(static_cast<size_t>(world_)));
    const RefBatch probe = Probe();
    SpawnRanks(world_, [&](int r) {
      MeshRank m;
      MakeMeshRank(world_, p.shard_size, r, c_.plan.get(), &c_.opt, c_.s.base.seed, &m);
      for (int32_t round = 0; round < kRounds; ++round) {
        for (int32_t k = 0; k < kStepsPerRound; ++k) {
          const int32_t step = round * kStepsPerRound + k;
          TrainStep(m.coll, c_.batches[step][r], c_.dim, step, r, nullptr);
          if (p.eviction != SHARDREC_EVICTION_SCORE) continue;
          // The ids of this step's batch (f0 reads t0, f1 and f2 t1) take this replica's score.
          const RefBatch& b = c_.batches[step][r];
          std::vector<int64_t> ids[2];
          size_t at = 0;
          for (int32_t f = 0; f < 3; ++f)
            for (int64_t i = 0; i < b.batch_size; ++i)
              for (int32_t n = 0; n < b.lengths[f * b.batch_size + i]; ++n)
                ids[f == 0 ? 0 : 1].push_back(b.ids[at++]);
          for (int t = 0; t < 2; ++t) {
            std::vector<double> scores;
            for (int64_t id : ids[t]) scores.push_back(RoundScore(id, step, m.replica_rank));
            ASSERT_EQ(
                shardrec_embedding_dynamic_set_scores(m.coll, t == 0 ? "t0" : "t1", ids[t].data(),
                                                      scores.data(), scores.size(), nullptr),
                SHARDREC_OK)
                << shardrec_last_error();
          }
        }
        const std::string stage = std::to_string(round);
        if (p.dtype == SHARDREC_DTYPE_FLOAT32)
          SaveGroup(m.coll, GroupDir(dir, ("pre" + stage).c_str(), m.replica_rank));
        if (reload) {
          const std::string again = GroupDir(dir, ("reload" + stage).c_str(), m.replica_rank);
          SaveGroup(m.coll, again);
          ASSERT_EQ(shardrec_checkpoint_load(m.coll, again.c_str(), nullptr), SHARDREC_OK)
              << shardrec_last_error();
        }
        ASSERT_EQ(shardrec_mesh_sync(m.mesh, m.coll, kModes[round]), SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_EQ(shardrec_mesh_sync_stats(m.mesh, &run.bytes[round][r], nullptr, nullptr),
                  SHARDREC_OK);
        if (p.dtype == SHARDREC_DTYPE_FLOAT32)
          SaveGroup(m.coll, GroupDir(dir, ("post" + stage).c_str(), m.replica_rank));
        KjtHolder kjt(probe, 3, false);
        std::vector<float>& out = run.probe[round][r];
        out.resize(static_cast<size_t>(probe.batch_size * c_.dim));
        ASSERT_EQ(shardrec_embedding_set_training(m.coll, 0), SHARDREC_OK);
        ASSERT_EQ(shardrec_embedding_forward(m.coll, kjt.view(), out.data(), out.size(), nullptr),
                  SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_EQ(shardrec_embedding_set_training(m.coll, 1), SHARDREC_OK);
      }
    });
    return run;
  }

  int32_t world_ = 0;
  MeshScenario c_;
};

TEST_P(DynamicMeshRounds, ChangedRowsMergeAsEveryRow) {
  const RoundsCase& p = GetParam();
  const std::string dir = FreshDir(std::string("rounds_") + p.name);
  std::filesystem::create_directories(dir + "/tracked");
  std::filesystem::create_directories(dir + "/reloaded");
  const RoundsRun tracked = Run(false, dir + "/tracked");
  if (HasFatalFailure()) return;
  const RoundsRun reloaded = Run(true, dir + "/reloaded");
  if (HasFatalFailure()) return;
  uint64_t tracked_bytes = 0, reloaded_bytes = 0;
  for (int32_t round = 0; round < kRounds; ++round) {
    for (int32_t r = 0; r < world_; ++r) {
      const std::vector<float>& a = tracked.probe[round][r];
      const std::vector<float>& b = reloaded.probe[round][r];
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "round " << round << " rank " << r << ": the lookups differ";
      // The syncs whose previous merge wrote what they sync (not the first, nor the one with
      // the optimizer state after weights-only syncs) gather the changed rows only.
      const bool changed_only = round > 0 && !(kModes[round] == SHARDREC_SYNC_WEIGHTS_AND_STATE &&
                                               kModes[round - 1] == SHARDREC_SYNC_WEIGHTS_ONLY);
      if (round >= 2 && changed_only) {
        tracked_bytes += tracked.bytes[round][r];
        reloaded_bytes += reloaded.bytes[round][r];
      }
    }
    if (p.dtype != SHARDREC_DTYPE_FLOAT32) continue;
    for (int32_t g = 0; g < p.replicas; ++g) {
      const std::string stage = "post" + std::to_string(round);
      const std::vector<Table> a = ReadCheckpoint(GroupDir(dir + "/tracked", stage.c_str(), g));
      const std::vector<Table> b = ReadCheckpoint(GroupDir(dir + "/reloaded", stage.c_str(), g));
      for (size_t t = 0; t < 2; ++t)
        ExpectSame(a[t], b[t], "round " + std::to_string(round) + " group " + std::to_string(g));
    }
    if (p.capacity < 2 * kDistinct) continue;  // the merge rule below has no eviction
    std::vector<std::vector<Table>> pre;       // [replica][table]
    for (int32_t g = 0; g < p.replicas; ++g)
      pre.push_back(
          ReadCheckpoint(GroupDir(dir + "/tracked", ("pre" + std::to_string(round)).c_str(), g)));
    for (int32_t g = 0; g < p.replicas; ++g) {
      const std::vector<Table> post =
          ReadCheckpoint(GroupDir(dir + "/tracked", ("post" + std::to_string(round)).c_str(), g));
      for (size_t t = 0; t < 2; ++t) {
        std::vector<Table> before;
        for (const auto& x : pre) before.push_back(x[t]);
        Table want = Merge(before);
        // Weights only: a replica keeps its own optimizer state of the ids it held.
        if (kModes[round] == SHARDREC_SYNC_WEIGHTS_ONLY)
          for (auto& [id, rows] : want) {
            const auto own = pre[static_cast<size_t>(g)][t].find(id);
            if (own == pre[static_cast<size_t>(g)][t].end()) continue;
            for (auto& [name, v] : rows)
              if (name != "weights") v = own->second.at(name);
          }
        ExpectSame(post[t], want,
                   "merge rule, round " + std::to_string(round) + " group " + std::to_string(g));
      }
    }
  }
  // A tight table changes most of its rows between syncs: every row is gathered then.
  if (p.capacity >= 2 * kDistinct)
    EXPECT_LT(tracked_bytes, reloaded_bytes) << "the changed rows alone should be fewer bytes";
  else
    EXPECT_LE(tracked_bytes, reloaded_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DynamicMeshRounds,
    ::testing::Values(RoundsCase{"lru_roomy_2x1", 2, 1, SHARDREC_SHARDING_TABLE_WISE,
                                 SHARDREC_OPTIMIZER_ADAGRAD, SHARDREC_EVICTION_LRU, 1, 512},
                      RoundsCase{"adam_roomy_3x1", 3, 1, SHARDREC_SHARDING_TABLE_WISE,
                                 SHARDREC_OPTIMIZER_ADAM, SHARDREC_EVICTION_NONE, 1, 512},
                      RoundsCase{"lru_tight_3x1", 3, 1, SHARDREC_SHARDING_TABLE_WISE,
                                 SHARDREC_OPTIMIZER_ADAGRAD, SHARDREC_EVICTION_LRU, 1, 96},
                      RoundsCase{"lfu_admission_2x2", 2, 2, SHARDREC_SHARDING_ROW_WISE,
                                 SHARDREC_OPTIMIZER_ADAGRAD, SHARDREC_EVICTION_LFU, 2, 96},
                      RoundsCase{"score_tight_2x2", 2, 2, SHARDREC_SHARDING_ROW_WISE,
                                 SHARDREC_OPTIMIZER_SGD, SHARDREC_EVICTION_SCORE, 1, 96},
                      RoundsCase{"bf16_3x1", 3, 1, SHARDREC_SHARDING_TABLE_WISE,
                                 SHARDREC_OPTIMIZER_ADAGRAD, SHARDREC_EVICTION_LRU, 1, 64,
                                 SHARDREC_DTYPE_BFLOAT16}),
    [](const ::testing::TestParamInfo<RoundsCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace shardrec::testing
