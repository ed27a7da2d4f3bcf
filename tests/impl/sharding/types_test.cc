// Sharding type names and the plan hash.
#include "impl/sharding/types.h"

#include <gtest/gtest.h>

#include "tests/impl/sharding/test_plans.h"

namespace shardrec::sharding {
namespace {

TEST(ShardingTypes, NamesRoundTrip) {
  for (int32_t i = 0; i < kNumShardingTypes; ++i) {
    const auto t = static_cast<ShardingType>(i);
    ShardingType back;
    ASSERT_TRUE(ShardingTypeFromName(ShardingTypeName(t), &back)) << i;
    EXPECT_EQ(back, t);
  }
  EXPECT_STREQ(ShardingTypeName(ShardingType::kTableRowWise), "table_row_wise");
  EXPECT_STREQ(ShardingTypeShortName(ShardingType::kGrid), "GRID");
  ShardingType unused;
  EXPECT_FALSE(ShardingTypeFromName("diagonal", &unused));
}

TEST(ShardingTypes, HashIsStableAndSensitiveToEveryField) {
  const Plan base = testing::TwoTablePlan(4, 2);
  const uint64_t h = base.Hash();
  EXPECT_EQ(h, testing::TwoTablePlan(4, 2).Hash());
  std::vector<Plan> variants(8, base);
  variants[0].world_size = 5;
  variants[1].local_world_size = 1;
  variants[2].features[1].pooling_factor = 2.0f;
  variants[3].tables[0].name = "A";
  variants[4].tables[1].init.high = 0.5f;
  variants[5].table_plans[0].shards[1].rank = 3;
  variants[6].tables[0].features = {1, 0};
  variants[7].table_plans[1].type = ShardingType::kTableRowWise;
  for (size_t i = 0; i < variants.size(); ++i) EXPECT_NE(variants[i].Hash(), h) << i;
}

TEST(ShardingTypes, HashSeparatesConcatenatedStrings) {
  Plan a = testing::TwoTablePlan(2, 2);
  Plan b = a;
  a.features[0].name = "ab";
  a.features[1].name = "c";
  b.features[0].name = "a";
  b.features[1].name = "bc";
  EXPECT_NE(a.Hash(), b.Hash());
}

}  // namespace
}  // namespace shardrec::sharding
