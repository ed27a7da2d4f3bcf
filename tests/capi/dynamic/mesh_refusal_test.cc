// Refusals on a 2D mesh whose data-parallel tables reduce over the world (replica.h,
// docs/dynamic-tables.md "Data-parallel tables"): a batch refused on one rank of one sharding group
// fails the forward of every rank of every group when the table is dynamic (its inserts are agreed
// over the world), with the plain and the pipelined forward, and a gradient refused on one rank
// fails the backward of every rank of every group, dynamic or fixed (the gradients reduce over the
// world). Nothing changes anywhere: the run then trains on exactly as a run that left the refused
// step out (forward), or did not train it (backward). Each run has its own communicators, so a
// run that waits out its timeout (a refusal not agreed) leaves the next one unharmed.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "shardrec/replica.h"
#include "tests/capi/dynamic/mesh_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kWorld = 4, kShard = 2, kSteps = 4, kBadStep = 2, kBadRank = 1;

enum class Fault { kNone, kLengths, kNanWeight, kNanGrad };

struct RunSpec {
  Fault fault = Fault::kNone;
  bool pipelined = false;
  int32_t omit = -1;       // this step is left out on every rank
  int32_t untrained = -1;  // this step's forward runs on every rank, its backward on none
};

struct MeshRun {
  std::vector<std::vector<int>> forward_rc, backward_rc;  // [step][rank]; backward -1: not called
  std::vector<std::vector<std::vector<float>>> out;       // [step][rank]
  std::vector<std::vector<float>> probe;                  // [rank]: every pool id, evaluated
};

// Both tables data-parallel, dynamic or fixed (then ids in [0, rows)), planned for a sharding
// group; batches for every rank of the mesh.
MeshScenario DataParallelMesh(bool dynamic) {
  DynScenario s =
      MakeDynScenario(kShard, SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_OPTIMIZER_ADAGRAD, 64, 24);
  if (!dynamic) {
    s.fixed = true;
    for (auto& pool : s.pools)
      for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int64_t>(i * 2);
  }
  return PlanMesh(s, kWorld, kSteps);
}

// Rank r's forward of `v`, plain or as input_dist_start / _wait / forward_distributed (stopping at
// the first failure, as a training loop does).
int Forward(shardrec_embedding_t* c, const shardrec_kjt_view_t* v, std::vector<float>* y,
            bool pipelined) {
  if (!pipelined) return shardrec_embedding_forward(c, v, y->data(), y->size(), nullptr);
  int rc = shardrec_embedding_input_dist_start(c, v, nullptr);
  if (rc == SHARDREC_OK) rc = shardrec_embedding_input_dist_wait(c, nullptr);
  if (rc == SHARDREC_OK)
    rc = shardrec_embedding_forward_distributed(c, y->data(), y->size(), nullptr);
  return rc;
}

// Trains kSteps steps of m on a 2 x 2 mesh of fresh communicators, every batch weighted by ones,
// rank kBadRank's step kBadStep spoilt by spec.fault; a failed forward skips the step's backward.
// Then every rank evaluates every pool id.
MeshRun TrainMesh(const MeshScenario& m, const RunSpec& spec) {
  MeshRun run;
  run.forward_rc.assign(kSteps, std::vector<int>(kWorld, 0));
  run.backward_rc.assign(kSteps, std::vector<int>(kWorld, -1));
  run.out.assign(kSteps, std::vector<std::vector<float>>(kWorld));
  run.probe.assign(kWorld, {});
  std::vector<shardrec_comm_t*> comms(kWorld, nullptr);
  EXPECT_EQ(shardrec_comm_create_local_group(comms.data(), kWorld, nullptr), SHARDREC_OK);
  for (shardrec_comm_t* c : comms) shardrec_comm_set_timeout(c, 10000);
  RefBatch probe;
  probe.batch_size = static_cast<int64_t>(m.s.pools[0].size());
  for (int f = 0; f < 3; ++f)
    for (int64_t i = 0; i < probe.batch_size; ++i) {
      probe.lengths.push_back(f == 2 ? 0 : 1);
      if (f < 2) probe.ids.push_back(m.s.pools[static_cast<size_t>(f)][static_cast<size_t>(i)]);
    }
  SpawnRanks(kWorld, [&](int r) {
    MeshRank mr;
    shardrec_mesh_options_t mo;
    shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
    mo.sharding_group_size = kShard;
    ASSERT_EQ(shardrec_mesh_create(&mr.mesh, comms[r], &mo), SHARDREC_OK) << shardrec_last_error();
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = m.s.base.seed;
    ASSERT_EQ(shardrec_mesh_embedding_create(&mr.coll, mr.mesh, m.plan.get(), &m.opt, &o),
              SHARDREC_OK)
        << shardrec_last_error();
    for (int32_t step = 0; step < kSteps; ++step) {
      if (step == spec.omit) continue;
      const bool bad = step == kBadStep && r == kBadRank;
      const RefBatch& b = m.batches[step][r];
      KjtHolder kjt(b, 3, false);
      shardrec_kjt_view_t v = *kjt.view();
      std::vector<float> w(v.num_values, 1.0f);
      v.weights = w.data();
      v.num_weights = w.size();
      if (bad && spec.fault == Fault::kLengths) --v.num_values, --v.num_weights;
      if (bad && spec.fault == Fault::kNanWeight) w[0] = NAN;
      std::vector<float> y(static_cast<size_t>(b.batch_size * m.dim));
      run.forward_rc[step][r] = Forward(mr.coll, &v, &y, spec.pipelined);
      if (run.forward_rc[step][r] != SHARDREC_OK || step == spec.untrained) continue;
      run.out[step][r] = y;
      std::vector<float> g = Grads(b.batch_size * m.dim, step, r);
      if (bad && spec.fault == Fault::kNanGrad) g[0] = NAN;
      run.backward_rc[step][r] = shardrec_embedding_backward(mr.coll, g.data(), g.size(), nullptr);
    }
    ASSERT_EQ(shardrec_embedding_set_training(mr.coll, 0), SHARDREC_OK);
    KjtHolder kjt(probe, 3, false);
    run.probe[r].resize(static_cast<size_t>(probe.batch_size * m.dim));
    EXPECT_EQ(shardrec_embedding_forward(mr.coll, kjt.view(), run.probe[r].data(),
                                         run.probe[r].size(), nullptr),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
  });
  for (shardrec_comm_t* c : comms) shardrec_comm_destroy(c);
  return run;
}

// `got` trained on after its step kBadStep exactly as `want`: the same outputs from the next step
// on, and the same rows in the end, on every rank.
void ExpectTrainsOnAs(const MeshRun& got, const MeshRun& want) {
  for (int32_t step = kBadStep + 1; step < kSteps; ++step)
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(got.forward_rc[step][r], SHARDREC_OK) << "step " << step << " rank " << r;
      EXPECT_EQ(got.backward_rc[step][r], SHARDREC_OK) << "step " << step << " rank " << r;
      EXPECT_EQ(got.out[step][r], want.out[step][r]) << "step " << step << " rank " << r;
    }
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(got.probe[r], want.probe[r]) << "probe, rank " << r;
}

// A data-parallel dynamic table's forward is agreed over the world: one rank's bad lengths or NaN
// per-id weight fails every rank's forward, plain or pipelined.
TEST(DynamicMeshRefusal, ForwardRefusedOnOneRankFailsEveryGroup) {
  const MeshScenario m = DataParallelMesh(true);
  ASSERT_NE(m.plan, nullptr);
  const MeshRun without = TrainMesh(m, {Fault::kNone, false, kBadStep, -1});
  for (const bool pipelined : {false, true})
    for (const Fault fault : {Fault::kLengths, Fault::kNanWeight}) {
      SCOPED_TRACE(std::string(pipelined ? "pipelined" : "plain") +
                   (fault == Fault::kLengths ? ", bad lengths" : ", NaN weight"));
      const MeshRun got = TrainMesh(m, {fault, pipelined, -1, -1});
      for (int r = 0; r < kWorld; ++r) {
        EXPECT_EQ(got.forward_rc[kBadStep][r], SHARDREC_EINVAL) << "rank " << r;
        EXPECT_EQ(got.backward_rc[kBadStep][r], -1) << "rank " << r;
      }
      ExpectTrainsOnAs(got, without);
    }
}

// The backward is agreed over every rank the data-parallel gradients reduce over: one rank's NaN
// gradient fails every rank's backward, whether the tables are dynamic or fixed.
TEST(DynamicMeshRefusal, BackwardRefusedOnOneRankFailsEveryGroup) {
  for (const bool dynamic : {true, false}) {
    SCOPED_TRACE(dynamic ? "dynamic" : "fixed");
    const MeshScenario m = DataParallelMesh(dynamic);
    ASSERT_NE(m.plan, nullptr);
    const MeshRun untrained = TrainMesh(m, {Fault::kNone, false, -1, kBadStep});
    const MeshRun got = TrainMesh(m, {Fault::kNanGrad, false, -1, -1});
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(got.forward_rc[kBadStep][r], SHARDREC_OK) << "rank " << r;
      EXPECT_EQ(got.backward_rc[kBadStep][r], SHARDREC_EINVAL) << "rank " << r;
    }
    ExpectTrainsOnAs(got, untrained);
  }
}

}  // namespace
}  // namespace shardrec::testing
