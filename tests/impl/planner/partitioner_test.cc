// Proposers and the greedy partitioner.
#include "impl/planner/partitioner.h"

#include <gtest/gtest.h>

#include <set>

#include "impl/planner/proposers.h"
#include "tests/impl/planner/planner_test_util.h"

namespace shardrec::planner {
namespace {

using sharding::ShardingType;
using testing::Input;
using testing::Only;

std::vector<std::vector<ShardingOption>> Options(const PlannerInput& in) {
  std::vector<TableRequest> reqs;
  EXPECT_TRUE(ResolveRequests(in.tables, in.features, in.constraints, in.topology, &reqs).ok());
  std::vector<std::vector<ShardingOption>> opts;
  EXPECT_TRUE(Enumerate(in.tables, reqs, in.topology, &opts).ok());
  SortOptions(&opts);
  return opts;
}

TEST(PlannerPartitioner, ProposalsAreUniqueAndIncludeTheGridSearch) {
  const auto opts = Options(Input(2, 4, 2));  // 6 options each
  const auto proposals = Propose(opts);
  std::set<std::vector<int32_t>> unique(proposals.begin(), proposals.end());
  EXPECT_EQ(unique.size(), proposals.size());
  EXPECT_EQ(proposals.size(), 36u);  // grid search covers everything; the rest are duplicates
  EXPECT_EQ(proposals.front(), (std::vector<int32_t>{0, 0}));
}

TEST(PlannerPartitioner, LargeProblemsSkipGridSearch) {
  const auto opts = Options(Input(8, 4, 2));  // 6^8 > 10000
  const auto proposals = Propose(opts);
  EXPECT_LT(proposals.size(), 8u * 6u * 2u + 7u);
  EXPECT_GE(proposals.size(), 8u * 5u + 1u);  // one greedy pass alone
}

TEST(PlannerPartitioner, TableWiseShardsSpreadByCost) {
  PlannerInput in = Input(4, 4, 4);
  for (int i = 0; i < 4; ++i)
    in.constraints.push_back(Only(StrCat("t", i), ShardingType::kTableWise));
  const auto opts = Options(in);
  Placement p;
  FitFailure f;
  ASSERT_TRUE(Partition(opts, {0, 0, 0, 0}, in.topology, &p, &f));
  std::set<int32_t> ranks;
  for (const auto& tp : p.table_plans) ranks.insert(tp.shards[0].rank);
  EXPECT_EQ(ranks.size(), 4u);  // each table on its own rank
  double max_perf = 0;
  for (const auto& rp : p.rank_perf) max_perf = std::max(max_perf, rp.total());
  EXPECT_DOUBLE_EQ(p.rating, max_perf);
}

// The benchmarks' 8 tables (4 of dim 128, 4 of dim 64, sizes unrelated to width) at world 2, all
// table-wise: placed largest storage first they end three wide tables on one rank and one wide
// plus four narrow on the other; placed largest cost first they balance two of each per rank,
// and that placement is kept. (A small batch, so that every id is on its own row and a table's
// cost depends on its width alone.)
TEST(PlannerPartitioner, KeepsTheBetterOfStorageAndCostOrder) {
  PlannerInput in;
  const int64_t rows[8] = {1000000, 500000, 200000, 100000, 1000000, 300000, 100000, 700000};
  const int32_t dims[8] = {128, 64, 128, 64, 64, 128, 128, 64};
  for (int i = 0; i < 8; ++i) {
    in.features.push_back({StrCat("f", i), 1.0f});
    in.tables.push_back(testing::Table(StrCat("t", i), rows[i], dims[i], {i}));
    in.constraints.push_back(Only(StrCat("t", i), ShardingType::kTableWise));
  }
  in.topology = Topology::Default(2, 2, ComputeDevice::kHost);
  in.topology.batch_size = 16;
  const auto opts = Options(in);
  Placement p;
  FitFailure f;
  ASSERT_TRUE(Partition(opts, std::vector<int32_t>(8, 0), in.topology, &p, &f));
  int wide[2] = {0, 0}, narrow[2] = {0, 0};
  for (int i = 0; i < 8; ++i) {
    const int32_t r = p.table_plans[i].shards[0].rank;
    (dims[i] == 128 ? wide : narrow)[r]++;
  }
  EXPECT_EQ(wide[0], 2);
  EXPECT_EQ(wide[1], 2);
  EXPECT_EQ(narrow[0], 2);
  EXPECT_EQ(narrow[1], 2);
  EXPECT_NEAR(p.rank_perf[0].total(), p.rank_perf[1].total(), 1e-4 * p.rating);
  EXPECT_DOUBLE_EQ(p.rating, std::max(p.rank_perf[0].total(), p.rank_perf[1].total()));
}

TEST(PlannerPartitioner, RespectsMemoryAndReportsTheLargestFreeRank) {
  PlannerInput in = Input(2, 2, 2);
  for (int i = 0; i < 2; ++i)
    in.constraints.push_back(Only(StrCat("t", i), ShardingType::kTableWise));
  // TW storage (weights + ids + outputs): t0 64000 + 8192 + 65536 = 137728,
  // t1 128000 + 16384 + 65536 = 209920.
  in.topology.memory_bytes = {300000, 300000};
  auto opts = Options(in);
  Placement p;
  FitFailure f;
  ASSERT_TRUE(Partition(opts, {0, 0}, in.topology, &p, &f));
  EXPECT_NE(p.table_plans[0].shards[0].rank, p.table_plans[1].shards[0].rank);
  for (int r = 0; r < 2; ++r) EXPECT_LE(p.rank_storage[r].total(), 300000);

  in.topology.memory_bytes = {250000, 130000};
  opts = Options(in);
  ASSERT_FALSE(Partition(opts, {0, 0}, in.topology, &p, &f));
  EXPECT_EQ(f.table, 0);  // t1 (larger) is placed first on rank 0; t0 then fits nowhere
  EXPECT_EQ(f.largest_free_rank, 1);
  EXPECT_EQ(f.largest_free, 130000);
  EXPECT_EQ(f.needed, 137728);
}

}  // namespace
}  // namespace shardrec::planner
