// 2D training of FP8 tables (SHARDREC_DTYPE_FP8_E4M3 / _E5M2): a replica sync averages the
// replicas' decoded rows in fp32 and encodes each averaged row again, so every replica stores
// the same bytes afterwards. Checked against the mean of the replicas' rows encoded by the
// reference (RoundRowToFp8) at 2 and 4 replicas, and 2D training (2 replicas x 2-way sharding)
// against the replica simulation that re-encodes after each average.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/replica/diverged_sync.h"
#include "tests/capi/replica/replica_sim.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

struct MeshDeleter {
  void operator()(shardrec_mesh_t* m) const { shardrec_mesh_destroy(m); }
};
using MeshPtr = std::unique_ptr<shardrec_mesh_t, MeshDeleter>;

MeshPtr MakeMesh(int32_t world, int r, int32_t shard_size, int32_t interval) {
  shardrec_mesh_options_t o;
  shardrec_mesh_options_init(&o, SHARDREC_MESH_OPTIONS_VERSION);
  o.sharding_group_size = shard_size;
  o.sync_interval = interval;
  shardrec_mesh_t* m = nullptr;
  EXPECT_EQ(shardrec_mesh_create(&m, GroupComm(world, r), &o), SHARDREC_OK)
      << shardrec_last_error();
  return MeshPtr(m);
}

// R = world replicas of one rank each train two steps on different batches, then sync: every
// replica holds the same bits, each row an FP8 row, equal to the reference encoding of the
// replicas' mean row (in double, rounded to fp32 once). At two replicas the fp32 mean is exact
// (a + b rounds once, the halving is exact), so the rows match bit for bit; at four the sum's
// order may move an fp32 mean by an ulp and flip a rounding: rare, and at most one code.
void CheckEncodedMean(int32_t world, int32_t dtype) {
  const SyncedWeights w = TrainApartThenSync(world, dtype);
  const Scenario& s = w.scenario;
  const auto& before = w.before;
  const auto& after = w.after;
  const double code = dtype == SHARDREC_DTYPE_FP8_E4M3 ? std::ldexp(1.0, -3) : std::ldexp(1.0, -2);
  size_t diverged = 0, checked = 0, flipped = 0;
  for (size_t t = 0; t < s.tables.size(); ++t) {
    const int32_t dim = s.tables[t].dim;
    std::vector<float> want(before[t][0].size());
    for (size_t i = 0; i < want.size(); ++i) {
      double sum = 0;
      for (int r = 0; r < world; ++r) sum += before[t][r][i];
      want[i] = static_cast<float>(sum / world);
      diverged += before[t][1][i] != before[t][0][i];
    }
    for (size_t row = 0; row * dim < want.size(); ++row)
      RoundRowToFp8(want.data() + row * dim, dim, dtype);
    std::string first;
    EXPECT_EQ(CountRowsNotFp8(after[t][0], dim, dtype, &first), 0u) << first;
    for (int r = 1; r < world; ++r)
      ASSERT_EQ(std::memcmp(after[t][r].data(), after[t][0].data(), 4 * want.size()), 0)
          << "table " << t << ": replica " << r << " differs from replica 0 after the sync";
    for (size_t i = 0; i < want.size(); ++i, ++checked) {
      if (after[t][0][i] == want[i]) continue;
      ++flipped;
      ASSERT_NE(world, 2) << "table " << t << " element " << i << ": " << after[t][0][i]
                          << ", the encoded mean is " << want[i];
      ASSERT_LE(std::fabs(after[t][0][i] - want[i]), code * std::fabs(want[i]) + 1e-30)
          << "table " << t << " element " << i;
    }
  }
  EXPECT_GT(diverged, 10u) << "the replicas must have diverged for the test to mean anything";
  EXPECT_LE(flipped, checked / 100);
}

TEST(ReplicaFp8, E4M3SyncIsTheEncodedMeanAtTwoReplicas) {
  CheckEncodedMean(2, SHARDREC_DTYPE_FP8_E4M3);
}
TEST(ReplicaFp8, E5M2SyncIsTheEncodedMeanAtTwoReplicas) {
  CheckEncodedMean(2, SHARDREC_DTYPE_FP8_E5M2);
}
TEST(ReplicaFp8, E4M3SyncIsTheEncodedMeanAtFourReplicas) {
  CheckEncodedMean(4, SHARDREC_DTYPE_FP8_E4M3);
}

// 2 replicas x 2-way row-wise sharding, a sync every step: forward outputs and final weights
// against the replica simulation that re-encodes each averaged row (FP8 tolerances as
// RunEquivalence's), and both replicas hold the same bits.
TEST(ReplicaFp8, TwoDTrainingMatchesTheSimulation) {
  constexpr int32_t kWorld = 4;
  for (int32_t dtype : {SHARDREC_DTYPE_FP8_E4M3, SHARDREC_DTYPE_FP8_E5M2}) {
    SCOPED_TRACE(dtype);
    Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
    for (RefTable& t : s.tables) t.dtype = dtype;
    s.tables[0].dtype = SHARDREC_DTYPE_FLOAT32;  // a mixed plan: fp32 arena and FP8 rows
    s.optimizer.type = SHARDREC_OPTIMIZER_SGD;
    s.optimizer.lr = 0.1f;
    s.steps = 4;
    Scenario global = s;
    global.world = kWorld;
    ReplicaSim sim(s, kWorld, SHARDREC_MESH_LAYOUT_DEFAULT, 1, false);
    const auto batches = MakeBatches(global, sim.model(0));
    const auto grads = MakeGrads(global, batches, sim.model(0).output_dim());
    const auto expected = sim.Train(batches, grads);
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
    const float rtol = dtype == SHARDREC_DTYPE_FP8_E4M3 ? 0.25f : 0.5f, atol = 2e-2f;
    std::vector<std::vector<std::vector<float>>> final_w(kWorld);
    SpawnRanks(kWorld, [&](int r) {
      MeshPtr mesh = MakeMesh(kWorld, r, 2, 1);
      ASSERT_NE(mesh, nullptr);
      shardrec_embedding_options_t eo;
      shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      eo.seed = s.seed;
      shardrec_embedding_t* raw = nullptr;
      ASSERT_EQ(shardrec_mesh_embedding_create(&raw, mesh.get(), plan.get(), &opt, &eo),
                SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
      CollPtr coll(raw);
      for (int32_t step = 0; step < s.steps; ++step) {
        KjtHolder kjt(batches[step][r], s.num_features, false);
        std::vector<float> out(expected.outputs[step][r].size());
        ASSERT_EQ(shardrec_embedding_forward(raw, kjt.view(), out.data(), out.size(), nullptr),
                  SHARDREC_OK)
            << shardrec_last_error();
        std::string first;
        EXPECT_EQ(CountMismatches(out, expected.outputs[step][r], rtol, atol, &first), 0u)
            << "rank " << r << " step " << step << ": " << first;
        ASSERT_EQ(
            shardrec_embedding_backward(raw, grads[step][r].data(), grads[step][r].size(), nullptr),
            SHARDREC_OK)
            << shardrec_last_error();
        int32_t synced = -1;
        ASSERT_EQ(shardrec_mesh_step(mesh.get(), raw, &synced), SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_EQ(synced, 1);
      }
      const ReferenceModel& model = sim.model(sim.GroupOf(r));
      for (size_t t = 0; t < s.tables.size(); ++t) {
        const RefTable& rt = s.tables[t];
        std::vector<float> w(static_cast<size_t>(rt.rows) * rt.dim);
        ASSERT_EQ(shardrec_embedding_get_weights(raw, rt.name.c_str(), w.data(), w.size()),
                  SHARDREC_OK);
        std::string first;
        EXPECT_EQ(CountMismatches(w, model.weights(t), rtol, atol, &first), 0u)
            << "rank " << r << " table " << rt.name << ": " << first;
        EXPECT_LE(CountMismatches(w, model.weights(t), 1e-5f, 1e-6f, &first), w.size() / 100)
            << "rank " << r << " table " << rt.name << " beyond fp32 rounding: " << first;
        if (IsFp8Storage(rt.dtype)) {
          EXPECT_EQ(CountRowsNotFp8(w, rt.dim, rt.dtype, &first), 0u) << first;
        }
        final_w[r].push_back(std::move(w));
      }
    });
    // Ranks 0 and 1 are the two replicas of plan rank 0 (default layout): the same bits.
    for (size_t t = 0; t < s.tables.size(); ++t)
      EXPECT_EQ(std::memcmp(final_w[0][t].data(), final_w[1][t].data(), 4 * final_w[0][t].size()),
                0)
          << "table " << t;
  }
}

}  // namespace
}  // namespace shardrec::testing
