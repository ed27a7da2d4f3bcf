// Absurd pooling factors (1e30, or 2^64 - 1 in a JSON plan) are refused by the planner with a
// message naming the feature, and never turn the estimates negative.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "impl/planner/estimator.h"
#include "impl/planner/planner.h"
#include "impl/planner/stats.h"
#include "impl/sharding/plan_json.h"
#include "tests/impl/planner/planner_test_util.h"

namespace shardrec::planner {
namespace {

using namespace shardrec::planner::testing;
using sharding::ShardingType;

void ExpectSane(const Storage& s) {
  EXPECT_GE(s.weights, 0);
  EXPECT_GE(s.optimizer, 0);
  EXPECT_GE(s.input, 0);
  EXPECT_GE(s.output, 0);
  EXPECT_GE(s.total(), 0);
  EXPECT_GE(s.total(), s.input);
}

TEST(PlannerOverflow, EstimatorSaturatesInsteadOfWrapping) {
  const sharding::TableConfig t = Table("t", 1000, 64, {0});
  const Topology topo = Topology::Default(4, 2, ComputeDevice::kHost);
  for (float p : {1e30f, 1.8446744e19f, 3e38f}) {
    for (int type = 0; type < sharding::kNumShardingTypes; ++type) {
      std::vector<sharding::Shard> shards(1);
      shards[0].rows = 1000;
      shards[0].cols = 64;
      const auto est = EstimateShards(topo, t, {p}, static_cast<ShardingType>(type), shards);
      ASSERT_EQ(est.size(), 1u);
      ExpectSane(est[0].storage);
      Storage sum;
      for (int i = 0; i < 100; ++i) sum += est[0].storage;
      ExpectSane(sum);
    }
  }
  EXPECT_EQ(SaturatingAdd(std::numeric_limits<int64_t>::max(), 1),
            std::numeric_limits<int64_t>::max());
}

TEST(PlannerOverflow, PlannerRejectsAPoolingFactorBeyondRange) {
  PlannerInput in = Input(2, 2, 2);
  in.features[1].pooling_factor = 1e30f;
  PlannerResult r;
  Status s = MakePlan(in, &r);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("feature 'f1'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("pooling factor"), std::string::npos) << s.message();
  // The same through a table's constraints.
  in = Input(2, 2, 2);
  TableConstraints c;
  c.table = "t0";
  c.pooling_factors = {1.8446744e19f};
  in.constraints = {c};
  s = MakePlan(in, &r);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("feature 'f0'"), std::string::npos) << s.message();
  // A large but representable one still plans.
  in = Input(2, 2, 2);
  in.features[0].pooling_factor = 1e6f;
  EXPECT_TRUE(MakePlan(in, &r).ok());
}

TEST(PlannerOverflow, JsonPlanWithHugePoolingFactorIsRefusedByTheFitCheck) {
  PlannerInput in = Input(2, 2, 2);
  PlannerResult r;
  ASSERT_TRUE(MakePlan(in, &r).ok());
  std::string json = sharding::PlanToJson(r.plan);
  const std::string key = "\"pooling_factor\":";
  const size_t at = json.find(key);
  ASSERT_NE(at, std::string::npos) << json;
  const size_t end = json.find_first_of(",}", at + key.size());
  json.replace(at + key.size(), end - at - key.size(), "18446744073709551615");
  sharding::Plan plan;
  Status s = sharding::PlanFromJson(json, &plan);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const Topology topo = Topology::Default(2, 2, ComputeDevice::kHost);
  const auto pooling = FeaturePoolingFactors(plan);
  s = CheckPlanFits(plan, topo, pooling);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("pooling factor"), std::string::npos) << s.message();
  const PlanEstimate e = EstimatePlan(plan, topo, pooling);
  for (const Storage& st : e.rank_storage) ExpectSane(st);
  StatsInfo info;
  const std::string stats = FormatStats(plan, topo, pooling, info);
  EXPECT_NE(stats.find("estimates are saturated"), std::string::npos) << stats;
  // No negative figure anywhere (a minus sign right after a space, bar or parenthesis).
  EXPECT_FALSE(std::regex_search(stats, std::regex("(^|[ |(])-[0-9]"))) << stats;
}

}  // namespace
}  // namespace shardrec::planner
