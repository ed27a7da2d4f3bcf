// VBE training (docs/variable-batch.md) through the public C API: every sharding type, SUM / MEAN
// / NONE, weighted ids, at worlds 1, 2 and 4, with and without inverse indices, against a
// collection of the same plan fed the expanded plain batches (outputs bit for bit; weights bit
// for bit where no bag is read twice, else within the documented bound) and the reference model.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "tests/capi/vbe/vbe_test_util.h"

namespace shardrec::testing {
namespace {

using Param = std::tuple<int32_t /*world*/, int32_t /*sharding*/, int32_t /*pooling*/, VbeMode>;

class VbeEquivalence : public ::testing::TestWithParam<Param> {};

TEST_P(VbeEquivalence, MatchesTheExpandedBatch) {
  const auto [world, sharding, pooling, mode] = GetParam();
  Scenario s = StandardScenario(world, sharding, pooling);
  s.optimizer.type = 2;  // row-wise Adagrad: a state beside the weights
  s.optimizer.lr = 0.05f;
  s.max_bag = 3;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  VbeRunOptions o;
  o.mode = mode;
  RunVbeEquivalence(s, plan.get(), o);
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  static const char* kSharding[] = {"DP", "TW", "RW", "CW", "TWRW", "TWCW", "GRID"};
  static const char* kPooling[] = {"Sum", "Mean", "None"};
  return "W" + std::to_string(std::get<0>(info.param)) + "_" + kSharding[std::get<1>(info.param)] +
         "_" + kPooling[std::get<2>(info.param)] + "_" + VbeModeName(std::get<3>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, VbeEquivalence,
    ::testing::Combine(::testing::Values(1, 2, 4),
                       ::testing::Values(SHARDREC_SHARDING_DATA_PARALLEL,
                                         SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE,
                                         SHARDREC_SHARDING_COLUMN_WISE,
                                         SHARDREC_SHARDING_TABLE_ROW_WISE,
                                         SHARDREC_SHARDING_GRID),
                       ::testing::Values(SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN,
                                         SHARDREC_POOLING_NONE),
                       ::testing::Values(VbeMode::kNoInverse, VbeMode::kInverse, VbeMode::kOnce)),
    Name);

// Weighted ids (SUM and MEAN) and SGD, at worlds 2 and 4, row-wise and table-wise.
TEST(VbeWeighted, MatchesTheExpandedBatch) {
  for (int32_t world : {2, 4})
    for (int32_t sharding : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_TABLE_WISE})
      for (int32_t pooling : {SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN})
        for (VbeMode mode : {VbeMode::kInverse, VbeMode::kNoInverse}) {
          SCOPED_TRACE("world " + std::to_string(world) + " sharding " + std::to_string(sharding) +
                       " pooling " + std::to_string(pooling) + " " + VbeModeName(mode));
          Scenario s = StandardScenario(world, sharding, pooling);
          s.weighted = true;
          s.data_seed = 17;
          PlanPtr plan = MakePlan(s);
          ASSERT_NE(plan, nullptr);
          VbeRunOptions o;
          o.mode = mode;
          RunVbeEquivalence(s, plan.get(), o);
        }
}

// The pipelined input distribution (input_dist_start_vbe, wait, forward_distributed), ranks
// mixing VBE and plain batches.
TEST(VbePipelined, MatchesTheExpandedBatch) {
  for (int32_t world : {1, 2, 4})
    for (int32_t pooling : {SHARDREC_POOLING_SUM, SHARDREC_POOLING_NONE})
      for (VbeMode mode : {VbeMode::kInverse, VbeMode::kNoInverse}) {
        SCOPED_TRACE("world " + std::to_string(world) + " pooling " + std::to_string(pooling) +
                     " " + VbeModeName(mode));
        Scenario s = StandardScenario(world, SHARDREC_SHARDING_ROW_WISE, pooling);
        PlanPtr plan = MakePlan(s);
        ASSERT_NE(plan, nullptr);
        VbeRunOptions o;
        o.mode = mode;
        o.pipelined = true;
        RunVbeEquivalence(s, plan.get(), o);
      }
}

}  // namespace
}  // namespace shardrec::testing
