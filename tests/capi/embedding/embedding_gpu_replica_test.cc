// 2D (replicated) training of GPU collections through the public C API, run on the CPU through
// the fake embedding plugin: at world 4 (2 replicas x sharding groups of 2, ranks as threads) a
// GPU collection and a host collection of one plan train side by side on meshes of their own,
// with the replica sync staged through the host for the GPU one (and, for the GPU one, the sync
// overlapped with the next batch's input distribution): the same outputs every step, the same
// weights and optimizer states, replicas equal after the last sync, and mesh checkpoints with
// the same bytes. A device failure in the middle of a sync fails it on every replica, unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/replica.h"
#include "tests/capi/checkpoint/checkpoint_test_util.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kWorld = 4;
constexpr int32_t kShard = 2;

struct MeshDeleter {
  void operator()(shardrec_mesh_t* m) const { shardrec_mesh_destroy(m); }
};
using MeshPtr = std::unique_ptr<shardrec_mesh_t, MeshDeleter>;

MeshPtr MakeMesh(int r, int32_t interval, int32_t mode) {
  shardrec_mesh_options_t o;
  EXPECT_EQ(shardrec_mesh_options_init(&o, SHARDREC_MESH_OPTIONS_VERSION), SHARDREC_OK);
  o.sharding_group_size = kShard;
  o.sync_interval = interval;
  o.sync_mode = mode;
  shardrec_mesh_t* m = nullptr;
  EXPECT_EQ(shardrec_mesh_create(&m, GroupComm(kWorld, r), &o), SHARDREC_OK)
      << shardrec_last_error();
  return MeshPtr(m);
}

CollPtr MakeColl(shardrec_mesh_t* m, const shardrec_plan_t* plan, const Scenario& s, bool cuda) {
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  const shardrec_embedding_options_t eo = Options(s, cuda);
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_mesh_embedding_create(&c, m, plan, &opt, &eo), SHARDREC_OK)
      << (cuda ? "gpu: " : "host: ") << shardrec_last_error();
  return CollPtr(c);
}

struct Case {
  const char* name;
  std::vector<int32_t> sharding;  // per table of the standard scenario
  int32_t optimizer;
  int32_t dtype;  // of table t1
  int32_t interval;
  int32_t mode;  // SHARDREC_SYNC_*
};

std::string CaseName(const ::testing::TestParamInfo<Case>& i) { return i.param.name; }

class GpuReplica : public ::testing::TestWithParam<Case> {};

TEST_P(GpuReplica, TrainsBitIdenticallyToHostReplicas) {
  REQUIRE_DEVICE();
  const Case& c = GetParam();
  Scenario s = StandardScenario(kShard, c.sharding[0], SHARDREC_POOLING_SUM);
  s.sharding = c.sharding;
  s.optimizer.type = c.optimizer;
  s.tables[1].dtype = c.dtype;
  s.steps = 4;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  // The replica syncs' and the mesh checkpoint's host staging is pinned with the collection's
  // device current (host_alloc_on), never by a bare host_alloc (the fake counts those).
  const int64_t bare_allocs = FakeHostAllocsWithoutDevice();
  // Every rank draws a different batch: the replicas diverge between syncs.
  Scenario global = s;
  global.world = kWorld;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(global, ref);
  const auto grads = MakeGrads(global, batches, ref.output_dim());
  const std::string dir_h = FreshDir("gpu_2d_host");
  const std::string dir_d = FreshDir("gpu_2d_gpu");
  std::vector<std::vector<std::vector<float>>> snaps(kWorld);
  SpawnRanks(kWorld, [&](int r) {
    MeshPtr mh = MakeMesh(r, c.interval, c.mode);
    MeshPtr md = MakeMesh(r, c.interval, c.mode);
    ASSERT_TRUE(mh && md);
    CollPtr h = MakeColl(mh.get(), plan.get(), s, false);
    CollPtr d = MakeColl(md.get(), plan.get(), s, true);
    ASSERT_TRUE(h && d);
    std::vector<KjtHolder> kjts;
    for (int32_t step = 0; step < s.steps; ++step)
      kjts.emplace_back(batches[step][r], s.num_features, false);
    // The GPU collection syncs while its next batch's ids travel (input_dist_start before
    // mesh_step); the host one syncs first.
    ASSERT_EQ(shardrec_embedding_input_dist_start(d.get(), kjts[0].view(), nullptr), SHARDREC_OK);
    for (int32_t step = 0; step < s.steps; ++step) {
      const std::vector<float>& g = grads[step][r];
      std::vector<float> out_h(g.size()), out_d(g.size(), -7.0f);
      ASSERT_EQ(shardrec_embedding_forward(h.get(), kjts[step].view(), out_h.data(), out_h.size(),
                                           nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_input_dist_wait(d.get(), nullptr), SHARDREC_OK);
      ASSERT_EQ(
          shardrec_embedding_forward_distributed(d.get(), out_d.data(), out_d.size(), nullptr),
          SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_TRUE(BitEqual(out_h, out_d)) << "rank " << r << " step " << step;
      ASSERT_EQ(shardrec_embedding_backward(h.get(), g.data(), g.size(), nullptr), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_backward(d.get(), g.data(), g.size(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
      int32_t synced_h = 0, synced_d = 0;
      ASSERT_EQ(shardrec_mesh_step(mh.get(), h.get(), &synced_h), SHARDREC_OK);
      if (step + 1 < s.steps) {
        ASSERT_EQ(shardrec_embedding_input_dist_start(d.get(), kjts[step + 1].view(), nullptr),
                  SHARDREC_OK);
      }
      ASSERT_EQ(shardrec_mesh_step(md.get(), d.get(), &synced_d), SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_EQ(synced_h, synced_d);
      EXPECT_EQ(synced_d, (step + 1) % c.interval == 0 ? 1 : 0);
    }
    const auto sh = Snapshot(h.get(), s);
    const auto sd = Snapshot(d.get(), s);
    ExpectSameTensors(sh, sd, "rank " + std::to_string(r));
    int64_t steps_h = -1, steps_d = -2;
    shardrec_embedding_num_steps(h.get(), &steps_h);
    shardrec_embedding_num_steps(d.get(), &steps_d);
    EXPECT_EQ(steps_h, steps_d);
    snaps[r] = sd;
    // Mesh checkpoints (each shard written by one of its replicas) hold the same bytes, and the
    // host one loads into the GPU collection as it was.
    ASSERT_EQ(shardrec_checkpoint_save_mesh(mh.get(), h.get(), dir_h.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_checkpoint_save_mesh(md.get(), d.get(), dir_d.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_checkpoint_load_mesh(md.get(), d.get(), dir_h.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    // (Weights only: the replicas' optimizer states differ and the checkpoint holds the writing
    // replica's, so only the weights come back as this replica had them.)
    const auto back = Snapshot(d.get(), s);
    size_t num_states = 0;
    shardrec_embedding_num_states(d.get(), &num_states);
    for (size_t i = 0; i < sd.size(); ++i) {
      if (c.mode == SHARDREC_SYNC_WEIGHTS_ONLY && i % (num_states + 1) != 0) continue;
      EXPECT_TRUE(BitEqual(back[i], sd[i])) << "rank " << r << " tensor " << i << " reloaded";
    }
  });
  // The replicas of a shard (ranks r and r + 2 in the default layout) agree after the last sync
  // (in weights-only mode their optimizer states may differ), and training moved the weights.
  for (int r = 0; r < kShard; ++r) {
    ASSERT_EQ(snaps[r].size(), snaps[r + kShard].size());
    const size_t per_table = snaps[r].size() / s.tables.size();  // weights, then the states
    for (size_t i = 0; i < snaps[r].size(); ++i) {
      if (c.mode == SHARDREC_SYNC_WEIGHTS_ONLY && i % per_table != 0) continue;
      EXPECT_EQ(snaps[r][i], snaps[r + kShard][i]) << "rank " << r << " tensor " << i;
    }
  }
  if (bare_allocs >= 0) {
    EXPECT_EQ(FakeHostAllocsWithoutDevice(), bare_allocs);
  }
  const auto files_h = ReadDir(dir_h);
  const auto files_d = ReadDir(dir_d);
  ASSERT_EQ(files_h.size(), files_d.size());
  for (const auto& [name, bytes] : files_h) {
    auto it = files_d.find(name);
    ASSERT_NE(it, files_d.end()) << name;
    EXPECT_TRUE(it->second == bytes) << name << " differs";
  }
}

// Weights and states, weights only, a sync every other step; every sharding type, the three
// optimizer families (element-wise state, row-wise state, two moments) and a bf16 table.
const Case kCases[] = {
    {"DP_RW_CW_Adagrad", {kDP, kRW, kCW}, kAdagrad, kF32, 1, SHARDREC_SYNC_WEIGHTS_AND_STATE},
    {"TW_CW_Grid_RowAda_Bf16",
     {kTW, kCW, kGrid},
     kRowAdagrad,
     kBf16,
     1,
     SHARDREC_SYNC_WEIGHTS_AND_STATE},
    {"RW_DP_TW_Adam_Bf16_Every2", {kRW, kDP, kTW}, kAdam, kBf16, 2, SHARDREC_SYNC_DEFAULT},
    {"CW_RW_DP_Adam_WeightsOnly", {kCW, kRW, kDP}, kAdam, kF32, 1, SHARDREC_SYNC_WEIGHTS_ONLY},
};

INSTANTIATE_TEST_SUITE_P(Plans, GpuReplica, ::testing::ValuesIn(kCases), CaseName);

// The replicas of a shard must be of one kind (a GPU replica stages its sync, a host one does
// not): a replica group mixing them is refused on every rank. GPU replicas that do not start
// identical are refused as host ones are (the check digests the device weights).
TEST(GpuReplicaCreate, MixedKindsAndDifferentSeedsAreRefusedEverywhere) {
  REQUIRE_DEVICE();
  Scenario s = StandardScenario(kShard, kRW, SHARDREC_POOLING_SUM);
  s.sharding = {kDP, kRW, kCW};
  s.optimizer.type = kAdam;
  s.tables[1].dtype = kBf16;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(kWorld, [&](int r) {
    MeshPtr m = MakeMesh(r, 1, SHARDREC_SYNC_DEFAULT);
    ASSERT_TRUE(m);
    // Replica groups are {0, 1} and {2, 3} in the default layout: rank 3 alone on the device.
    shardrec_embedding_options_t mixed = Options(s, r == 3);
    shardrec_embedding_t* raw = nullptr;
    EXPECT_EQ(shardrec_mesh_embedding_create(&raw, m.get(), plan.get(), &opt, &mixed),
              SHARDREC_EUNSUPPORTED)
        << shardrec_last_error();
    EXPECT_NE(std::string(shardrec_last_error()).find("mixes host and GPU"), std::string::npos)
        << shardrec_last_error();
    EXPECT_EQ(raw, nullptr);
    // All on the device, another seed on sharding group {1, 3} (one seed within a sharding
    // group, which its collection's agreement compares): each replica group differs.
    Scenario other = s;
    other.seed = r % 2 == 1 ? s.seed + 1 : s.seed;
    const shardrec_embedding_options_t seeded = Options(other, true);
    EXPECT_EQ(shardrec_mesh_embedding_create(&raw, m.get(), plan.get(), &opt, &seeded),
              SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("replicas do not start identical"),
              std::string::npos)
        << shardrec_last_error();
    EXPECT_EQ(raw, nullptr);
    // And all of one kind with one seed is accepted.
    CollPtr c = MakeColl(m.get(), plan.get(), s, true);
    EXPECT_TRUE(c);
  });
}

// A device copy that fails while one replica stages its parameters: that replica reports
// SHARDREC_ECUDA, the other SHARDREC_EREMOTE, and neither changed anything; the next sync works.
TEST(GpuReplicaFailure, FailedStagingFailsTheSyncOnEveryReplica) {
  REQUIRE_DEVICE();
  if (!FakeFailCopyAfter(-1)) GTEST_SKIP() << "needs the fake plugin's failure injection";
  constexpr int kRanks = 2;  // 2 replicas x sharding groups of 1
  Scenario s = StandardScenario(1, kTW, SHARDREC_POOLING_SUM);
  s.optimizer.type = kAdagrad;
  s.steps = 1;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  Scenario global = s;
  global.world = kRanks;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(global, ref);
  const auto grads = MakeGrads(global, batches, ref.output_dim());
  std::barrier sync_point(kRanks);
  std::vector<int32_t> codes(kRanks, 0);
  SpawnRanks(kRanks, [&](int r) {
    shardrec_mesh_options_t o;
    shardrec_mesh_options_init(&o, SHARDREC_MESH_OPTIONS_VERSION);
    o.sharding_group_size = 1;
    shardrec_mesh_t* raw = nullptr;
    ASSERT_EQ(shardrec_mesh_create(&raw, GroupComm(kRanks, r), &o), SHARDREC_OK);
    MeshPtr m(raw);
    CollPtr d = MakeColl(m.get(), plan.get(), s, true);
    ASSERT_TRUE(d);
    KjtHolder kjt(batches[0][r], s.num_features, false);
    std::vector<float> out(grads[0][r].size());
    ASSERT_EQ(shardrec_embedding_forward(d.get(), kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_backward(d.get(), grads[0][r].data(), grads[0][r].size(), nullptr),
              SHARDREC_OK);
    const auto before = Snapshot(d.get(), s);
    sync_point.arrive_and_wait();
    if (r == 0) FakeFailCopyAfter(0);  // the first copy either replica makes fails
    sync_point.arrive_and_wait();
    codes[r] = shardrec_mesh_sync(m.get(), d.get(), SHARDREC_SYNC_DEFAULT);
    const std::string err = shardrec_last_error();
    sync_point.arrive_and_wait();
    if (r == 0) FakeFailCopyAfter(-1);
    sync_point.arrive_and_wait();
    if (codes[r] == SHARDREC_ECUDA) {
      EXPECT_NE(err.find("injected device failure"), std::string::npos) << err;
    }
    const auto after = Snapshot(d.get(), s);
    ExpectSameTensors(before, after, "rank " + std::to_string(r));
    // The next sync works and leaves both replicas equal.
    ASSERT_EQ(shardrec_mesh_sync(m.get(), d.get(), SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
        << shardrec_last_error();
  });
  std::sort(codes.begin(), codes.end());
  EXPECT_EQ(codes[0], SHARDREC_EREMOTE);  // the other replica (-6)
  EXPECT_EQ(codes[1], SHARDREC_ECUDA);    // the one whose copy failed (-5)
}

}  // namespace
}  // namespace shardrec::testing
