// Replicas trained apart, then synced once (diverged_sync.h).
#include "tests/capi/replica/diverged_sync.h"

#include <gtest/gtest.h>

#include <memory>

#include "shardrec/replica.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {

namespace {

struct MeshDeleter {
  void operator()(shardrec_mesh_t* m) const { shardrec_mesh_destroy(m); }
};
using MeshPtr = std::unique_ptr<shardrec_mesh_t, MeshDeleter>;

void ReadWeights(shardrec_embedding_t* coll, const Scenario& s, std::vector<float>* out, size_t t) {
  const RefTable& rt = s.tables[t];
  out->resize(static_cast<size_t>(rt.rows) * rt.dim);
  ASSERT_EQ(shardrec_embedding_get_weights(coll, rt.name.c_str(), out->data(), out->size()),
            SHARDREC_OK)
      << shardrec_last_error();
}

}  // namespace

SyncedWeights TrainApartThenSync(int32_t world, int32_t dtype) {
  SyncedWeights w;
  Scenario& s = w.scenario;
  s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  for (RefTable& t : s.tables) t.dtype = dtype;
  s.optimizer.lr = 0.37f;  // large steps, so the replicas really diverge
  Scenario global = s;
  global.world = world;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, world);
  const auto batches = MakeBatches(global, ref);
  const auto grads = MakeGrads(global, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  EXPECT_NE(plan, nullptr);
  if (plan == nullptr) return w;
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  w.before.assign(s.tables.size(), std::vector<std::vector<float>>(world));
  w.after = w.before;
  SpawnRanks(world, [&](int r) {
    shardrec_mesh_options_t o;
    shardrec_mesh_options_init(&o, SHARDREC_MESH_OPTIONS_VERSION);
    o.sharding_group_size = 1;
    shardrec_mesh_t* m = nullptr;
    ASSERT_EQ(shardrec_mesh_create(&m, GroupComm(world, r), &o), SHARDREC_OK)
        << shardrec_last_error();
    MeshPtr mesh(m);
    shardrec_embedding_options_t eo;
    shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    eo.seed = s.seed;
    shardrec_embedding_t* raw = nullptr;
    ASSERT_EQ(shardrec_mesh_embedding_create(&raw, mesh.get(), plan.get(), &opt, &eo), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(raw);
    for (int step = 0; step < 2; ++step) {  // two steps without a sync
      KjtHolder kjt(batches[step][r], s.num_features, false);
      std::vector<float> out(static_cast<size_t>(batches[step][r].batch_size * ref.output_dim()));
      ASSERT_EQ(shardrec_embedding_forward(raw, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(
          shardrec_embedding_backward(raw, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << shardrec_last_error();
    }
    for (size_t t = 0; t < s.tables.size(); ++t) ReadWeights(raw, s, &w.before[t][r], t);
    ASSERT_EQ(shardrec_mesh_sync(mesh.get(), raw, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
        << shardrec_last_error();
    for (size_t t = 0; t < s.tables.size(); ++t) ReadWeights(raw, s, &w.after[t][r], t);
  });
  return w;
}

}  // namespace shardrec::testing
