// A 2D mesh of several replica groups refuses tiered tables (docs/disk-tier.md, Limits): its
// sync would average the replicas' caches, not their rows. Creation on such a mesh, a sync of a
// tiered collection made beside it and its 2D save each fail on every rank with
// SHARDREC_EUNSUPPORTED naming the table, and change nothing: no collection, the same weights
// and states, no checkpoint, and the collection goes on training.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/replica.h"
#include "shardrec/shardrec.hpp"
#include "tests/support/spawn_ranks.h"
#include "tiered_test_util.h"

namespace shardrec::testing {
namespace {

TEST(TieredRefusal, MeshOfSeveralReplicaGroupsRefusesTieredTablesAndChangesNothing) {
  constexpr int32_t kWorld = 2;  // 2 replica groups of sharding groups of 1 rank
  const Scenario s =
      TieredScenario(1, SHARDREC_SHARDING_TABLE_WISE, 1, 0, SHARDREC_POOLING_SUM, false);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string dir = FreshDir("mesh_refusal");
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(kWorld, [&](int r) {
    shardrec_mesh_options_t mo;
    shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
    mo.sharding_group_size = 1;
    shardrec_mesh_t* mesh = nullptr;
    ASSERT_EQ(shardrec_mesh_create(&mesh, GroupComm(kWorld, r), &mo), SHARDREC_OK)
        << shardrec_last_error();
    const std::unique_ptr<shardrec_mesh_t, void (*)(shardrec_mesh_t*)> mesh_owner(
        mesh, shardrec_mesh_destroy);
    const std::string tier_dir = dir + "/rank" + std::to_string(r);
    shardrec_table_tier_t tier = SHARDREC_TABLE_TIER_INIT;
    tier.table = "t1";
    tier.dir = tier_dir.c_str();
    tier.cache_bytes = CacheBytesFor(s, 1, 100);
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    o.tiers = &tier;
    o.num_tiers = 1;
    // Creation on the mesh: refused on every rank, no collection.
    shardrec_embedding_t* refused = nullptr;
    EXPECT_EQ(shardrec_mesh_embedding_create(&refused, mesh, plan.get(), &opt, &o),
              SHARDREC_EUNSUPPORTED);
    EXPECT_NE(std::string(shardrec_last_error()).find("'t1'"), std::string::npos)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_EQ(refused, nullptr);
    // The same tiered collection made beside the mesh, on its sharding group (a 1D collection),
    // trains a step; the mesh's sync and 2D save refuse it and leave it as it was.
    shardrec_comm_t* shard_comm = nullptr;
    ASSERT_EQ(shardrec_mesh_sharding_comm(&shard_comm, mesh), SHARDREC_OK);
    shardrec_embedding_t* c = nullptr;
    const shardrec_status_t created =
        shardrec_embedding_create(&c, plan.get(), shard_comm, &opt, &o);
    shardrec_comm_destroy(shard_comm);
    ASSERT_EQ(created, SHARDREC_OK) << shardrec_last_error();
    CollPtr coll(c);
    KjtHolder kjt(batches[0][0], s.num_features, false);
    std::vector<float> out(grads[0][0].size());
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_embedding_backward(c, grads[0][0].data(), grads[0][0].size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    const std::vector<std::vector<float>> before = Snapshot(c, s);
    EXPECT_EQ(shardrec_mesh_step(mesh, c, nullptr), SHARDREC_EUNSUPPORTED);
    const std::string sync_error = shardrec_last_error();
    EXPECT_NE(sync_error.find("'t1'"), std::string::npos) << "rank " << r << ": " << sync_error;
    EXPECT_NE(sync_error.find("sync"), std::string::npos) << "rank " << r << ": " << sync_error;
    EXPECT_EQ(Snapshot(c, s), before) << "rank " << r << ": the refused sync changed a table";
    const std::string ckpt = dir + "/ckpt";
    EXPECT_EQ(shardrec_checkpoint_save_mesh(mesh, c, ckpt.c_str(), nullptr), SHARDREC_EUNSUPPORTED);
    const std::string save_error = shardrec_last_error();
    EXPECT_NE(save_error.find("'t1'"), std::string::npos) << "rank " << r << ": " << save_error;
    EXPECT_FALSE(std::filesystem::exists(ckpt + "/manifest.json"));
    EXPECT_EQ(Snapshot(c, s), before) << "rank " << r << ": the refused save changed a table";
    // The collection still trains.
    KjtHolder next(batches[1][0], s.num_features, false);
    EXPECT_EQ(shardrec_embedding_forward(c, next.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
  });
}

}  // namespace
}  // namespace shardrec::testing
