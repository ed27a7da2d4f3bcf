// 2D over NCCL through the C API: GPU collections on a mesh whose world (so its replica group) is
// an NCCL communicator against host collections on a Gloo mesh, through the fake plugin's NCCL
// double (ranks as threads).
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/comm.h"
#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"
#include "tests/capi/embedding/nccl_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kTW = SHARDREC_SHARDING_TABLE_WISE;
constexpr int32_t kRW = SHARDREC_SHARDING_ROW_WISE;
constexpr int32_t kCW = SHARDREC_SHARDING_COLUMN_WISE;
constexpr int32_t kSum = SHARDREC_POOLING_SUM;
constexpr int32_t kRowAdagrad = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;

struct MeshDeleter {
  void operator()(shardrec_mesh_t* m) const { shardrec_mesh_destroy(m); }
};
using MeshPtr = std::unique_ptr<shardrec_mesh_t, MeshDeleter>;

MeshPtr MakeMesh(shardrec_comm_t* world, int32_t shard) {
  shardrec_mesh_options_t o;
  EXPECT_EQ(shardrec_mesh_options_init(&o, SHARDREC_MESH_OPTIONS_VERSION), SHARDREC_OK);
  o.sharding_group_size = shard;
  o.sync_interval = 1;
  o.sync_mode = SHARDREC_SYNC_WEIGHTS_AND_STATE;
  shardrec_mesh_t* m = nullptr;
  EXPECT_EQ(shardrec_mesh_create(&m, world, &o), SHARDREC_OK) << shardrec_last_error();
  return MeshPtr(m);
}

// 2D at world 4 (2 replicas x sharding groups of 2): a GPU collection on a mesh whose world is
// NCCL (its replica group NCCL too) trains like a host collection on a Gloo mesh, bit for bit,
// syncing every step; and its syncs move the device arenas over NCCL without a host <-> device
// copy (the fp32 weights and states, all-reduced in place on the device; only the host-resident
// step counter travels staged).
// With a bf16 table, its arena is averaged in fp32 through the host (as on a Gloo mesh) while the
// fp32 ones stay on the device.
void RunMeshOverNccl(bool bf16) {
  constexpr int32_t kWorld = 4;
  constexpr int32_t kShard = 2;
  Scenario s = StandardScenario(kShard, kRW, kSum);
  s.sharding = {kTW, kRW, kCW};
  if (bf16) s.tables[1].dtype = SHARDREC_DTYPE_BFLOAT16;
  s.optimizer.type = kRowAdagrad;
  s.steps = 3;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  Scenario global = s;
  global.world = kWorld;  // every rank its own batch: the replicas diverge between syncs
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(global, ref);
  const auto grads = MakeGrads(global, batches, ref.output_dim());
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK);
  std::barrier sync_point(kWorld);
  std::vector<int64_t> copies_during_sync(static_cast<size_t>(s.steps), -1);
  const int64_t collectives_before = NcclCounter(0);
  SpawnRanks(kWorld, [&](int r) {
    CommPtr nccl(NcclComm(id, kWorld, r, 60000));
    ASSERT_NE(nccl, nullptr);
    MeshPtr mh = MakeMesh(GroupComm(kWorld, r), kShard);
    MeshPtr md = MakeMesh(nccl.get(), kShard);
    ASSERT_TRUE(mh && md);
    const shardrec_embedding_options_t oh = Options(s, false);
    const shardrec_embedding_options_t od = Options(s, true);
    shardrec_embedding_t* h = nullptr;
    shardrec_embedding_t* d = nullptr;
    ASSERT_EQ(shardrec_mesh_embedding_create(&h, mh.get(), plan.get(), &opt, &oh), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr ch(h);
    ASSERT_EQ(shardrec_mesh_embedding_create(&d, md.get(), plan.get(), &opt, &od), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    CollPtr cd(d);
    for (int32_t step = 0; step < s.steps; ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, false);
      const std::vector<float>& g = grads[step][r];
      std::vector<float> out_h(g.size()), out_d(g.size(), -7.0f);
      ASSERT_EQ(shardrec_embedding_forward(h, kjt.view(), out_h.data(), out_h.size(), nullptr),
                SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_forward(d, kjt.view(), out_d.data(), out_d.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_TRUE(BitEqual(out_h, out_d)) << "rank " << r << " step " << step;
      ASSERT_EQ(shardrec_embedding_backward(h, g.data(), g.size(), nullptr), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
      int32_t synced = 0;
      ASSERT_EQ(shardrec_mesh_step(mh.get(), h, &synced), SHARDREC_OK);
      // Only the NCCL mesh's syncs run between these barriers: the fake's copy counters then
      // count theirs alone.
      sync_point.arrive_and_wait();
      const int64_t before = RuntimeCounter(1) + RuntimeCounter(2);
      sync_point.arrive_and_wait();
      ASSERT_EQ(shardrec_mesh_step(md.get(), d, &synced), SHARDREC_OK) << shardrec_last_error();
      EXPECT_EQ(synced, 1);
      sync_point.arrive_and_wait();
      if (r == 0)
        copies_during_sync[static_cast<size_t>(step)] =
            RuntimeCounter(1) + RuntimeCounter(2) - before;
      sync_point.arrive_and_wait();
    }
    const auto sh = Snapshot(h, s);
    const auto sd = Snapshot(d, s);
    ASSERT_EQ(sh.size(), sd.size());
    for (size_t i = 0; i < sh.size(); ++i)
      EXPECT_TRUE(BitEqual(sh[i], sd[i])) << "rank " << r << " tensor " << i;
  });
  if (FakeLoaded() && !bf16) {
    EXPECT_GT(NcclCounter(0), collectives_before);
    // Per rank one copy up and one down: the step counter, which lives on the host (its
    // maximum travels staged); none for the arenas.
    for (size_t i = 0; i < copies_during_sync.size(); ++i)
      EXPECT_EQ(copies_during_sync[i], 2 * kWorld)
          << "host <-> device copies in the sync of step " << i;
  }
}

TEST(EmbeddingGpuNccl, MeshSyncOverNcclEqualsGloo) {
  REQUIRE_WORLD(4);
  RunMeshOverNccl(false);
}

TEST(EmbeddingGpuNccl, MeshSyncOverNcclWithABf16TableEqualsGloo) {
  REQUIRE_WORLD(4);
  RunMeshOverNccl(true);
}

}  // namespace
}  // namespace shardrec::testing
