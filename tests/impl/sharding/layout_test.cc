// Shard layout rules per sharding type.
#include "impl/sharding/layout.h"

#include <gtest/gtest.h>

#include "tests/impl/sharding/test_plans.h"

namespace shardrec::sharding {
namespace {

using testing::Table;

std::vector<int64_t> Rows(const TablePlan& p) {
  std::vector<int64_t> r;
  for (const auto& s : p.shards) r.push_back(s.rows);
  return r;
}

TEST(ShardingLayout, RowBlocksUseCeilAndKeepEmptyShards) {
  EXPECT_EQ(RowBlockSizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(RowBlockSizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(RowBlockSizes(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(RowBlockSizes(1, 3), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(RowBlockSizes(7, 1), (std::vector<int64_t>{7}));
  EXPECT_EQ(RowBlockSize(5, 4), 2);
  EXPECT_EQ(RowBlockSize(1, 8), 1);
}

TEST(ShardingLayout, RowWiseOffsetsArePrefixSumsOnRanksInOrder) {
  const TablePlan p = MakeRowWise(Table("t", 5, 3, {0}), 4);
  ASSERT_EQ(p.shards.size(), 4u);
  EXPECT_EQ(Rows(p), (std::vector<int64_t>{2, 2, 1, 0}));
  const int64_t offsets[] = {0, 2, 4, 5};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p.shards[r].rank, r);
    EXPECT_EQ(p.shards[r].row_offset, offsets[r]);
    EXPECT_EQ(p.shards[r].cols, 3);
    EXPECT_EQ(p.shards[r].col_offset, 0);
  }
}

TEST(ShardingLayout, ColumnBlockDimFollowsMinPartitionRule) {
  EXPECT_EQ(ColumnBlockDim(10, 0), 10);    // nothing in [128, 10)
  EXPECT_EQ(ColumnBlockDim(512, 0), 128);  // default lower bound 128
  EXPECT_EQ(ColumnBlockDim(16, 4), 4);
  EXPECT_EQ(ColumnBlockDim(16, 5), 8);   // 5, 6, 7 do not qualify
  EXPECT_EQ(ColumnBlockDim(24, 5), 8);   // 6 divides 24 but is not a multiple of 4
  EXPECT_EQ(ColumnBlockDim(18, 4), 18);  // no multiple of 4 divides 18
  EXPECT_EQ(ColumnBlockDim(384, 100), 128);
}

TEST(ShardingLayout, TableRowWiseStaysInsideOneNode) {
  const TablePlan p = MakeTableRowWise(Table("t", 10, 4, {0}), 1, 4);
  ASSERT_EQ(p.shards.size(), 4u);
  EXPECT_EQ(Rows(p), (std::vector<int64_t>{3, 3, 3, 1}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p.shards[i].rank, 4 + i);
}

TEST(ShardingLayout, ColumnSplitIsFullHeightInColumnOrder) {
  const auto widths = EqualColumnWidths(16, 4);
  ASSERT_EQ(widths.size(), 4u);
  const TablePlan p =
      MakeColumnSplit(Table("t", 7, 16, {0}), ShardingType::kColumnWise, widths, {3, 1, 3, 0});
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(p.shards[k].col_offset, 4 * k);
    EXPECT_EQ(p.shards[k].cols, 4);
    EXPECT_EQ(p.shards[k].rows, 7);
    EXPECT_EQ(p.shards[k].row_offset, 0);
  }
  EXPECT_EQ(p.shards[0].rank, 3);
  EXPECT_EQ(p.shards[3].rank, 0);
}

TEST(ShardingLayout, GridIsColumnBlockMajorWithRowBlocksPerNode) {
  const TablePlan p = MakeGrid(Table("t", 5, 8, {0}), {4, 4}, {1, 0}, 2);
  ASSERT_EQ(p.shards.size(), 4u);
  // Column block 0 on node 1 (ranks 2, 3), block 1 on node 0 (ranks 0, 1); rows 3 + 2.
  const int32_t ranks[] = {2, 3, 0, 1};
  const int64_t rows[] = {3, 2, 3, 2};
  const int32_t cols[] = {0, 0, 4, 4};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p.shards[i].rank, ranks[i]);
    EXPECT_EQ(p.shards[i].rows, rows[i]);
    EXPECT_EQ(p.shards[i].col_offset, cols[i]);
    EXPECT_EQ(p.shards[i].cols, 4);
  }
}

TEST(ShardingLayout, DataParallelAndTableWiseCoverTheWholeTable) {
  const TableConfig t = Table("t", 9, 6, {0});
  const TablePlan dp = MakeDataParallel(t, 3);
  ASSERT_EQ(dp.shards.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(dp.shards[r].rank, r);
    EXPECT_EQ(dp.shards[r].rows, 9);
    EXPECT_EQ(dp.shards[r].cols, 6);
  }
  const TablePlan tw = MakeTableWise(t, 2);
  ASSERT_EQ(tw.shards.size(), 1u);
  EXPECT_EQ(tw.shards[0].rank, 2);
  EXPECT_EQ(tw.shards[0].rows, 9);
}

}  // namespace
}  // namespace shardrec::sharding
