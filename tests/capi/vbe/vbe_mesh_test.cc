// VBE batches (docs/variable-batch.md) on 2D meshes (shardrec/replica.h): every rank of the
// world feeds its own VBE batch to its part of a collection sharded over its sharding group and
// replicated over its replica group, and the mesh syncs after every step. A second collection on
// the same mesh is fed the expanded batches and synced alike: outputs bit for bit every step,
// weights and states at the end bit for bit where no bag is read twice, else within the
// documented bound. (Not against the reference model: with Adagrad a 2D run is model averaging,
// not global training; replica tests cover that relation for plain batches.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardrec/replica.h"
#include "tests/capi/vbe/vbe_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

struct MeshCase {
  int32_t world, shard_size, layout, sharding, pooling;
};

std::string CaseName(const MeshCase& c, VbeMode mode) {
  return "world " + std::to_string(c.world) + " S " + std::to_string(c.shard_size) + " layout " +
         std::to_string(c.layout) + " sharding " + std::to_string(c.sharding) + " pooling " +
         std::to_string(c.pooling) + " " + VbeModeName(mode);
}

void RunMesh(const MeshCase& c, VbeMode mode, bool weighted) {
  SCOPED_TRACE(CaseName(c, mode) + (weighted ? " weighted" : ""));
  Scenario s = StandardScenario(c.shard_size, c.sharding, c.pooling);
  s.optimizer.type = 2;  // row-wise Adagrad: a state the sync averages beside the weights
  s.optimizer.lr = 0.05f;
  s.max_bag = 3;
  s.weighted = weighted;
  s.data_seed = 41;
  PlanPtr plan = MakePlan(s);  // for one sharding group
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  std::vector<shardrec_mesh_t*> meshes(static_cast<size_t>(c.world), nullptr);
  Scenario world = s;
  world.world = c.world;  // every rank of the mesh feeds a batch
  VbeRunOptions o;
  o.mode = mode;
  o.check_reference = false;
  o.create = [&](int r, int which, shardrec_embedding_t** out) {
    shardrec_mesh_t*& mesh = meshes[static_cast<size_t>(r)];
    if (which == 0) {
      shardrec_mesh_options_t mo;
      shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
      mo.sharding_group_size = c.shard_size;
      mo.layout = c.layout;
      ASSERT_EQ(shardrec_mesh_create(&mesh, GroupComm(c.world, r), &mo), SHARDREC_OK)
          << shardrec_last_error();
    }
    shardrec_embedding_options_t eo;
    shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    eo.seed = s.seed;
    ASSERT_EQ(shardrec_mesh_embedding_create(out, mesh, plan.get(), &opt, &eo), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
  };
  o.after_step = [&](int r, int, shardrec_embedding_t* coll) {
    ASSERT_EQ(shardrec_mesh_sync(meshes[static_cast<size_t>(r)], coll, SHARDREC_SYNC_DEFAULT),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
  };
  RunVbeEquivalence(world, plan.get(), o);
  for (shardrec_mesh_t* m : meshes) shardrec_mesh_destroy(m);
}

TEST(VbeMesh, ShardingTypesOnTwoByTwo) {
  const auto dl = SHARDREC_MESH_LAYOUT_DEFAULT;
  for (int32_t sharding :
       {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE,
        SHARDREC_SHARDING_COLUMN_WISE, SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_SHARDING_GRID})
    for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kInverse, VbeMode::kOnce})
      RunMesh({4, 2, dl, sharding, SHARDREC_POOLING_SUM}, mode, false);
}

TEST(VbeMesh, MeanAndSequences) {
  const auto dl = SHARDREC_MESH_LAYOUT_DEFAULT;
  for (int32_t pooling : {SHARDREC_POOLING_MEAN, SHARDREC_POOLING_NONE})
    for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kInverse, VbeMode::kOnce}) {
      RunMesh({4, 2, dl, SHARDREC_SHARDING_ROW_WISE, pooling}, mode, false);
      RunMesh({2, 1, dl, SHARDREC_SHARDING_TABLE_WISE, pooling}, mode, false);
    }
}

TEST(VbeMesh, InterHostLayoutAndFourReplicas) {
  for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kInverse}) {
    RunMesh(
        {4, 2, SHARDREC_MESH_LAYOUT_INTER_HOST, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM},
        mode, false);
    RunMesh({4, 1, SHARDREC_MESH_LAYOUT_DEFAULT, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_MEAN},
            mode, false);
  }
}

TEST(VbeMesh, Weighted) {
  for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kInverse})
    RunMesh({4, 2, SHARDREC_MESH_LAYOUT_DEFAULT, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_MEAN},
            mode, true);
}

}  // namespace
}  // namespace shardrec::testing
