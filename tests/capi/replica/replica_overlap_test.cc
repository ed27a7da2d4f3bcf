// 2D sync overlapped with the next batch's input distribution (issue 14), through the C API:
// at world 4 (2 replicas x sharding groups of 2), with a sync every step, the order
//   backward(b); input_dist_start(b + 1); mesh_step (syncs); input_dist_wait;
//   forward_distributed(b + 1)
// gives outputs, weights and optimizer states bit-identical to syncing before the next batch's
// input distribution starts. Ranks are threads, so this runs under ThreadSanitizer with the rest
// of capi_replica_test (.ci/tsan): the id exchange on the collection's worker and the sync on
// the caller's thread must share no data.
#include <gtest/gtest.h>

#include <vector>

#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kWorld = 4;
constexpr int32_t kShard = 2;

struct Trace {
  std::vector<std::vector<float>> outputs;   // per step
  std::vector<std::vector<float>> snapshot;  // weights and states after the last step
  int64_t syncs = 0;
};

Trace Train(int r, const Scenario& s, shardrec_plan_t* plan, bool overlap) {
  Trace trace;
  shardrec_mesh_options_t o;
  EXPECT_EQ(shardrec_mesh_options_init(&o, SHARDREC_MESH_OPTIONS_VERSION), SHARDREC_OK);
  o.sharding_group_size = kShard;
  o.sync_interval = 1;
  shardrec_mesh_t* m = nullptr;
  EXPECT_EQ(shardrec_mesh_create(&m, GroupComm(kWorld, r), &o), SHARDREC_OK)
      << shardrec_last_error();
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_options_t eo;
  shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  eo.seed = s.seed;
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_mesh_embedding_create(&c, m, plan, &opt, &eo), SHARDREC_OK)
      << shardrec_last_error();
  // Every rank draws a different batch: the replicas diverge between syncs, so a sync that
  // missed a buffer or ran on stale values would show.
  Scenario global = s;
  global.world = kWorld;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(global, ref);
  const auto grads = MakeGrads(global, batches, ref.output_dim());
  std::vector<KjtHolder> kjts;
  for (int32_t step = 0; step < s.steps; ++step)
    kjts.emplace_back(batches[step][r], s.num_features, false);

  auto start = [&](int32_t step) {
    EXPECT_EQ(shardrec_embedding_input_dist_start(c, kjts[step].view(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  };
  if (overlap) start(0);
  for (int32_t step = 0; step < s.steps; ++step) {
    if (!overlap) start(step);
    EXPECT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK) << shardrec_last_error();
    std::vector<float> out(grads[step][r].size());
    EXPECT_EQ(shardrec_embedding_forward_distributed(c, out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    trace.outputs.push_back(out);
    EXPECT_EQ(shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    // The next batch's ids travel while the replicas sync.
    if (overlap && step + 1 < s.steps) start(step + 1);
    int32_t synced = 0;
    EXPECT_EQ(shardrec_mesh_step(m, c, &synced), SHARDREC_OK) << shardrec_last_error();
    EXPECT_EQ(synced, 1);
  }
  EXPECT_EQ(shardrec_mesh_sync_stats(m, nullptr, nullptr, &trace.syncs), SHARDREC_OK);
  // An explicit sync with a batch in flight, then that batch's forward, also works.
  start(0);
  EXPECT_EQ(shardrec_mesh_sync(m, c, SHARDREC_SYNC_DEFAULT), SHARDREC_OK) << shardrec_last_error();
  EXPECT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK) << shardrec_last_error();
  std::vector<float> out(grads[0][r].size());
  EXPECT_EQ(shardrec_embedding_forward_distributed(c, out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  trace.outputs.push_back(out);
  trace.snapshot = Snapshot(c, s);
  shardrec_embedding_destroy(c);
  shardrec_mesh_destroy(m);
  return trace;
}

TEST(ReplicaOverlap, SyncDuringTheNextInputDistributionEqualsSyncingFirstBitForBit) {
  Scenario s = StandardScenario(kShard, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  // One table of each kind of exchange: data-parallel (no ids travel), row-wise, column-wise.
  s.sharding = {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_ROW_WISE,
                SHARDREC_SHARDING_COLUMN_WISE};
  s.optimizer.type = 1;  // Adagrad: optimizer states are synced too
  s.steps = 4;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  std::vector<Trace> plain(kWorld), overlapped(kWorld);
  SpawnRanks(kWorld, [&](int r) { plain[r] = Train(r, s, plan.get(), false); });
  SpawnRanks(kWorld, [&](int r) { overlapped[r] = Train(r, s, plan.get(), true); });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(plain[r].syncs, s.steps);
    EXPECT_EQ(overlapped[r].syncs, s.steps);
    ASSERT_EQ(plain[r].outputs.size(), overlapped[r].outputs.size());
    for (size_t k = 0; k < plain[r].outputs.size(); ++k)
      EXPECT_EQ(plain[r].outputs[k], overlapped[r].outputs[k]) << "rank " << r << " step " << k;
    EXPECT_EQ(plain[r].snapshot, overlapped[r].snapshot) << "rank " << r;
    EXPECT_FALSE(plain[r].snapshot.empty());
  }
  // The replicas of a shard (ranks r and r + 2 in the default layout) hold the same tables
  // after the final sync, and the training moved them off their initial values.
  for (int r = 0; r < kShard; ++r)
    EXPECT_EQ(overlapped[r].snapshot, overlapped[r + kShard].snapshot);
}

}  // namespace
}  // namespace shardrec::testing
