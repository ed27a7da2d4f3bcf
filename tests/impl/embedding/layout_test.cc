// The static routing derived from a plan: pairs in output order, row blocks and their column
// shards, units per rank, local storage and the row-statistics messages.
#include "impl/embedding/layout.h"

#include <gtest/gtest.h>

#include "impl/sharding/layout.h"

namespace shardrec::embedding {
namespace {

// One optimizer type for every table of `plan`.
template <typename PlanPtr>
std::vector<optim::OptimizerType> Types(const PlanPtr& plan, optim::OptimizerType type) {
  return std::vector<optim::OptimizerType>(plan->tables.size(), type);
}

using sharding::PoolingType;
using sharding::ShardingType;

sharding::TableConfig Table(const std::string& name, int64_t rows, int32_t dim,
                            std::vector<int32_t> features,
                            PoolingType pooling = PoolingType::kSum) {
  sharding::TableConfig t;
  t.name = name;
  t.rows = rows;
  t.dim = dim;
  t.features = std::move(features);
  t.pooling = pooling;
  return t;
}

std::shared_ptr<sharding::Plan> TwoTablePlan() {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 4;
  plan->local_world_size = 2;
  plan->features = {{"a", 1.0f}, {"b", 1.0f}, {"c", 1.0f}};
  plan->tables = {Table("rw", 5, 8, {0, 2}), Table("cw", 10, 12, {1})};
  plan->table_plans = {
      sharding::MakeRowWise(plan->tables[0], 4),
      sharding::MakeColumnSplit(plan->tables[1], ShardingType::kColumnWise, {4, 4, 4}, {3, 1, 3})};
  return plan;
}

TEST(EmbeddingLayout, PairsFollowFeatureThenTableOrder) {
  Layout l;
  ASSERT_TRUE(
      BuildLayout(TwoTablePlan(), 0, Types(TwoTablePlan(), optim::OptimizerType::kSgd), &l).ok());
  ASSERT_EQ(l.pairs.size(), 3u);
  EXPECT_EQ(l.pairs[0].feature, 0);
  EXPECT_EQ(l.pairs[1].table, 1);
  EXPECT_EQ(l.pairs[1].out_offset, 8);
  EXPECT_EQ(l.pairs[2].out_offset, 20);
  EXPECT_EQ(l.output_dim, 28);
}

TEST(EmbeddingLayout, RowWiseOnMoreRanksThanRowsSkipsEmptyShards) {
  Layout l;
  ASSERT_TRUE(
      BuildLayout(TwoTablePlan(), 3, Types(TwoTablePlan(), optim::OptimizerType::kSgd), &l).ok());
  const TableLayout& rw = l.tables[0];
  ASSERT_EQ(rw.blocks.size(), 3u);  // 2, 2, 1, 0 rows
  EXPECT_EQ(FindRowBlock(rw, 4), 2);
  EXPECT_EQ(FindRowBlock(rw, 1), 0);
  // Rank 3 holds no row of "rw" but two column shards of "cw".
  ASSERT_EQ(l.local.size(), 2u);
  EXPECT_EQ(l.local[0].table, 1);
  EXPECT_EQ(l.local[1].col_offset, 8);
  EXPECT_TRUE(l.units_to_rank[3].size() == 2u);
}

TEST(EmbeddingLayout, RowStatisticsTravelBetweenColumnShardsOnly) {
  Layout sgd, rowwise;
  ASSERT_TRUE(
      BuildLayout(TwoTablePlan(), 1, Types(TwoTablePlan(), optim::OptimizerType::kSgd), &sgd).ok());
  ASSERT_TRUE(BuildLayout(TwoTablePlan(), 1,
                          Types(TwoTablePlan(), optim::OptimizerType::kRowWiseAdagrad), &rowwise)
                  .ok());
  EXPECT_TRUE(sgd.stat_messages.empty());
  EXPECT_EQ(rowwise.stat_messages.size(), 6u);  // 3 column shards, each to the other two
  EXPECT_EQ(rowwise.states_size, 12u);  // one value per local row: 10 (cw) + 2 (rw rows 2-3)
}

// Per-table optimizers: each table has its own state layout, and only a table whose optimizer
// sums statistics over the row exchanges them between its column shards.
TEST(EmbeddingLayout, EachTableHasItsOwnOptimizerState) {
  auto plan = TwoTablePlan();  // table 0 row-wise, table 1 column-wise
  std::vector<optim::OptimizerType> types = {optim::OptimizerType::kAdam,
                                             optim::OptimizerType::kSgd};
  Layout l;
  ASSERT_TRUE(BuildLayout(plan, 1, types, &l).ok());
  EXPECT_EQ(l.tables[0].state_specs.size(), 2u);
  EXPECT_EQ(l.tables[1].state_specs.size(), 0u);
  EXPECT_TRUE(l.stat_messages.empty());
  for (const LocalShard& ls : l.local)
    EXPECT_EQ(ls.state_offsets.size(), l.tables[ls.table].state_specs.size());
  types = {optim::OptimizerType::kSgd, optim::OptimizerType::kLamb};
  ASSERT_TRUE(BuildLayout(plan, 1, types, &l).ok());
  EXPECT_EQ(l.tables[1].num_row_stats, 2);
  EXPECT_EQ(l.stat_messages.size(), 6u);
  for (const StatMessage& m : l.stat_messages) EXPECT_EQ(m.table, 1);
  types.pop_back();
  EXPECT_EQ(BuildLayout(plan, 1, types, &l).code(), Code::kInternal);
}

TEST(EmbeddingLayout, RejectsMixedPooledAndSequenceTables) {
  auto plan = TwoTablePlan();
  plan->tables[1].pooling = PoolingType::kNone;
  Layout l;
  Status s = BuildLayout(plan, 0, Types(plan, optim::OptimizerType::kSgd), &l);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("mixes"), std::string::npos);
}

}  // namespace
}  // namespace shardrec::embedding
