// The step counter's range, 0 to 2^53, through every way it changes: set_num_steps refuses more, a
// backward at 2^53 is refused on every rank and changes nothing, a save at 2^53 loads, and a
// manifest whose step is beyond it (signed again, so only the range can tell) is corrupt.
// set_num_steps(INT64_MAX) used to be accepted; the next backward wrapped the counter negative
// (signed overflow), and the checkpoint saved then could not be loaded.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/capi/checkpoint/checkpoint_test_util.h"

namespace shardrec::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxSteps = int64_t{1} << 53;
const Side kSide{2, 0, SHARDREC_SHARDING_ROW_WISE};

Scenario AdamScenario() { return SideScenario(kSide, SHARDREC_OPTIMIZER_ADAM, 5); }

// Every rank's batches and output gradients of s's steps.
struct Steps {
  int32_t features = 0;
  std::vector<std::vector<RefBatch>> batches;
  std::vector<std::vector<std::vector<float>>> grads;
};

Steps MakeSteps(const Scenario& s) {
  Scenario g = s;
  g.world = kSide.world;
  ReferenceModel ref(g.num_features, g.tables, g.optimizer, g.seed, g.world);
  Steps st;
  st.features = g.num_features;
  st.batches = MakeBatches(g, ref);
  st.grads = MakeGrads(g, st.batches, ref.output_dim());
  return st;
}

shardrec_status_t Forward(const Steps& st, int rank, shardrec_embedding_t* coll, int32_t step) {
  KjtHolder kjt(st.batches[step][rank], st.features, false);
  std::vector<float> out(st.grads[step][rank].size());
  return shardrec_embedding_forward(coll, kjt.view(), out.data(), out.size(), nullptr);
}

shardrec_status_t Backward(const Steps& st, int rank, shardrec_embedding_t* coll, int32_t step) {
  const std::vector<float>& g = st.grads[step][rank];
  return shardrec_embedding_backward(coll, g.data(), g.size(), nullptr);
}

TEST(CheckpointStep, SetNumStepsRefusesMoreThanTheMaximum) {
  OnSide(kSide, AdamScenario(), [&](int r, shardrec_embedding_t* c, shardrec_mesh_t*) {
    ASSERT_EQ(shardrec_embedding_set_num_steps(c, 7), SHARDREC_OK) << shardrec_last_error();
    for (int64_t bad : {kMaxSteps + 1, INT64_MAX, int64_t{-1}})
      EXPECT_EQ(shardrec_embedding_set_num_steps(c, bad), SHARDREC_EINVAL)
          << "rank " << r << ", " << bad;
    int64_t steps = 0;
    ASSERT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
    EXPECT_EQ(steps, 7) << "rank " << r;
    EXPECT_EQ(shardrec_embedding_set_num_steps(c, kMaxSteps), SHARDREC_OK) << shardrec_last_error();
  });
}

TEST(CheckpointStep, BackwardAtTheMaximumIsRefusedAndItsSaveLoads) {
  Scenario s = AdamScenario();
  s.steps = 2;
  const Steps st = MakeSteps(s);
  const std::string dir = FreshDir("step_max");
  OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    ASSERT_EQ(shardrec_embedding_set_num_steps(c, kMaxSteps - 1), SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(Forward(st, r, c, 0), SHARDREC_OK) << shardrec_last_error();
    ASSERT_EQ(Backward(st, r, c, 0), SHARDREC_OK) << shardrec_last_error();
    ASSERT_EQ(SaveOn(c, m, dir), SHARDREC_OK) << shardrec_last_error();
    // At the maximum: refused on every rank and nothing changes; the batch is still there to
    // train once the counter is lowered.
    const Snap before = TakeSnap(c, s);
    EXPECT_EQ(before.steps, kMaxSteps);
    ASSERT_EQ(Forward(st, r, c, 1), SHARDREC_OK) << shardrec_last_error();
    EXPECT_EQ(Backward(st, r, c, 1), SHARDREC_EUSAGE) << "rank " << r;
    EXPECT_NE(std::string(shardrec_last_error()).find("maximum"), std::string::npos)
        << shardrec_last_error();
    std::string why;
    EXPECT_TRUE(BitEqual(TakeSnap(c, s), before, &why)) << "rank " << r << ": " << why;
    ASSERT_EQ(shardrec_embedding_set_num_steps(c, 10), SHARDREC_OK);
    EXPECT_EQ(Backward(st, r, c, 1), SHARDREC_OK) << "rank " << r << ": " << shardrec_last_error();
    int64_t steps = 0;
    ASSERT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
    EXPECT_EQ(steps, 11);
  });
  // The checkpoint of the maximum loads, with its counter.
  OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    ASSERT_EQ(LoadOn(c, m, dir), SHARDREC_OK) << "rank " << r << ": " << shardrec_last_error();
    int64_t steps = 0;
    ASSERT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
    EXPECT_EQ(steps, kMaxSteps);
  });
}

TEST(CheckpointStep, ManifestStepBeyondTheMaximumIsCorrupt) {
  const Scenario s = AdamScenario();
  const std::string dir = FreshDir("step_manifest");
  OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(kSide, s, r, c, m, 0, 1);
    ASSERT_EQ(SaveOn(c, m, dir), SHARDREC_OK) << shardrec_last_error();
  });
  for (int64_t step : {kMaxSteps + 1, INT64_MAX}) {
    const std::string edited = FreshDir("step_manifest_edited");
    fs::copy(dir, edited);
    EditManifest(edited, [&](nlohmann::json& m) { m["step"] = step; });
    OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
      const Snap before = TakeSnap(c, s);
      EXPECT_EQ(LoadOn(c, m, edited), SHARDREC_ECORRUPT)
          << "rank " << r << ", step " << step << ": " << shardrec_last_error();
      EXPECT_NE(std::string(shardrec_last_error()).find(std::to_string(step)), std::string::npos)
          << shardrec_last_error();
      std::string why;
      EXPECT_TRUE(BitEqual(TakeSnap(c, s), before, &why)) << "rank " << r << ": " << why;
    });
  }
}

}  // namespace
}  // namespace shardrec::testing
