// The documented exactness condition of 2D training: SGD with a sync after every step equals the
// global model only without weight decay. With L2 decay the 2D run is the average of replicas
// that each decayed only the rows of their own batch: it equals that simulation and differs
// from the global model.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/replica/replica_sim.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kWorld = 4;
constexpr int32_t kShard = 2;

// Trains SGD (with `decay` as L2 weight decay) in 2D with a sync every step and returns the
// weights of every table as rank 0 sees them.
std::vector<std::vector<float>> Train2D(const Scenario& s,
                                        const std::vector<std::vector<RefBatch>>& batches,
                                        const std::vector<std::vector<std::vector<float>>>& grads) {
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  std::vector<std::vector<float>> weights(s.tables.size());
  SpawnRanks(kWorld, [&](int r) {
    shardrec_mesh_options_t o;
    shardrec_mesh_options_init(&o, SHARDREC_MESH_OPTIONS_VERSION);
    o.sharding_group_size = kShard;
    shardrec_mesh_t* mesh = nullptr;
    ASSERT_EQ(shardrec_mesh_create(&mesh, GroupComm(kWorld, r), &o), SHARDREC_OK);
    shardrec_embedding_options_t eo;
    shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    eo.seed = s.seed;
    shardrec_embedding_t* coll = nullptr;
    ASSERT_EQ(shardrec_mesh_embedding_create(&coll, mesh, plan.get(), &opt, &eo), SHARDREC_OK)
        << shardrec_last_error();
    for (int32_t step = 0; step < s.steps; ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, false);
      std::vector<float> out(grads[step][r].size());
      ASSERT_EQ(shardrec_embedding_forward(coll, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK);
      ASSERT_EQ(
          shardrec_embedding_backward(coll, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK);
      ASSERT_EQ(shardrec_mesh_step(mesh, coll, nullptr), SHARDREC_OK);
    }
    for (size_t t = 0; t < s.tables.size(); ++t) {
      std::vector<float> w(static_cast<size_t>(s.tables[t].rows) * s.tables[t].dim);
      ASSERT_EQ(shardrec_embedding_get_weights(coll, s.tables[t].name.c_str(), w.data(), w.size()),
                SHARDREC_OK);
      if (r == 0) weights[t] = w;
    }
    shardrec_embedding_destroy(coll);
    shardrec_mesh_destroy(mesh);
  });
  return weights;
}

TEST(Replica2DWeightDecay, EqualsReplicaAveragingNotTheGlobalModel) {
  Scenario s = StandardScenario(kShard, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.optimizer.type = SHARDREC_OPTIMIZER_SGD;
  s.optimizer.lr = 0.2f;
  s.optimizer.weight_decay = 0.5f;
  s.optimizer.weight_decay_mode = SHARDREC_WEIGHT_DECAY_L2;
  s.steps = 3;
  Scenario global = s;
  global.world = kWorld;
  ReplicaSim sim(s, kWorld, SHARDREC_MESH_LAYOUT_DEFAULT, 1, false);
  const auto batches = MakeBatches(global, sim.model(0));
  const auto grads = MakeGrads(global, batches, sim.model(0).output_dim());
  sim.Train(batches, grads);
  // The global model: one unsharded reference on the concatenated batch of all W ranks.
  ReferenceModel whole(s.num_features, s.tables, s.optimizer, s.seed, kWorld);
  for (int32_t step = 0; step < s.steps; ++step) whole.Backward(batches[step], grads[step]);

  const auto got = Train2D(s, batches, grads);
  size_t differs_from_global = 0;
  for (size_t t = 0; t < s.tables.size(); ++t) {
    std::string first;
    EXPECT_EQ(CountMismatches(got[t], sim.model(0).weights(t), 1e-5f, 1e-6f, &first), 0u)
        << "table " << t << " against the replica simulation: " << first;
    differs_from_global += CountMismatches(got[t], whole.weights(t), 1e-4f, 1e-5f, &first);
  }
  EXPECT_GT(differs_from_global, 0u)
      << "with weight decay 2D training should not equal the global model";
}

}  // namespace
}  // namespace shardrec::testing
