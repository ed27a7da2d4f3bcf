// 2D C API: mesh validation, the replica checksum at creation, sync hooks, describe and stats.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kWorld = 8;

shardrec_mesh_options_t Options(int32_t s) {
  shardrec_mesh_options_t o;
  EXPECT_EQ(shardrec_mesh_options_init(&o, SHARDREC_MESH_OPTIONS_VERSION), SHARDREC_OK);
  o.sharding_group_size = s;
  o.ranks_per_node = 4;
  return o;
}

TEST(ReplicaMesh, RejectsAGroupSizeThatDoesNotDivideTheWorld) {
  SpawnRanks(kWorld, [&](int r) {
    shardrec_mesh_options_t o = Options(3);
    shardrec_mesh_t* m = nullptr;
    EXPECT_EQ(shardrec_mesh_create(&m, GroupComm(kWorld, r), &o), SHARDREC_EINVAL);
    EXPECT_EQ(m, nullptr);
    EXPECT_NE(std::string(shardrec_last_error()).find("must divide the world size 8"),
              std::string::npos)
        << shardrec_last_error();
  });
}

// Alone in a world of 1: a refusing rank meets its peers (the next test), so a rank of a larger
// world would wait for them here.
TEST(ReplicaMesh, RejectsBadOptionsAndNullArguments) {
  shardrec_mesh_t* m = nullptr;
  shardrec_mesh_options_t o = Options(2);
  EXPECT_EQ(shardrec_mesh_create(&m, nullptr, &o), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mesh_create(nullptr, GroupComm(1, 0), &o), SHARDREC_EINVAL);
  o.layout = 7;
  EXPECT_EQ(shardrec_mesh_create(&m, GroupComm(1, 0), &o), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("layout"), std::string::npos);
  o = Options(2);
  o.sync_interval = -1;
  EXPECT_EQ(shardrec_mesh_create(&m, GroupComm(1, 0), &o), SHARDREC_EINVAL);
  o = Options(2);
  o.version = 99;
  EXPECT_EQ(shardrec_mesh_create(&m, GroupComm(1, 0), &o), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mesh_options_init(&o, 42), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mesh_sync(nullptr, nullptr, 0), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mesh_step(nullptr, nullptr, nullptr), SHARDREC_EINVAL);
  shardrec_mesh_destroy(nullptr);
}

TEST(ReplicaMesh, DescribesGroupsAndHandsOutSubCommunicators) {
  SpawnRanks(kWorld, [&](int r) {
    shardrec_mesh_options_t o = Options(4);
    shardrec_mesh_t* m = nullptr;
    ASSERT_EQ(shardrec_mesh_create(&m, GroupComm(kWorld, r), &o), SHARDREC_OK)
        << shardrec_last_error();
    char* text = nullptr;
    size_t len = 0;
    ASSERT_EQ(shardrec_mesh_describe(m, &text, &len), SHARDREC_OK);
    std::string d(text, len);
    shardrec_free(text);
    EXPECT_NE(d.find("sharding groups (model parallel, plan ranks 0..3): [0,2,4,6] [1,3,5,7]"),
              std::string::npos)
        << d;
    EXPECT_NE(d.find("replica groups (weight sync): [0,1] [2,3] [4,5] [6,7]"), std::string::npos);
    EXPECT_NE(d.find("stay inside one node"), std::string::npos);
    int32_t g, sr, rg, rr;
    ASSERT_EQ(shardrec_mesh_coords(m, &g, &sr, &rg, &rr), SHARDREC_OK);
    EXPECT_EQ(g, r % 2);
    EXPECT_EQ(sr, r / 2);
    EXPECT_EQ(rg, r / 2);
    EXPECT_EQ(rr, r % 2);
    shardrec_comm_t* sc = nullptr;
    shardrec_comm_t* rc = nullptr;
    ASSERT_EQ(shardrec_mesh_sharding_comm(&sc, m), SHARDREC_OK);
    ASSERT_EQ(shardrec_mesh_replica_comm(&rc, m), SHARDREC_OK);
    int32_t size = 0, rank = 0;
    shardrec_comm_size(&size, sc);
    shardrec_comm_rank(&rank, sc);
    EXPECT_EQ(size, 4);
    EXPECT_EQ(rank, sr);
    shardrec_comm_size(&size, rc);
    EXPECT_EQ(size, 2);
    // The sub-communicators outlive the mesh.
    shardrec_mesh_destroy(m);
    float x = static_cast<float>(r), sum = 0;
    ASSERT_EQ(shardrec_comm_allreduce(rc, &x, &sum, 1, SHARDREC_DTYPE_FLOAT32, SHARDREC_REDUCE_SUM,
                                      nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_EQ(sum, static_cast<float>((r / 2) * 2 * 2 + 1));  // ranks 2k and 2k+1
    shardrec_comm_destroy(sc);
    shardrec_comm_destroy(rc);
  });
}

// Rank r's mesh of sharding groups of 4 ranks over the cached group of kWorld (null on failure).
shardrec_mesh_t* MeshOfGroupsOf4(int r) {
  shardrec_mesh_options_t o = Options(4);
  shardrec_mesh_t* m = nullptr;
  EXPECT_EQ(shardrec_mesh_create(&m, GroupComm(kWorld, r), &o), SHARDREC_OK)
      << "rank " << r << ": " << shardrec_last_error();
  return m;
}

// Every rank creates a mesh (S = 4) and a collection on it that must fail with EINVAL and a
// message containing `needle`; `seed_of(rank)` picks each rank's initial-weights seed.
void ExpectMeshCollectionRejected(const Scenario& s, const std::function<uint64_t(int)>& seed_of,
                                  const char* needle) {
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(kWorld, [&](int r) {
    shardrec_mesh_t* m = MeshOfGroupsOf4(r);
    ASSERT_NE(m, nullptr);
    shardrec_embedding_options_t eo;
    shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    eo.seed = seed_of(r);
    shardrec_embedding_t* c = nullptr;
    EXPECT_EQ(shardrec_mesh_embedding_create(&c, m, plan.get(), &opt, &eo), SHARDREC_EINVAL)
        << "rank " << r;
    EXPECT_NE(std::string(shardrec_last_error()).find(needle), std::string::npos)
        << shardrec_last_error();
    EXPECT_EQ(c, nullptr);
    shardrec_mesh_destroy(m);
  });
}

TEST(ReplicaMesh, RejectsAPlanMadeForTheWrongWorldSize) {
  ExpectMeshCollectionRejected(
      StandardScenario(8, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM),
      [](int) { return uint64_t{11}; }, "plan once for the sharding group size");
}

TEST(ReplicaMesh, DetectsAReplicaStartedWithADifferentSeed) {
  // Replica groups are {0, 1}, {2, 3}, ...: the odd ranks (one sharding group, whose collection's
  // agreement compares the seed within it) start from another seed than their replicas.
  ExpectMeshCollectionRejected(
      StandardScenario(4, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM),
      [](int r) { return r % 2 == 1 ? uint64_t{999} : uint64_t{11}; },
      "replicas do not start identical");
}

// Creation is collective over the whole mesh: a rank given a NULL plan fails its sharding group
// at once (they meet in the collection's agreement) and the other groups learn it in the
// replicas' check instead of waiting for it; the next creation goes through everywhere.
TEST(ReplicaMesh, ANullPlanOnOneRankFailsEveryRankAtOnce) {
  const Scenario s = StandardScenario(4, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(kWorld, [&](int r) {
    shardrec_mesh_t* m = MeshOfGroupsOf4(r);
    ASSERT_NE(m, nullptr);
    const auto start = std::chrono::steady_clock::now();
    shardrec_embedding_t* c = nullptr;
    EXPECT_EQ(shardrec_mesh_embedding_create(&c, m, r == 5 ? nullptr : plan.get(), &opt, nullptr),
              SHARDREC_EINVAL)
        << "rank " << r;
    EXPECT_EQ(c, nullptr);
    const std::string why = shardrec_last_error();
    // Rank 5 says why; its sharding group names it (by its rank in the group); the other group
    // learns from the replicas' check that a group did not create its collection.
    const bool named =
        r == 5 ? why.find("plan") != std::string::npos
               : why.find("rejected the collection configuration") != std::string::npos ||
                     why.find("did not create its collection") != std::string::npos;
    EXPECT_TRUE(named) << "rank " << r << ": " << why;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    ASSERT_EQ(shardrec_mesh_embedding_create(&c, m, plan.get(), &opt, nullptr), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    shardrec_embedding_destroy(c);
    shardrec_mesh_destroy(m);
  });
}

// Mesh creation is collective over the world: a rank refusing its own arguments (a NULL `out`,
// bad options) meets every rank in the creation's agreement, so they fail at once naming it,
// and the next creation goes through everywhere.
TEST(ReplicaMesh, ARefusedMeshCreationFailsEveryRankAtOnce) {
  SpawnRanks(kWorld, [&](int r) {
    shardrec_comm_t* world = GroupComm(kWorld, r);
    for (int round = 0; round < 2; ++round) {
      const auto start = std::chrono::steady_clock::now();
      shardrec_mesh_options_t o = Options(4);
      if (r == 3 && round == 1) o.sync_interval = -1;
      shardrec_mesh_t* m = nullptr;
      const shardrec_status_t s = r == 3 && round == 0 ? shardrec_mesh_create(nullptr, world, &o)
                                                       : shardrec_mesh_create(&m, world, &o);
      EXPECT_EQ(s, SHARDREC_EINVAL) << "rank " << r << " round " << round;
      EXPECT_EQ(m, nullptr);
      const std::string why = shardrec_last_error();
      if (r != 3) {
        EXPECT_NE(why.find("rank 3 refused"), std::string::npos) << why;
      }
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << round;
    }
    // Options valid on every rank but different on one (a sync interval or mode): its replicas
    // would pair one step's sync with another's. Refused on every rank.
    for (int k = 0; k < 2; ++k) {
      shardrec_mesh_options_t o = Options(4);
      if (r == 3 && k == 0) o.sync_interval = 2;
      if (r == 3 && k == 1) o.sync_mode = SHARDREC_SYNC_WEIGHTS_ONLY;
      shardrec_mesh_t* m = nullptr;
      EXPECT_EQ(shardrec_mesh_create(&m, world, &o), SHARDREC_EINVAL) << "rank " << r;
      EXPECT_NE(std::string(shardrec_last_error()).find("the same mesh options"), std::string::npos)
          << shardrec_last_error();
      EXPECT_EQ(m, nullptr);
    }
    shardrec_mesh_t* m = MeshOfGroupsOf4(r);
    ASSERT_NE(m, nullptr);
    shardrec_mesh_destroy(m);
  });
}

struct HookPayload {
  shardrec_comm_t* replica;
  std::atomic<int>* calls;
};

int32_t AverageHook(void* data, size_t count, int32_t dtype, void* payload) {
  auto* p = static_cast<HookPayload*>(payload);
  p->calls->fetch_add(1);
  return shardrec_comm_allreduce(p->replica, data, data, count, dtype, SHARDREC_REDUCE_AVG,
                                 nullptr);
}

// Trains 2 steps, syncs with or without the hook, and returns every table's weights and states.
std::vector<std::vector<float>> TrainAndSync(int r, const Scenario& s, shardrec_plan_t* plan,
                                             bool use_hook, std::atomic<int>* calls,
                                             uint64_t* bytes, int32_t* collectives) {
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_mesh_options_t o = Options(s.world);
  shardrec_mesh_t* m = nullptr;
  EXPECT_EQ(shardrec_mesh_create(&m, GroupComm(kWorld, r), &o), SHARDREC_OK);
  shardrec_comm_t* rc = nullptr;
  shardrec_mesh_replica_comm(&rc, m);
  HookPayload payload{rc, calls};
  if (use_hook) {
    EXPECT_EQ(shardrec_mesh_set_sync_hook(m, AverageHook, &payload), SHARDREC_OK);
  }
  shardrec_embedding_options_t eo;
  shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  eo.seed = s.seed;
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_mesh_embedding_create(&c, m, plan, &opt, &eo), SHARDREC_OK)
      << shardrec_last_error();
  Scenario global = s;
  global.world = kWorld;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(global, ref);
  const auto grads = MakeGrads(global, batches, ref.output_dim());
  for (int step = 0; step < 2; ++step) {
    KjtHolder kjt(batches[step][r], s.num_features, false);
    std::vector<float> out(grads[step][r].size());
    EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK);
    EXPECT_EQ(shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
              SHARDREC_OK);
  }
  // A third forward through the split calls (the sync overlapping an input distribution is
  // replica_overlap_test's).
  KjtHolder kjt(batches[2][r], s.num_features, false);
  EXPECT_EQ(shardrec_embedding_input_dist_start(c, kjt.view(), nullptr), SHARDREC_OK);
  EXPECT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK) << shardrec_last_error();
  std::vector<float> out(grads[2][r].size());
  EXPECT_EQ(shardrec_embedding_forward_distributed(c, out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(shardrec_mesh_sync(m, c, SHARDREC_SYNC_DEFAULT), SHARDREC_OK) << shardrec_last_error();
  int64_t syncs = 0;
  EXPECT_EQ(shardrec_mesh_sync_stats(m, bytes, collectives, &syncs), SHARDREC_OK);
  EXPECT_EQ(syncs, 1);
  std::vector<std::vector<float>> snap = Snapshot(c, s);
  shardrec_embedding_destroy(c);
  shardrec_comm_destroy(rc);
  shardrec_mesh_destroy(m);
  return snap;
}

TEST(ReplicaSync, CustomHookGivesTheSameResultAsTheBuiltInCollective) {
  Scenario s = StandardScenario(4, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.optimizer.type = 1;  // Adagrad: states are synced too
  s.steps = 3;
  PlanPtr plan = MakePlan(s);
  std::vector<std::vector<std::vector<float>>> builtin(kWorld), hooked(kWorld);
  std::vector<uint64_t> bytes(kWorld);
  std::vector<int32_t> collectives(kWorld);
  std::atomic<int> calls{0};
  SpawnRanks(kWorld, [&](int r) {
    builtin[r] = TrainAndSync(r, s, plan.get(), false, &calls, &bytes[r], &collectives[r]);
  });
  EXPECT_EQ(calls.load(), 0);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_GT(bytes[r], 0u);
    // One fp32 collective (weights and state coalesced) and one for the int64 step counter.
    EXPECT_EQ(collectives[r], 2) << "rank " << r;
  }
  SpawnRanks(kWorld, [&](int r) {
    uint64_t b = 0;
    int32_t n = 0;
    hooked[r] = TrainAndSync(r, s, plan.get(), true, &calls, &b, &n);
  });
  EXPECT_EQ(calls.load(), kWorld);  // one float buffer per rank
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(builtin[r], hooked[r]) << "rank " << r;
  // Replicas hold identical tables after the sync.
  for (int r = 0; r < kWorld; r += 2) EXPECT_EQ(builtin[r], builtin[r + 1]) << "ranks " << r;
}

// The sync is collective over the replica group: a replica refusing its own arguments (an
// unknown mode) failed alone while its peers waited in the first exchange until their timeout.
// It now meets them in one small agreement first: every replica fails at once, the others
// naming it, nothing changes, and the next sync goes through.
TEST(ReplicaSync, ARankRefusingItsArgumentsFailsEveryReplicaAtOnce) {
  constexpr int32_t kRanks = 2;  // one sharding group of 1 rank, replicated twice
  Scenario s = StandardScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.optimizer.type = 1;  // Adagrad: states are synced too
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  Scenario global = s;
  global.world = kRanks;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(global, ref);
  const auto grads = MakeGrads(global, batches, ref.output_dim());
  SpawnRanks(kRanks, [&](int r) {
    shardrec_mesh_options_t o = Options(1);
    o.ranks_per_node = kRanks;
    shardrec_mesh_t* m = nullptr;
    ASSERT_EQ(shardrec_mesh_create(&m, GroupComm(kRanks, r), &o), SHARDREC_OK)
        << shardrec_last_error();
    shardrec_embedding_options_t eo;
    shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    eo.seed = s.seed;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_mesh_embedding_create(&c, m, plan.get(), &opt, &eo), SHARDREC_OK)
        << shardrec_last_error();
    // One step on each replica's own batch, so the replicas differ until they sync.
    KjtHolder kjt(batches[0][r], s.num_features, false);
    std::vector<float> out(grads[0][r].size());
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_backward(c, grads[0][r].data(), grads[0][r].size(), nullptr),
              SHARDREC_OK);
    const std::vector<std::vector<float>> before = Snapshot(c, s);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(shardrec_mesh_sync(m, c, r == 1 ? 42 : SHARDREC_SYNC_DEFAULT), SHARDREC_EINVAL)
        << "rank " << r;
    const std::string why = shardrec_last_error();
    EXPECT_NE(why.find(r == 1 ? "unknown sync mode 42"
                              : "rank 1 refused its arguments to the "
                                "mesh sync"),
              std::string::npos)
        << "rank " << r << ": " << why;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "rank " << r;
    EXPECT_EQ(Snapshot(c, s), before) << "rank " << r << ": the refused sync changed the tables";
    // Each mode valid, but different on the two replicas.
    EXPECT_EQ(shardrec_mesh_sync(m, c, r == 1 ? SHARDREC_SYNC_WEIGHTS_ONLY : SHARDREC_SYNC_DEFAULT),
              SHARDREC_EINVAL)
        << "rank " << r;
    EXPECT_NE(std::string(shardrec_last_error()).find("different sync modes"), std::string::npos)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_EQ(Snapshot(c, s), before) << "rank " << r << ": the refused sync changed the tables";
    int64_t syncs = -1;
    EXPECT_EQ(shardrec_mesh_sync_stats(m, nullptr, nullptr, &syncs), SHARDREC_OK);
    EXPECT_EQ(syncs, 0);
    EXPECT_EQ(shardrec_mesh_sync(m, c, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_EQ(shardrec_mesh_sync_stats(m, nullptr, nullptr, &syncs), SHARDREC_OK);
    EXPECT_EQ(syncs, 1);
    shardrec_embedding_destroy(c);
    shardrec_mesh_destroy(m);
  });
}

}  // namespace
}  // namespace shardrec::testing
