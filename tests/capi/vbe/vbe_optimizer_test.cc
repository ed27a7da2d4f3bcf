// VBE training (docs/variable-batch.md) with the stateful optimizers whose update moves a row
// even when its gradient is zero (Adam's moments decay, weight decay shrinks the row): a bag no
// output sample reads (inverse indices skip it) must leave its rows untouched, as the expanded
// batch, which does not hold it, does, whatever the shape of the inverse indices.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/capi/vbe/vbe_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

TEST(VbeOptimizers, MatchTheExpandedBatch) {
  for (int32_t type : {3, 4, 5})
    for (VbeMode mode : {VbeMode::kOnce, VbeMode::kInverse})
      for (int32_t sharding : {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE}) {
        SCOPED_TRACE("optimizer " + std::to_string(type) + " " + VbeModeName(mode) + " sharding " +
                     std::to_string(sharding));
        Scenario s = StandardScenario(2, sharding, SHARDREC_POOLING_SUM);
        s.optimizer.type = type;
        s.optimizer.lr = 0.05f;
        s.max_bag = 3;
        PlanPtr plan = MakePlan(s);
        ASSERT_NE(plan, nullptr);
        VbeRunOptions o;
        o.mode = mode;
        RunVbeEquivalence(s, plan.get(), o);
      }
}

// Sequence collections: the padded batch without the unread bags' ids has fewer rows.
TEST(VbeOptimizers, AdamSequencesMatchTheExpandedBatch) {
  for (int32_t world : {1, 4})
    for (VbeMode mode : {VbeMode::kOnce, VbeMode::kInverse}) {
      SCOPED_TRACE("world " + std::to_string(world) + " " + VbeModeName(mode));
      Scenario s = StandardScenario(world, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_NONE);
      s.optimizer.type = 3;
      s.optimizer.lr = 0.05f;
      PlanPtr plan = MakePlan(s);
      ASSERT_NE(plan, nullptr);
      VbeRunOptions o;
      o.mode = mode;
      RunVbeEquivalence(s, plan.get(), o);
    }
}

TEST(VbeOptimizers, WeightDecayMatchesTheExpandedBatch) {
  for (int32_t decay_mode : {1, 2})
    for (VbeMode mode : {VbeMode::kOnce, VbeMode::kInverse}) {
      SCOPED_TRACE("decay mode " + std::to_string(decay_mode) + " " + VbeModeName(mode));
      Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_MEAN);
      s.optimizer.type = 0;
      s.optimizer.lr = 0.05f;
      s.optimizer.weight_decay = 0.1f;
      s.optimizer.weight_decay_mode = decay_mode;
      PlanPtr plan = MakePlan(s);
      ASSERT_NE(plan, nullptr);
      VbeRunOptions o;
      o.mode = mode;
      RunVbeEquivalence(s, plan.get(), o);
    }
}

// Inverse indices of the shapes the VBE step tells apart without marking each bag (ascending from
// 0 to B_f - 1 in steps of 0 or 1: every bag read) beside near misses that leave a bag unread
// (a skipped middle bag, a first or last bag no sample reads, the identity with one bag more) and
// an order that reads every bag but descends. B = 6; shape k of feature f at step `step` and rank
// r is (f + step + r) % 8, and the last step's features are all of the first two shapes, so that
// no bag of the batch is unread. Every bag holds one to three ids.
VbeBatchData ShapedBatch(uint64_t seed, const std::vector<int64_t>& ranges, size_t step, size_t r,
                         bool weighted) {
  static const std::vector<std::vector<int64_t>> kShapes = {
      {0, 1, 2, 3, 4, 5},  // the identity (B_f = B)
      {0, 0, 1, 1, 2, 2},  // a request's candidates reading its bag
      {0, 0, 1, 1, 3, 3},  // bag 2 unread
      {1, 1, 1, 2, 2, 2},  // bag 0 unread
      {0, 1, 1, 2, 2, 2},  // bag 3 unread (B_f = 4)
      {0, 1, 2, 3, 4, 5},  // bag 6 unread (B_f = 7)
      {2, 2, 1, 1, 0, 0},  // every bag read, descending
      {0, 0, 0, 0, 0, 0},  // one bag, read by every sample
  };
  static const std::vector<int64_t> kBags = {6, 3, 4, 3, 4, 7, 3, 1};
  std::mt19937_64 gen(seed);
  VbeBatchData v;
  v.has_inverse = true;
  v.batch_size = 6;
  const size_t F = ranges.size();
  for (size_t f = 0; f < F; ++f) {
    const size_t k = step == 8 ? f % 2 : (f + step + r) % kShapes.size();
    v.sizes.push_back(kBags[k]);
    v.inverse.insert(v.inverse.end(), kShapes[k].begin(), kShapes[k].end());
  }
  for (size_t f = 0; f < F; ++f)
    for (int64_t j = 0; j < v.sizes[f]; ++j) {
      const auto len = static_cast<int32_t>(1 + gen() % 3);
      v.lengths.push_back(len);
      for (int32_t i = 0; i < len; ++i) {
        v.ids.push_back(static_cast<int64_t>(gen() % static_cast<uint64_t>(ranges[f])));
        if (weighted) v.weights.push_back(0.25f + static_cast<float>(gen() % 1000) / 500.0f);
      }
    }
  return v;
}

// With Adam (moments move a row whose gradient is zero) and with weight decay, so that a bag
// taken for read when no sample reads it would change rows the expanded batch leaves alone.
TEST(VbeOptimizers, InverseShapesMatchTheExpandedBatch) {
  for (int32_t world : {1, 2})
    for (int32_t pooling : {SHARDREC_POOLING_SUM, SHARDREC_POOLING_NONE})
      for (bool decay : {false, true}) {
        SCOPED_TRACE("world " + std::to_string(world) + " pooling " + std::to_string(pooling) +
                     (decay ? " SGD with weight decay" : " Adam"));
        Scenario s = StandardScenario(world, SHARDREC_SHARDING_ROW_WISE, pooling);
        s.optimizer.type = decay ? 0 : 3;
        s.optimizer.lr = 0.05f;
        if (decay) {
          s.optimizer.weight_decay = 0.1f;
          s.optimizer.weight_decay_mode = 1;
        }
        s.weighted = pooling == SHARDREC_POOLING_SUM;
        PlanPtr plan = MakePlan(s);
        ASSERT_NE(plan, nullptr);
        const std::vector<int64_t> ranges = IdRanges(s);
        VbeRunOptions o;
        o.mode = VbeMode::kInverse;
        o.steps = 9;
        o.batch = [&](size_t step, size_t rank) {
          return ShapedBatch(17 * step + 5 * rank + 3, ranges, step, rank, s.weighted);
        };
        RunVbeEquivalence(s, plan.get(), o);
      }
}

// Every feature of StandardScenario's 4 has two bags of one id; the one sample reads bag `read`,
// the other bag is unread.
VbeBatchData TwoBagsPerFeature(int64_t read) {
  VbeBatchData v;
  v.batch_size = 1;
  v.sizes.assign(4, 2);
  v.lengths.assign(8, 1);
  v.ids = {1, 2, 3, 4, 1, 2, 3, 4};
  v.has_inverse = true;
  v.inverse.assign(4, read);
  return v;
}

// The ids of a bag no sample reads leave the padded batch, but only from a sound view: an id
// outside its table there is still refused, named as before.
TEST(VbeOptimizers, UnreadBagsAreStillChecked) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), &opt, nullptr),
              SHARDREC_OK);
    CollPtr coll(c);
    VbeBatchData v = TwoBagsPerFeature(0);
    if (r == 0) v.ids[3] = 999;  // feature 1's unread bag: outside t1's 23 rows
    const shardrec_kjt_vbe_view_t view = v.View();
    size_t len = 0;
    ASSERT_EQ(shardrec_embedding_vbe_output_len(c, &view, &len), SHARDREC_OK);
    std::vector<float> out(len);
    EXPECT_EQ(shardrec_embedding_forward_vbe(c, &view, out.data(), len, nullptr), SHARDREC_EINVAL);
    const std::string err = shardrec_last_error();
    if (r == 0) {
      EXPECT_NE(err.find("feature 'f1' sample 1 (value position 3): id 999 is out of range"),
                std::string::npos)
          << err;
    }
  });
}

// A read bag's bad id or weight after an unread bag that holds ids is named at its position in
// the caller's values (the padded batch's copy without the unread ids would shift it).
TEST(VbeOptimizers, MessagesNameTheCallersValuePositionsPastUnreadBags) {
  Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_t* c = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, nullptr), SHARDREC_OK);
  CollPtr coll(c);
  VbeBatchData v = TwoBagsPerFeature(1);
  v.weights.assign(8, 1.0f);
  const auto refused = [&](const VbeBatchData& bad) {
    const shardrec_kjt_vbe_view_t view = bad.View();
    std::vector<float> out(s.tables[0].dim + s.tables[1].dim * 2 + s.tables[2].dim);
    EXPECT_EQ(shardrec_embedding_forward_vbe(c, &view, out.data(), out.size(), nullptr),
              SHARDREC_EINVAL);
    return std::string(shardrec_last_error());
  };
  VbeBatchData bad_id = v;
  bad_id.ids[5] = 999;  // feature 2's bag 1: outside t1's 23 rows
  std::string err = refused(bad_id);
  EXPECT_NE(err.find("feature 'f2' sample 1 (value position 5): id 999 is out of range"),
            std::string::npos)
      << err;
  VbeBatchData bad_weight = v;
  bad_weight.weights[7] = std::numeric_limits<float>::quiet_NaN();  // feature 3's bag 1
  err = refused(bad_weight);
  EXPECT_NE(err.find("feature 'f3' sample 1 (value position 7): weight nan is not finite"),
            std::string::npos)
      << err;
  int64_t steps = -1;
  ASSERT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
  EXPECT_EQ(steps, 0);
}

// Under the CLAMP and SKIP bounds policies an id outside its table is no error, so it does not
// keep an unread bag in the batch: the bag's ids (in range or not) train nothing, as in the
// expanded batch, which does not hold the bag.
TEST(VbeOptimizers, UnreadBagsTrainNothingUnderClampAndSkip) {
  for (int32_t bounds : {SHARDREC_BOUNDS_CLAMP, SHARDREC_BOUNDS_SKIP}) {
    SCOPED_TRACE("bounds " + std::to_string(bounds));
    Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
    // Decoupled weight decay moves a row a step touches even with a zero gradient.
    s.optimizer.type = 0;
    s.optimizer.lr = 0.05f;
    s.optimizer.weight_decay = 0.1f;
    s.optimizer.weight_decay_mode = 2;
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.bounds_policy = bounds;
    shardrec_embedding_t *vc = nullptr, *pc = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&vc, plan.get(), GroupComm(1, 0), &opt, &o), SHARDREC_OK);
    CollPtr vbe_coll(vc);
    ASSERT_EQ(shardrec_embedding_create(&pc, plan.get(), GroupComm(1, 0), &opt, &o), SHARDREC_OK);
    CollPtr plain_coll(pc);
    // Feature 1's bag 0 (unread) holds row 5 and an id outside t1; the sample reads bag 1.
    VbeBatchData v;
    v.batch_size = 1;
    v.sizes = {1, 2, 1, 1};
    v.lengths = {1, 2, 1, 1, 1};
    v.ids = {1, 5, 999, 7, 3, 4};
    v.has_inverse = true;
    v.inverse = {0, 1, 0, 0};
    const RefBatch expanded = Expand(v);
    const shardrec_kjt_vbe_view_t view = v.View();
    size_t len = 0;
    ASSERT_EQ(shardrec_embedding_vbe_output_len(vc, &view, &len), SHARDREC_OK);
    std::vector<float> vout(len), pout(len);
    ASSERT_EQ(shardrec_embedding_forward_vbe(vc, &view, vout.data(), len, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    KjtHolder kjt(expanded, 4, false);
    ASSERT_EQ(shardrec_embedding_forward(pc, kjt.view(), pout.data(), len, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_EQ(vout, pout);
    const std::vector<float> grad(len, 0.5f);
    ASSERT_EQ(shardrec_embedding_backward(vc, grad.data(), len, nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_backward(pc, grad.data(), len, nullptr), SHARDREC_OK);
    const auto got = Snapshot(vc, s), want = Snapshot(pc, s);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(got[k], want[k]) << "tensor " << k;
  }
}

}  // namespace
}  // namespace shardrec::testing
