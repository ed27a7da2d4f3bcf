// 2D parallelism through the C API: W = 8 ranks (threads) as R replica groups x S-way sharding,
// compared with the unsharded reference (SGD) and with a simulation of R independent replicas
// that average after every sync (stateful optimizers).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/replica/replica_sim.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kWorld = 8;
constexpr float kRtol = 1e-5f, kAtol = 1e-6f;

struct MeshDeleter {
  void operator()(shardrec_mesh_t* m) const { shardrec_mesh_destroy(m); }
};
using MeshPtr = std::unique_ptr<shardrec_mesh_t, MeshDeleter>;

MeshPtr MakeMesh(int r, int32_t s, int32_t layout, int32_t interval, int32_t mode) {
  shardrec_mesh_options_t o;
  shardrec_mesh_options_init(&o, SHARDREC_MESH_OPTIONS_VERSION);
  o.sharding_group_size = s;
  o.layout = layout;
  o.ranks_per_node = 4;
  o.sync_interval = interval;
  o.sync_mode = mode;
  shardrec_mesh_t* m = nullptr;
  EXPECT_EQ(shardrec_mesh_create(&m, GroupComm(kWorld, r), &o), SHARDREC_OK)
      << "rank " << r << ": " << shardrec_last_error();
  return MeshPtr(m);
}

struct Case2D {
  int32_t shard_size;
  int32_t layout;
  int32_t sharding_type;
  int32_t optimizer;
  int32_t interval;
  int32_t mode;
};

std::string Name(const Case2D& c) {
  static const char* kTypes[] = {"DP", "TW", "RW", "CW", "TWRW", "TWCW", "GRID"};
  return StrCatName("S", c.shard_size, c.layout ? "_interhost_" : "_default_",
                    kTypes[c.sharding_type], "_opt", c.optimizer, "_every", c.interval,
                    c.mode == SHARDREC_SYNC_WEIGHTS_ONLY ? "_weightsonly" : "");
}

// Trains the 2D collection on every rank and checks forward outputs each step and the final
// weights and optimizer states against the replica simulation.
void Run2D(const Case2D& c, std::vector<int64_t> batch_sizes = {}) {
  Scenario s = StandardScenario(c.shard_size, c.sharding_type, SHARDREC_POOLING_SUM);
  s.optimizer.type = c.optimizer;
  s.optimizer.lr = c.optimizer == 0 ? 0.1f : 0.05f;
  s.steps = 4;
  Scenario global = s;
  global.world = kWorld;
  global.batch_sizes = batch_sizes;
  ReplicaSim sim(s, kWorld, c.layout, c.interval, c.mode == SHARDREC_SYNC_WEIGHTS_ONLY);
  const auto batches = MakeBatches(global, sim.model(0));
  const auto grads = MakeGrads(global, batches, sim.model(0).output_dim());
  const auto expected = sim.Train(batches, grads);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(kWorld, [&](int r) {
    MeshPtr mesh = MakeMesh(r, c.shard_size, c.layout, c.interval, c.mode);
    ASSERT_NE(mesh, nullptr);
    int32_t group = -1;
    ASSERT_EQ(shardrec_mesh_coords(mesh.get(), &group, nullptr, nullptr, nullptr), SHARDREC_OK);
    EXPECT_EQ(group, sim.GroupOf(r));
    shardrec_embedding_options_t eo;
    shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    eo.seed = s.seed;
    shardrec_embedding_t* raw = nullptr;
    ASSERT_EQ(shardrec_mesh_embedding_create(&raw, mesh.get(), plan.get(), &opt, &eo), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    CollPtr coll(raw);
    for (int32_t step = 0; step < s.steps; ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, false);
      std::vector<float> out(expected.outputs[step][r].size());
      ASSERT_EQ(shardrec_embedding_forward(raw, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
      std::string first;
      EXPECT_EQ(CountMismatches(out, expected.outputs[step][r], kRtol, kAtol, &first), 0u)
          << Name(c) << " rank " << r << " step " << step << " forward: " << first;
      ASSERT_EQ(
          shardrec_embedding_backward(raw, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
      int32_t synced = -1;
      ASSERT_EQ(shardrec_mesh_step(mesh.get(), raw, &synced), SHARDREC_OK) << shardrec_last_error();
      EXPECT_EQ(synced, (step + 1) % c.interval == 0 ? 1 : 0);
    }
    const auto& model = sim.model(group);
    for (size_t t = 0; t < s.tables.size(); ++t) {
      const RefTable& rt = s.tables[t];
      std::vector<float> w(static_cast<size_t>(rt.rows) * rt.dim);
      ASSERT_EQ(shardrec_embedding_get_weights(raw, rt.name.c_str(), w.data(), w.size()),
                SHARDREC_OK)
          << shardrec_last_error();
      std::string first;
      EXPECT_EQ(CountMismatches(w, model.weights(t), kRtol, kAtol, &first), 0u)
          << Name(c) << " rank " << r << " table " << rt.name << " weights: " << first;
      size_t ns = 0;
      shardrec_embedding_num_states(raw, &ns);
      for (size_t i = 0; i < ns; ++i) {
        const char* name = nullptr;
        int32_t row_wise = 0;
        ASSERT_EQ(shardrec_embedding_state_info(raw, i, &name, &row_wise), SHARDREC_OK);
        std::vector<float> st(static_cast<size_t>(rt.rows) * (row_wise ? 1 : rt.dim));
        ASSERT_EQ(shardrec_embedding_get_state(raw, rt.name.c_str(), name, st.data(), st.size()),
                  SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_EQ(CountMismatches(st, model.state(t, name), kRtol, kAtol, &first), 0u)
            << Name(c) << " rank " << r << " table " << rt.name << " state " << name << ": "
            << first;
      }
    }
  });
}

class Replica2DSgd : public ::testing::TestWithParam<Case2D> {};

// SGD with a sync after every step: 2D training equals the global model exactly.
TEST_P(Replica2DSgd, EqualsTheGlobalModel) { Run2D(GetParam()); }

std::vector<Case2D> SgdCases() {
  std::vector<Case2D> cases;
  for (int32_t s : {4, 2}) {
    for (int32_t layout : {SHARDREC_MESH_LAYOUT_DEFAULT, SHARDREC_MESH_LAYOUT_INTER_HOST}) {
      for (int32_t type = 0; type < SHARDREC_SHARDING_COUNT; ++type) {
        cases.push_back({s, layout, type, 0, 1, SHARDREC_SYNC_DEFAULT});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, Replica2DSgd, ::testing::ValuesIn(SgdCases()),
                         [](const auto& info) { return Name(info.param); });

class Replica2DStateful : public ::testing::TestWithParam<Case2D> {};

// Stateful optimizers: model averaging of R replicas, checked against the simulation,
// optimizer state included.
TEST_P(Replica2DStateful, EqualsTheReplicaSimulation) { Run2D(GetParam()); }

std::vector<Case2D> StatefulCases() {
  std::vector<Case2D> cases;
  for (int32_t opt : {1, 2, 3}) {  // Adagrad, row-wise Adagrad, Adam
    for (int32_t interval : {1, 3}) {
      cases.push_back({4, SHARDREC_MESH_LAYOUT_DEFAULT, SHARDREC_SHARDING_ROW_WISE, opt, interval,
                       SHARDREC_SYNC_DEFAULT});
      cases.push_back({2, SHARDREC_MESH_LAYOUT_INTER_HOST, SHARDREC_SHARDING_COLUMN_WISE, opt,
                       interval, SHARDREC_SYNC_DEFAULT});
    }
    cases.push_back({4, SHARDREC_MESH_LAYOUT_DEFAULT, SHARDREC_SHARDING_TABLE_WISE, opt, 1,
                     SHARDREC_SYNC_WEIGHTS_ONLY});
  }
  cases.push_back(
      {4, SHARDREC_MESH_LAYOUT_DEFAULT, SHARDREC_SHARDING_GRID, 2, 2, SHARDREC_SYNC_DEFAULT});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, Replica2DStateful, ::testing::ValuesIn(StatefulCases()),
                         [](const auto& info) { return Name(info.param); });

TEST(Replica2D, RankWithAnEmptyBatchStillSyncs) {
  std::vector<int64_t> sizes = {4, 0, 3, 4, 0, 5, 4, 2};
  Run2D({4, SHARDREC_MESH_LAYOUT_DEFAULT, SHARDREC_SHARDING_ROW_WISE, 0, 1, SHARDREC_SYNC_DEFAULT},
        sizes);
  Run2D(
      {2, SHARDREC_MESH_LAYOUT_DEFAULT, SHARDREC_SHARDING_TABLE_WISE, 1, 1, SHARDREC_SYNC_DEFAULT},
      sizes);
}

}  // namespace
}  // namespace shardrec::testing
