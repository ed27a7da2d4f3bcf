// The planner end to end: forced types, determinism, memory errors, defaults.
#include "impl/planner/planner.h"

#include <gtest/gtest.h>

#include <thread>

#include "impl/sharding/plan_json.h"
#include "tests/impl/planner/planner_test_util.h"

namespace shardrec::planner {
namespace {

using sharding::ShardingType;
using testing::Input;
using testing::Only;

PlannerResult MustPlan(const PlannerInput& in) {
  PlannerResult r;
  const Status s = MakePlan(in, &r);
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

TEST(PlannerPlan, EveryTypeCanBeForcedAtEveryWorldSize) {
  for (int32_t world : {1, 2, 4}) {
    for (int32_t type = 0; type < sharding::kNumShardingTypes; ++type) {
      const int32_t local = world == 1 ? 1 : 2;
      PlannerInput in = Input(3, world, local);
      in.tables[2].rows = 3;  // fewer rows than ranks
      for (const auto& t : in.tables)
        in.constraints.push_back(Only(t.name, static_cast<ShardingType>(type), 4));
      PlannerResult r = MustPlan(in);
      ASSERT_EQ(r.plan.table_plans.size(), 3u);
      for (const auto& tp : r.plan.table_plans) {
        EXPECT_EQ(tp.type, static_cast<ShardingType>(type)) << "world " << world;
      }
      EXPECT_TRUE(sharding::ValidatePlan(r.plan).ok());
      const auto& shards = r.plan.table_plans[0].shards;
      switch (static_cast<ShardingType>(type)) {
        case ShardingType::kDataParallel:
        case ShardingType::kRowWise:
          EXPECT_EQ(shards.size(), static_cast<size_t>(world));
          break;
        case ShardingType::kTableWise:
          EXPECT_EQ(shards.size(), 1u);
          break;
        case ShardingType::kColumnWise:
        case ShardingType::kTableColumnWise:
          EXPECT_EQ(shards.size(), 4u);
          break;
        case ShardingType::kTableRowWise:
          EXPECT_EQ(shards.size(), static_cast<size_t>(local));
          break;
        case ShardingType::kGrid:
          EXPECT_EQ(shards.size(), 4u * local);
          break;
      }
    }
  }
}

TEST(PlannerPlan, PinnedRanksMakeManualPlans) {
  PlannerInput in = Input(3, 4, 2);
  in.constraints = {Only("t0", ShardingType::kTableWise, 0, {3}),
                    Only("t1", ShardingType::kColumnWise, 0, {2, 0}),
                    Only("t2", ShardingType::kTableRowWise, 0, {2, 3})};
  const PlannerResult r = MustPlan(in);
  EXPECT_EQ(r.plan.table_plans[0].shards[0].rank, 3);
  const auto& cw = r.plan.table_plans[1].shards;
  ASSERT_EQ(cw.size(), 2u);
  EXPECT_EQ(cw[0].rank, 0);  // pinned ranks are used in sorted order
  EXPECT_EQ(cw[1].rank, 2);
  EXPECT_EQ(cw[1].col_offset, 8);
  EXPECT_EQ(r.plan.table_plans[2].shards[0].rank, 2);
  EXPECT_EQ(r.plan.table_plans[2].shards[1].rank, 3);
}

TEST(PlannerPlan, DefaultsNeverChooseGrid) {
  const PlannerResult r = MustPlan(Input(6, 4, 2));
  for (const auto& tp : r.plan.table_plans) EXPECT_NE(tp.type, ShardingType::kGrid);
  EXPECT_GT(r.proposals, 0);
  EXPECT_GT(r.feasible, 0);
}

TEST(PlannerPlan, SplitsATableThatFitsNoSingleRank) {
  PlannerInput in = Input(1, 4, 4);
  in.tables[0].rows = 100000;  // 6.4 MB of weights
  in.topology.memory_bytes.assign(4, 3'000'000);
  const PlannerResult r = MustPlan(in);
  const ShardingType t = r.plan.table_plans[0].type;
  EXPECT_TRUE(t == ShardingType::kRowWise || t == ShardingType::kTableRowWise ||
              t == ShardingType::kColumnWise || t == ShardingType::kTableColumnWise)
      << sharding::ShardingTypeName(t);
}

TEST(PlannerPlan, SameInputGivesTheSameBytesOnEveryThread) {
  const PlannerInput in = Input(5, 4, 2);
  const PlannerResult ref = MustPlan(in);
  const std::string text = sharding::PlanToJson(ref.plan);
  std::vector<std::string> texts(4);
  std::vector<std::string> stats(4);
  std::vector<uint64_t> hashes(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      PlannerResult r;
      if (MakePlan(in, &r).ok()) {
        texts[i] = sharding::PlanToJson(r.plan);
        stats[i] = r.stats;
        hashes[i] = r.plan.Hash();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(texts[i], text);
    EXPECT_EQ(stats[i], ref.stats);
    EXPECT_EQ(hashes[i], ref.plan.Hash());
  }
}

TEST(PlannerPlan, DoesNotFitNamesTableSizeAndLargestFreeCapacity) {
  PlannerInput in = Input(2, 2, 2);
  in.tables[1].rows = 1'000'000;  // 64 MB
  in.topology.memory_bytes = {20'000'000, 10'000'000};
  PlannerResult r;
  const Status s = MakePlan(in, &r);
  ASSERT_EQ(s.code(), Code::kOutOfMemory);
  const std::string& m = s.message();
  EXPECT_NE(m.find("planner: table 't1' (1000000 x 16, float32) does not fit"), std::string::npos)
      << m;
  EXPECT_NE(m.find("needs "), std::string::npos) << m;
  EXPECT_NE(m.find("the largest free capacity is "), std::string::npos) << m;
  EXPECT_NE(m.find("Remedies"), std::string::npos) << m;
}

TEST(PlannerPlan, CheckPlanFitsNamesTheRank) {
  const PlannerInput in = Input(2, 2, 2);
  const PlannerResult r = MustPlan(in);
  Topology small = in.topology;
  EXPECT_TRUE(CheckPlanFits(r.plan, small, FeaturePoolingFactors(r.plan)).ok());
  small.memory_bytes = {1000, 1000};
  const Status s = CheckPlanFits(r.plan, small, FeaturePoolingFactors(r.plan));
  EXPECT_EQ(s.code(), Code::kOutOfMemory);
  EXPECT_NE(s.message().find("planner: rank 0 needs"), std::string::npos) << s.message();
}

TEST(PlannerPlan, StatsListRanksAndTables) {
  PlannerInput in = Input(3, 4, 2);
  in.constraints = {Only("t2", ShardingType::kRowWise)};
  const PlannerResult r = MustPlan(in);
  EXPECT_NE(r.stats.find("--- shardrec planner statistics ---"), std::string::npos);
  EXPECT_NE(r.stats.find("Capacity (MiB)"), std::string::npos);
  EXPECT_NE(r.stats.find("RW:1"), std::string::npos) << r.stats;
  for (const char* name : {"t0", "t1", "t2"}) EXPECT_NE(r.stats.find(name), std::string::npos);
  // One line per rank and per table below the headers.
  size_t lines = 0;
  for (char c : r.stats) lines += c == '\n';
  EXPECT_GE(lines, 4u + 3u + 4u);
}

TEST(PlannerPlan, InvalidInputsAreRejected) {
  PlannerInput in = Input(2, 2, 2);
  in.tables[1].name = "t0";
  PlannerResult r;
  Status s = MakePlan(in, &r);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("duplicate table name 't0'"), std::string::npos) << s.message();
  in = Input(2, 2, 2);
  in.topology.batch_size = 0;
  s = MakePlan(in, &r);
  EXPECT_NE(s.message().find("topology: batch_size 0 must be >= 1"), std::string::npos);
}

}  // namespace
}  // namespace shardrec::planner
