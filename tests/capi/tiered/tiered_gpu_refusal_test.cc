// A GPU collection refuses tiered tables with SHARDREC_EUNSUPPORTED naming the table, while the
// same plan makes a GPU collection without tiers (the fake plugin stands in for the device).
#include <gtest/gtest.h>

#include <string>

#include "tiered_test_util.h"

namespace shardrec::testing {
namespace {

TEST(TieredGpu, GpuCollectionRefusesTieredTables) {
  const Scenario s =
      TieredScenario(1, SHARDREC_SHARDING_TABLE_WISE, 0, 0, SHARDREC_POOLING_SUM, false);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  const std::string dir = FreshDir("gpu");
  shardrec_table_tier_t tier;
  ASSERT_EQ(shardrec_table_tier_init(&tier, SHARDREC_TABLE_TIER_VERSION), SHARDREC_OK);
  tier.table = "t1";
  tier.dir = dir.c_str();
  tier.cache_bytes = 1 << 20;
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.device_type = SHARDREC_DEVICE_CUDA;
  o.device_index = 0;
  shardrec_embedding_t* c = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, &o), SHARDREC_OK)
      << "the fake plugin should make a GPU collection: " << shardrec_last_error();
  shardrec_embedding_destroy(c);
  c = nullptr;
  o.tiers = &tier;
  o.num_tiers = 1;
  EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, &o),
            SHARDREC_EUNSUPPORTED);
  EXPECT_EQ(c, nullptr);
  const std::string msg = shardrec_last_error();
  EXPECT_NE(msg.find("table 't1' is tiered: GPU collections do not take tiered tables"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace shardrec::testing
