// Training on the MPI backend through the C API, one rank per process under mpirun: sharded
// embedding collections (every sharding type x optimizer) against the unsharded reference,
// the pipelined input distribution (MPI from the communication worker thread) against plain
// forward, a 2D mesh against the replica simulation, and the DDP bucketer against the mean.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/ddp.h"
#include "shardrec/embedding.h"
#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/mpi/mpi_test_world.h"
#include "tests/capi/replica/replica_sim.h"

namespace shardrec::testing {
namespace {

constexpr float kRtol = 1e-5f, kAtol = 1e-6f;

CollPtr MakeCollection(const Scenario& s, shardrec_plan_t* plan) {
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.seed = s.seed;
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, plan, MpiWorld(), &opt, &o), SHARDREC_OK)
      << "rank " << MpiRank() << ": " << shardrec_last_error();
  return CollPtr(c);
}

// Every table's weights and optimizer states of `c` against `model`.
void ExpectTables(shardrec_embedding_t* c, const Scenario& s, const ReferenceModel& model) {
  size_t ns = 0;
  shardrec_embedding_num_states(c, &ns);
  for (size_t t = 0; t < s.tables.size(); ++t) {
    const RefTable& rt = s.tables[t];
    std::vector<float> w(static_cast<size_t>(rt.rows) * rt.dim);
    ASSERT_EQ(shardrec_embedding_get_weights(c, rt.name.c_str(), w.data(), w.size()), SHARDREC_OK)
        << shardrec_last_error();
    std::string first;
    EXPECT_EQ(CountMismatches(w, model.weights(t), kRtol, kAtol, &first), 0u)
        << "rank " << MpiRank() << " table " << rt.name << " weights: " << first;
    for (size_t i = 0; i < ns; ++i) {
      const char* name = nullptr;
      int32_t row_wise = 0;
      ASSERT_EQ(shardrec_embedding_state_info(c, i, &name, &row_wise), SHARDREC_OK);
      std::vector<float> st(static_cast<size_t>(rt.rows) * (row_wise ? 1 : rt.dim));
      ASSERT_EQ(shardrec_embedding_get_state(c, rt.name.c_str(), name, st.data(), st.size()),
                SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_EQ(CountMismatches(st, model.state(t, name), kRtol, kAtol, &first), 0u)
          << "rank " << MpiRank() << " table " << rt.name << " state " << name << ": " << first;
    }
  }
}

// Sharded training on MPI against the unsharded reference: this rank's forward outputs every
// step, then every table's weights and optimizer states.
void TrainAgainstReference(Scenario s) {
  s.world = MpiSize();
  if (s.world % s.ranks_per_node != 0) s.ranks_per_node = s.world;
  const int32_t r = MpiRank();
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  std::vector<std::vector<float>> ref_out(s.steps);
  for (int32_t step = 0; step < s.steps; ++step) {
    ref_out[step] = ref.Forward(batches[step][r]);
    ref.Backward(batches[step], grads[step]);
  }
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  CollPtr coll = MakeCollection(s, plan.get());
  ASSERT_NE(coll, nullptr);
  for (int32_t step = 0; step < s.steps; ++step) {
    KjtHolder kjt(batches[step][r], s.num_features, s.int32_ids);
    std::vector<float> out(ref_out[step].size());
    ASSERT_EQ(shardrec_embedding_forward(coll.get(), kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    std::string first;
    EXPECT_EQ(CountMismatches(out, ref_out[step], kRtol, kAtol, &first), 0u)
        << "rank " << r << " step " << step << " forward: " << first;
    ASSERT_EQ(shardrec_embedding_backward(coll.get(), grads[step][r].data(), grads[step][r].size(),
                                          nullptr),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
  }
  ExpectTables(coll.get(), s, ref);
}

TEST_F(MpiTest, EmbeddingTrainingMatchesTheReferenceAcrossShardingsAndOptimizers) {
  // Every sharding type x every optimizer, the pooling alternating between SUM and MEAN; and
  // sequence (NONE) tables once, table-row-wise with LAMB.
  for (int32_t sharding = 0; sharding < SHARDREC_SHARDING_COUNT; ++sharding) {
    for (int32_t optimizer = SHARDREC_OPTIMIZER_SGD; optimizer <= SHARDREC_OPTIMIZER_LAMB;
         ++optimizer) {
      const int32_t pooling =
          (sharding + optimizer) % 2 == 0 ? SHARDREC_POOLING_SUM : SHARDREC_POOLING_MEAN;
      SCOPED_TRACE(::testing::Message() << "sharding " << sharding << " pooling " << pooling
                                        << " optimizer " << optimizer);
      Scenario s = StandardScenario(MpiSize(), sharding, pooling);
      s.optimizer.type = optimizer;
      s.optimizer.lr = optimizer == SHARDREC_OPTIMIZER_SGD ? 0.1f : 0.02f;
      TrainAgainstReference(s);
    }
  }
  Scenario s = StandardScenario(MpiSize(), SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_POOLING_NONE);
  s.optimizer.type = SHARDREC_OPTIMIZER_LAMB;
  s.optimizer.lr = 0.02f;
  TrainAgainstReference(s);
}

TEST_F(MpiTest, PipelinedInputDistributionIsBitIdenticalToForward) {
  // Batch i+1's ids travel on the collection's worker thread while batch i does its backward
  // on this one: both threads call MPI, which the plugin serialises.
  Scenario s = StandardScenario(MpiSize(), SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  if (s.world % s.ranks_per_node != 0) s.ranks_per_node = s.world;
  s.optimizer.type = 1;
  s.optimizer.lr = 0.05f;
  s.steps = 4;
  const int32_t r = MpiRank();
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  CollPtr a = MakeCollection(s, plan.get()), b = MakeCollection(s, plan.get());
  ASSERT_TRUE(a && b);
  std::vector<std::vector<float>> out_a;
  for (int32_t step = 0; step < s.steps; ++step) {
    KjtHolder kjt(batches[step][r], s.num_features, false);
    std::vector<float> out(batches[step][r].batch_size * ref.output_dim());
    ASSERT_EQ(shardrec_embedding_forward(a.get(), kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(
        shardrec_embedding_backward(a.get(), grads[step][r].data(), grads[step][r].size(), nullptr),
        SHARDREC_OK);
    out_a.push_back(std::move(out));
  }
  {
    KjtHolder kjt(batches[0][r], s.num_features, false);
    ASSERT_EQ(shardrec_embedding_input_dist_start(b.get(), kjt.view(), nullptr), SHARDREC_OK);
  }
  ASSERT_EQ(shardrec_embedding_input_dist_wait(b.get(), nullptr), SHARDREC_OK);
  for (int32_t step = 0; step < s.steps; ++step) {
    std::vector<float> out(out_a[step].size());
    ASSERT_EQ(shardrec_embedding_forward_distributed(b.get(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_EQ(std::memcmp(out.data(), out_a[step].data(), out.size() * sizeof(float)), 0)
        << "rank " << r << " step " << step;
    std::unique_ptr<KjtHolder> next;
    if (step + 1 < s.steps) {
      next = std::make_unique<KjtHolder>(batches[step + 1][r], s.num_features, false);
      ASSERT_EQ(shardrec_embedding_input_dist_start(b.get(), next->view(), nullptr), SHARDREC_OK);
    }
    ASSERT_EQ(
        shardrec_embedding_backward(b.get(), grads[step][r].data(), grads[step][r].size(), nullptr),
        SHARDREC_OK)
        << shardrec_last_error();
    if (next) {
      ASSERT_EQ(shardrec_embedding_input_dist_wait(b.get(), nullptr), SHARDREC_OK);
    }
  }
  const auto snap_a = Snapshot(a.get(), s), snap_b = Snapshot(b.get(), s);
  ASSERT_EQ(snap_a.size(), snap_b.size());
  for (size_t i = 0; i < snap_a.size(); ++i) EXPECT_EQ(snap_a[i], snap_b[i]) << "tensor " << i;
}

TEST_F(MpiTest, MeshTrainingMatchesTheReplicaSimulation) {
  const int32_t world = MpiSize(), r = MpiRank();
  if (world < 2) GTEST_SKIP() << "a mesh of replicas needs two ranks";
  const int32_t shard = world / 2;  // two replica groups
  Scenario s = StandardScenario(shard, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.ranks_per_node = shard;
  s.optimizer.type = 2;
  s.optimizer.lr = 0.05f;
  s.steps = 3;
  Scenario global = s;
  global.world = world;
  ReplicaSim sim(s, world, 0, 1, false);
  const auto batches = MakeBatches(global, sim.model(0));
  const auto grads = MakeGrads(global, batches, sim.model(0).output_dim());
  const auto expected = sim.Train(batches, grads);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  shardrec_mesh_options_t mo;
  shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
  mo.sharding_group_size = shard;
  mo.sync_interval = 1;
  shardrec_mesh_t* mesh = nullptr;
  ASSERT_EQ(shardrec_mesh_create(&mesh, MpiWorld(), &mo), SHARDREC_OK) << shardrec_last_error();
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_options_t eo;
  shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  eo.seed = s.seed;
  shardrec_embedding_t* raw = nullptr;
  ASSERT_EQ(shardrec_mesh_embedding_create(&raw, mesh, plan.get(), &opt, &eo), SHARDREC_OK)
      << shardrec_last_error();
  CollPtr coll(raw);
  for (int32_t step = 0; step < s.steps; ++step) {
    KjtHolder kjt(batches[step][r], s.num_features, false);
    std::vector<float> out(expected.outputs[step][r].size());
    ASSERT_EQ(shardrec_embedding_forward(raw, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    std::string first;
    EXPECT_EQ(CountMismatches(out, expected.outputs[step][r], kRtol, kAtol, &first), 0u)
        << "rank " << r << " step " << step << " forward: " << first;
    ASSERT_EQ(
        shardrec_embedding_backward(raw, grads[step][r].data(), grads[step][r].size(), nullptr),
        SHARDREC_OK)
        << shardrec_last_error();
    int32_t synced = -1;
    ASSERT_EQ(shardrec_mesh_step(mesh, raw, &synced), SHARDREC_OK) << shardrec_last_error();
    EXPECT_EQ(synced, 1);
  }
  ExpectTables(raw, s, sim.model(sim.GroupOf(r)));
  coll.reset();
  shardrec_mesh_destroy(mesh);
}

TEST_F(MpiTest, DdpBucketsAverageLikeTheRankOrderedMean) {
  const int32_t world = MpiSize(), r = MpiRank();
  const std::vector<int64_t> counts = {3000, 17, 40000, 5};
  shardrec_ddp_options_t o;
  ASSERT_EQ(shardrec_ddp_options_init(&o, SHARDREC_DDP_OPTIONS_VERSION), SHARDREC_OK);
  o.first_bucket_bytes = 4096;  // several buckets, launched while others are still being marked
  o.bucket_cap_bytes = 65536;
  shardrec_ddp_t* ddp = nullptr;
  ASSERT_EQ(shardrec_ddp_create(&ddp, MpiWorld(), counts.data(), counts.size(), &o), SHARDREC_OK)
      << shardrec_last_error();
  auto value = [](int32_t rank, size_t t, int64_t i, int step) {
    return static_cast<float>(((rank + 1) * 131 + static_cast<int64_t>(t) * 7 + i * 3 + step) %
                              97) /
           32.0f;
  };
  for (int step = 0; step < 2; ++step) {
    for (size_t t = counts.size(); t-- > 0;) {
      float* g = nullptr;
      ASSERT_EQ(shardrec_ddp_grad(ddp, t, &g), SHARDREC_OK);
      for (int64_t i = 0; i < counts[t]; ++i) g[i] = value(r, t, i, step);
      ASSERT_EQ(shardrec_ddp_mark_ready(ddp, t), SHARDREC_OK) << shardrec_last_error();
    }
    ASSERT_EQ(shardrec_ddp_finish(ddp), SHARDREC_OK) << shardrec_last_error();
    for (size_t t = 0; t < counts.size(); ++t) {
      float* g = nullptr;
      ASSERT_EQ(shardrec_ddp_grad(ddp, t, &g), SHARDREC_OK);
      for (int64_t i = 0; i < counts[t]; ++i) {
        float sum = 0;
        for (int32_t q = 0; q < world; ++q) sum += value(q, t, i, step);
        ASSERT_NEAR(g[i], sum / world, 1e-6f * std::abs(sum)) << "tensor " << t << " element " << i;
      }
    }
  }
  shardrec_ddp_destroy(ddp);
}

}  // namespace
}  // namespace shardrec::testing
