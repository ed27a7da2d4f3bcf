// A GPU collection refuses FP8 tables with SHARDREC_EUNSUPPORTED naming the table, while the same
// plan with bf16 tables makes a GPU collection (the fake plugin stands in for the device, so the
// refusal is the storage type's and not the missing device's).
#include <gtest/gtest.h>

#include <string>

#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {
namespace {

TEST(EmbeddingFp8Gpu, GpuCollectionRefusesFp8Tables) {
  for (int32_t dtype :
       {SHARDREC_DTYPE_BFLOAT16, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_DTYPE_FP8_E5M2}) {
    Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
    s.ranks_per_node = 1;
    s.tables[1].dtype = dtype;
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.device_type = SHARDREC_DEVICE_CUDA;
    o.device_index = 0;
    shardrec_embedding_t* c = nullptr;
    const shardrec_status_t rc =
        shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, &o);
    if (dtype == SHARDREC_DTYPE_BFLOAT16) {
      ASSERT_EQ(rc, SHARDREC_OK) << "the fake plugin should make a GPU collection: "
                                 << shardrec_last_error();
      shardrec_embedding_destroy(c);
      continue;
    }
    EXPECT_EQ(rc, SHARDREC_EUNSUPPORTED);
    EXPECT_EQ(c, nullptr);
    const std::string msg = shardrec_last_error();
    EXPECT_NE(msg.find("table 't1' stores fp8_e"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GPU collections do not take FP8 tables"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace shardrec::testing
