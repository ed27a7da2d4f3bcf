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

// Row blocks that must share a host fit one rank each, but no host has room on every rank: the
// message says so instead of setting a need below the largest free capacity against it.
TEST(PlannerPlan, RowBlocksThatNoHostHoldsTogetherAreNamedAsSuch) {
  PlannerInput in = Input(3, 4, 2);
  in.tables[0].rows = 400'000;  // 25.6 MB, pinned to rank 1
  in.tables[1].rows = 400'000;  // 25.6 MB, pinned to rank 3
  in.tables[2].rows = 800'000;  // two row blocks of 25.6 MB, on the two ranks of one host
  in.topology.memory_bytes.assign(4, 40'000'000);
  // One column-wise shard on a pinned rank is placed before the tables the planner places.
  in.constraints = {Only("t0", ShardingType::kColumnWise, 0, {1}),
                    Only("t1", ShardingType::kColumnWise, 0, {3}),
                    Only("t2", ShardingType::kTableRowWise)};
  PlannerResult r;
  const Status s = MakePlan(in, &r);
  ASSERT_EQ(s.code(), Code::kOutOfMemory) << s.message();
  const std::string& m = s.message();
  EXPECT_NE(m.find("planner: table 't2' (800000 x 16, float32) does not fit"), std::string::npos)
      << m;
  EXPECT_NE(m.find("must share one host"), std::string::npos) << m;
  EXPECT_NE(m.find("no host has that free on each of its ranks"), std::string::npos) << m;
  EXPECT_EQ(m.find("the largest free capacity is"), std::string::npos) << m;
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

// Table-row-wise across hosts: the planner prices the host-reduced and the flat exchange and
// keeps the cheaper; slow host links favour the reduction (fewer bytes cross), a high per-round
// latency over fast links favours the flat exchange (the reduction costs two more rounds).
TEST(PlannerPlan, ChoosesHostReduceFromItsEstimateOfBoth) {
  auto plan_with = [](double inter_node_bw, double latency_ms) {
    PlannerInput in = Input(2, 4, 2);
    for (auto& t : in.tables) t.dim = 128;
    in.topology.batch_size = 4096;
    in.topology.inter_node_bw = inter_node_bw;
    in.topology.collective_latency_ms = latency_ms;
    for (const auto& t : in.tables)
      in.constraints.push_back(Only(t.name, ShardingType::kTableRowWise));
    return MustPlan(in);
  };
  const PlannerResult slow = plan_with(12.5e3, 0.0);  // 100 Mbit/s between hosts
  EXPECT_EQ(slow.plan.host_reduce, 1);
  const PlannerResult fast = plan_with(1e9, 50.0);
  EXPECT_EQ(fast.plan.host_reduce, 0);
  // The choice prices what the estimate says: the chosen exchange is the cheaper of the two.
  for (const PlannerResult* r : {&slow, &fast}) {
    sharding::Plan reduced = r->plan, flat = r->plan;
    reduced.host_reduce = 1;
    flat.host_reduce = 0;
    EXPECT_EQ(reduced.Hash(), flat.Hash());  // ranks need not agree on it through the hash
  }
  // One host (or no table-row-wise/grid table): no choice to make.
  PlannerInput one = Input(2, 2, 2);
  for (const auto& t : one.tables)
    one.constraints.push_back(Only(t.name, ShardingType::kTableRowWise));
  EXPECT_EQ(MustPlan(one).plan.host_reduce, -1);
  PlannerInput rw = Input(2, 4, 2);
  for (const auto& t : rw.tables) rw.constraints.push_back(Only(t.name, ShardingType::kRowWise));
  EXPECT_EQ(MustPlan(rw).plan.host_reduce, -1);
}

TEST(PlannerPlan, EstimateFollowsThePlansExchange) {
  PlannerInput in = Input(2, 4, 2);
  for (auto& t : in.tables) t.dim = 128;
  in.topology.batch_size = 4096;
  in.topology.inter_node_bw = 12.5e3;
  for (const auto& t : in.tables)
    in.constraints.push_back(Only(t.name, ShardingType::kTableRowWise));
  sharding::Plan plan = MustPlan(in).plan;
  const auto pooling = FeaturePoolingFactors(plan);
  auto busiest = [&](int32_t choice) {
    plan.host_reduce = choice;
    double worst = 0;
    for (const Perf& p : EstimatePlan(plan, in.topology, pooling).rank_perf)
      worst = std::max(worst, p.total());
    return worst;
  };
  const double reduced = busiest(1), flat = busiest(0), unknown = busiest(-1);
  EXPECT_LT(reduced, flat);     // half the partial sums cross the slow link
  EXPECT_EQ(unknown, reduced);  // an unknown choice is the collection's default: reduced
}

}  // namespace
}  // namespace shardrec::planner
