// Enumerator: which options each table gets under topology and constraints.
#include "impl/planner/enumerator.h"

#include <gtest/gtest.h>

#include "impl/core/check.h"
#include "tests/impl/planner/planner_test_util.h"

namespace shardrec::planner {
namespace {

using sharding::ShardingType;
using testing::Input;
using testing::Only;

std::vector<ShardingType> Types(const std::vector<ShardingOption>& opts) {
  std::vector<ShardingType> t;
  for (const auto& o : opts) t.push_back(o.type);
  return t;
}

Status EnumerateInput(const PlannerInput& in, std::vector<std::vector<ShardingOption>>* opts) {
  std::vector<TableRequest> reqs;
  SR_RETURN_IF_ERROR(ResolveRequests(in.tables, in.features, in.constraints, in.topology, &reqs));
  return Enumerate(in.tables, reqs, in.topology, opts);
}

TEST(PlannerEnumerator, DefaultOffersEveryTypeButGrid) {
  std::vector<std::vector<ShardingOption>> opts;
  ASSERT_TRUE(EnumerateInput(Input(1, 4, 2), &opts).ok());
  EXPECT_EQ(Types(opts[0]), (std::vector<ShardingType>{
                                ShardingType::kDataParallel, ShardingType::kTableWise,
                                ShardingType::kRowWise, ShardingType::kColumnWise,
                                ShardingType::kTableRowWise, ShardingType::kTableColumnWise}));
}

// A dynamic shard numbers its slots in 32 bits: a type that would give one shard more slots is
// not offered (it used to be, and a plan choosing it was then refused as a whole), and a table no
// type can shard is EUNSUPPORTED, naming the limit.
TEST(PlannerEnumerator, DynamicShardsOverTheSlotLimitAreNotOffered) {
  PlannerInput in = Input(1, 4, 2);
  in.tables[0].dynamic.enabled = true;
  in.tables[0].rows = 3000000000;  // 750M slots per row block over 4 ranks
  std::vector<std::vector<ShardingOption>> opts;
  ASSERT_TRUE(EnumerateInput(in, &opts).ok());
  EXPECT_EQ(Types(opts[0]),
            (std::vector<ShardingType>{ShardingType::kRowWise, ShardingType::kTableRowWise}));
  in.constraints = {Only("t0", ShardingType::kTableWise)};
  const Status s = EnumerateInput(in, &opts);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("table_wise gives a dynamic shard of 3000000000 slots, at most "
                             "2147483646 per shard"),
            std::string::npos)
      << s.message();
}

TEST(PlannerEnumerator, NodeLocalTypesNeedRanksPerNodeDividingWorld) {
  std::vector<std::vector<ShardingOption>> opts;
  ASSERT_TRUE(EnumerateInput(Input(1, 3, 2), &opts).ok());
  EXPECT_EQ(Types(opts[0]),
            (std::vector<ShardingType>{ShardingType::kDataParallel, ShardingType::kTableWise,
                                       ShardingType::kRowWise, ShardingType::kColumnWise}));
  PlannerInput in = Input(1, 3, 2);
  in.constraints = {Only("t0", ShardingType::kTableRowWise)};
  const Status s = EnumerateInput(in, &opts);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("table 't0': no allowed sharding type is possible: table_row_wise "
                             "needs ranks_per_node (2) to divide world_size (3)"),
            std::string::npos)
      << s.message();
}

TEST(PlannerEnumerator, PinnedRanksDropTypesThatNeedOtherRanks) {
  PlannerInput in = Input(1, 4, 2);
  TableConstraints c;
  c.table = "t0";
  c.ranks = {2, 3};
  in.constraints = {c};
  std::vector<std::vector<ShardingOption>> opts;
  ASSERT_TRUE(EnumerateInput(in, &opts).ok());
  EXPECT_EQ(Types(opts[0]), (std::vector<ShardingType>{
                                ShardingType::kTableWise, ShardingType::kColumnWise,
                                ShardingType::kTableRowWise, ShardingType::kTableColumnWise}));
  // CW/TWCW with pinned ranks and no min_partition split the dim evenly over them.
  const ShardingOption& cw = opts[0][1];
  ASSERT_EQ(cw.shards.size(), 2u);
  EXPECT_TRUE(cw.fixed_ranks);
  EXPECT_EQ(cw.shards[0].cols, 8);
  EXPECT_EQ(cw.shards[0].rank, 2);
  EXPECT_EQ(cw.shards[1].rank, 3);
}

// A dim the pinned ranks do not divide is still one shard per pinned rank, the first dim % n
// holding one column more (it was one 16-column shard before: the pinning was dropped).
TEST(PlannerEnumerator, PinnedColumnSplitsAreAsEvenAsTheDimAllows) {
  for (const ShardingType type : {ShardingType::kColumnWise, ShardingType::kTableColumnWise}) {
    PlannerInput in = Input(1, 8, 8);
    in.tables[0].dim = 6;
    in.constraints = {Only("t0", type, 0, {4, 5, 6, 7})};
    std::vector<std::vector<ShardingOption>> opts;
    ASSERT_TRUE(EnumerateInput(in, &opts).ok());
    ASSERT_EQ(opts[0].size(), 1u);
    const ShardingOption& o = opts[0][0];
    EXPECT_TRUE(o.fixed_ranks);
    ASSERT_EQ(o.shards.size(), 4u);
    const int32_t cols[] = {2, 2, 1, 1}, offsets[] = {0, 2, 4, 5};
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(o.shards[k].cols, cols[k]) << k;
      EXPECT_EQ(o.shards[k].col_offset, offsets[k]) << k;
      EXPECT_EQ(o.shards[k].rank, static_cast<int32_t>(4 + k)) << k;
    }
    // Fewer columns than pinned ranks cannot give each a shard.
    in.tables[0].dim = 3;
    const Status s = EnumerateInput(in, &opts);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("dim 3 cannot be split over 4 pinned ranks"), std::string::npos)
        << s.message();
  }
}

TEST(PlannerEnumerator, ColumnBlocksFollowMinPartition) {
  PlannerInput in = Input(1, 2, 2);
  in.constraints = {Only("t0", ShardingType::kColumnWise, 4)};
  std::vector<std::vector<ShardingOption>> opts;
  ASSERT_TRUE(EnumerateInput(in, &opts).ok());
  ASSERT_EQ(opts[0].size(), 1u);
  EXPECT_EQ(opts[0][0].shards.size(), 4u);  // 16 / 4, independent of the world size
  EXPECT_FALSE(opts[0][0].fixed_ranks);
  EXPECT_EQ(opts[0][0].estimates.size(), 4u);
}

TEST(PlannerEnumerator, ConstraintErrorsNameTheTable) {
  struct Case {
    TableConstraints c;
    std::string fragment;
  };
  TableConstraints unknown = Only("nope", ShardingType::kTableWise);
  TableConstraints bits = Only("t0", ShardingType::kTableWise);
  bits.sharding_types = 1u << 9;
  TableConstraints rank = Only("t0", ShardingType::kTableWise, 0, {4});
  TableConstraints dup_rank = Only("t0", ShardingType::kTableWise, 0, {1, 1});
  TableConstraints pf = Only("t0", ShardingType::kTableWise);
  pf.pooling_factors = {1.0f, 2.0f};
  for (const Case& k : {Case{unknown, "constraints name unknown table 'nope'"},
                        Case{bits, "table 't0': sharding_types mask 0x200"},
                        Case{rank, "table 't0': pinned rank 4 does not exist (world_size 4)"},
                        Case{dup_rank, "table 't0': pinned rank 1 listed twice"},
                        Case{pf, "table 't0': 2 pooling factors given for 1 features"}}) {
    PlannerInput in = Input(1, 4, 2);
    in.constraints = {k.c};
    std::vector<std::vector<ShardingOption>> opts;
    const Status s = EnumerateInput(in, &opts);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find(k.fragment), std::string::npos) << s.message();
  }
  PlannerInput in = Input(1, 4, 2);
  in.constraints = {Only("t0", ShardingType::kTableWise), Only("t0", ShardingType::kRowWise)};
  std::vector<std::vector<ShardingOption>> opts;
  EXPECT_NE(
      EnumerateInput(in, &opts).message().find("table 't0': has more than one constraints entry"),
      std::string::npos);
}

}  // namespace
}  // namespace shardrec::planner
