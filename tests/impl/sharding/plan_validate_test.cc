// ValidatePlan: valid layouts of every type pass; each broken rule gets a message naming the
// table and the problem.
#include <gtest/gtest.h>

#include "impl/sharding/layout.h"
#include "impl/sharding/types.h"
#include "tests/impl/sharding/test_plans.h"

namespace shardrec::sharding {
namespace {

using testing::TwoTablePlan;

void ExpectInvalid(const Plan& p, const std::string& fragment) {
  const Status s = ValidatePlan(p);
  ASSERT_FALSE(s.ok()) << "expected an error containing: " << fragment;
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
}

TEST(ShardingPlanValidate, AcceptsEveryShardingType) {
  Plan p = TwoTablePlan(4, 2);
  const TableConfig& a = p.tables[0];
  const std::vector<TablePlan> layouts = {
      MakeDataParallel(a, 4),
      MakeTableWise(a, 3),
      MakeRowWise(a, 4),
      MakeColumnSplit(a, ShardingType::kColumnWise, {4, 4}, {3, 0}),
      MakeTableRowWise(a, 1, 2),
      MakeColumnSplit(a, ShardingType::kTableColumnWise, {2, 2, 4}, {2, 3, 2}),
      MakeGrid(a, {4, 4}, {1, 0}, 2),
  };
  for (const auto& layout : layouts) {
    p.table_plans[0] = layout;
    const Status s = ValidatePlan(p);
    EXPECT_TRUE(s.ok()) << ShardingTypeName(layout.type) << ": " << s.message();
  }
}

TEST(ShardingPlanValidate, FewerRowsThanRanksIsValid) {
  Plan p = TwoTablePlan(8, 4);
  p.tables[1].rows = 3;
  p.table_plans[1] = MakeRowWise(p.tables[1], 8);
  EXPECT_TRUE(ValidatePlan(p).ok());
  p.table_plans[1] = MakeTableRowWise(p.tables[1], 1, 4);
  EXPECT_TRUE(ValidatePlan(p).ok());
}

TEST(ShardingPlanValidate, RejectsOverlap) {
  Plan p = TwoTablePlan(2, 2);
  p.table_plans[0] = MakeColumnSplit(p.tables[0], ShardingType::kColumnWise, {4, 4}, {0, 1});
  p.table_plans[0].shards[1].col_offset = 3;
  p.table_plans[0].shards[1].cols = 5;
  ExpectInvalid(p, "table 'a': shard 0 (rows 0+10, cols 0+4, rank 0) and shard 1");
  ExpectInvalid(p, "overlap at row 0, column 3");
}

TEST(ShardingPlanValidate, RejectsGap) {
  Plan p = TwoTablePlan(2, 2);
  p.table_plans[0] = MakeColumnSplit(p.tables[0], ShardingType::kColumnWise, {4, 4}, {0, 1});
  p.table_plans[0].shards[1].cols = 3;
  ExpectInvalid(p, "table 'a': gap: row 0, column 7 is not covered");
  Plan q = TwoTablePlan(2, 2);
  q.table_plans[1].shards[1].rows = 1;  // "b" is 5 rows: 3 + 1
  ExpectInvalid(q, "table 'b': gap: row 4, column 0");
}

TEST(ShardingPlanValidate, RejectsRankOutsideTheWorld) {
  Plan p = TwoTablePlan(2, 2);
  p.table_plans[1] = MakeTableWise(p.tables[1], 2);
  ExpectInvalid(p, "table 'b': shard 0 (rows 0+5, cols 0+4, rank 2): rank 2 does not exist");
}

TEST(ShardingPlanValidate, RejectsBadFeatureIndices) {
  Plan p = TwoTablePlan(2, 2);
  p.tables[1].features = {7};
  ExpectInvalid(p, "table 'b': feature index 7 is out of range [0, 3)");
  p.tables[1].features = {2, 2};
  ExpectInvalid(p, "table 'b': lists feature 'f2' twice");
  // A feature may feed several tables (outputs feature@table); every feature needs a reader.
  p.tables[1].features = {1, 2};
  EXPECT_TRUE(ValidatePlan(p).ok()) << ValidatePlan(p).message();
  p.tables[0].features = {0};
  p.tables[1].features = {1};
  ExpectInvalid(p, "feature 'f2' is not read by any table");
}

TEST(ShardingPlanValidate, RejectsBadConfigs) {
  Plan p = TwoTablePlan(2, 2);
  p.tables[1].name = "a";
  ExpectInvalid(p, "duplicate table name 'a'");
  p = TwoTablePlan(2, 2);
  p.tables[0].rows = 0;
  ExpectInvalid(p, "table 'a': rows 0 must be >= 1");
  p = TwoTablePlan(2, 2);
  p.features[2].name = "f0";
  ExpectInvalid(p, "duplicate feature name 'f0'");
  p = TwoTablePlan(2, 2);
  p.tables[1].init.high = -1.0f;
  ExpectInvalid(p, "uniform init needs low < high");
  p = TwoTablePlan(2, 3);
  ExpectInvalid(p, "local_world_size (ranks per node) 3 must be in [1, world_size=2]");
}

TEST(ShardingPlanValidate, RejectsBalancedInsteadOfCeilRowBlocks) {
  Plan p = TwoTablePlan(4, 4);  // table a: 10 rows -> 3,3,3,1, not 3,3,2,2
  auto& s = p.table_plans[0].shards;
  s[2].rows = 2;
  s[3].row_offset = 8;
  s[3].rows = 2;
  ExpectInvalid(p, "breaks the ceil row-block rule: expected rows 6+3");
}

TEST(ShardingPlanValidate, RejectsTypeSpecificLayoutErrors) {
  Plan p = TwoTablePlan(4, 2);
  const TableConfig a = p.tables[0];
  p.table_plans[0] = MakeColumnSplit(a, ShardingType::kTableColumnWise, {4, 4}, {1, 2});
  ExpectInvalid(p, "table_column_wise shards must stay in one node");
  p.table_plans[0] = MakeDataParallel(a, 3);
  ExpectInvalid(p, "data_parallel needs one shard per rank (4), got 3");
  p.table_plans[0] = MakeTableRowWise(a, 0, 2);
  p.table_plans[0].shards[1].rank = 2;
  ExpectInvalid(p, "table_row_wise");
  p.table_plans[0] = MakeRowWise(a, 4);
  p.table_plans[0].shards.pop_back();
  p.table_plans[0].shards.back().rows = 4;  // 3,3,4 covers the table but is not row_wise
  ExpectInvalid(p, "row_wise needs one shard per rank (4), got 3");
  p.table_plans[0] = MakeTableWise(a, 0);
  p.table_plans[0].shards[0].cols = 0;
  ExpectInvalid(p, "shard dims must be positive");
  p.table_plans[0] = MakeGrid(a, {4, 4}, {0, 1}, 2);
  std::swap(p.table_plans[0].shards[0], p.table_plans[0].shards[2]);
  ExpectInvalid(p, "grid");
  Plan q = TwoTablePlan(3, 2);
  q.table_plans[0] = MakeTableRowWise(q.tables[0], 0, 2);
  ExpectInvalid(q, "table_row_wise needs ranks per node (2) to divide world_size (3)");
}

TEST(ShardingPlanValidate, RejectsShardOutsideTheTable) {
  Plan p = TwoTablePlan(2, 2);
  p.table_plans[1] = MakeTableWise(p.tables[1], 0);
  p.table_plans[1].shards[0].row_offset = 1;
  ExpectInvalid(p, "lies outside the table (5 x 4)");
}

}  // namespace
}  // namespace shardrec::sharding
