// VBE training (docs/variable-batch.md) with the stateful optimizers whose update moves a row
// even when its gradient is zero (Adam's moments decay, weight decay shrinks the row): a bag no
// output sample reads (inverse indices skip it) must leave its rows untouched, as the expanded
// batch, which does not hold it, does.
#include <gtest/gtest.h>

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
    // Every feature has two bags of one id; the one sample reads bag 0, bag 1 is unread.
    VbeBatchData v;
    v.batch_size = 1;
    v.sizes.assign(4, 2);
    v.lengths.assign(8, 1);
    v.ids = {1, 2, 3, 4, 1, 2, 3, 4};
    v.has_inverse = true;
    v.inverse.assign(4, 0);
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

}  // namespace
}  // namespace shardrec::testing
