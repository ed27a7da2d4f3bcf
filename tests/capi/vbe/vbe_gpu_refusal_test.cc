// A GPU collection refuses VBE views with SHARDREC_EUNSUPPORTED and a message, on every rank and
// changing nothing (the fake plugin stands in for the device), and a plain forward of the same
// collection still works afterwards: the refusal is the view's, not the missing device's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/capi/vbe/vbe_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

TEST(VbeGpu, GpuCollectionRefusesVbeViews) {
  for (int32_t world : {1, 2}) {
    Scenario s = StandardScenario(world, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
    SpawnRanks(world, [&](int r) {
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      o.device_type = SHARDREC_DEVICE_CUDA;
      o.device_index = 0;
      shardrec_embedding_t* c = nullptr;
      ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(world, r), &opt, &o),
                SHARDREC_OK)
          << "the fake plugin should make a GPU collection: " << shardrec_last_error();
      CollPtr coll(c);
      const VbeBatchData v = MakeVbeBatch(7 + r, IdRanges(s), VbeMode::kInverse, false, 2);
      const shardrec_kjt_vbe_view_t view = v.View();
      size_t len = 0;
      ASSERT_EQ(shardrec_embedding_vbe_output_len(c, &view, &len), SHARDREC_OK);
      std::vector<float> out(len);
      EXPECT_EQ(shardrec_embedding_forward_vbe(c, &view, out.data(), len, nullptr),
                SHARDREC_EUNSUPPORTED);
      std::string msg = shardrec_last_error();
      EXPECT_NE(msg.find("not supported on GPU collections"), std::string::npos) << msg;
      EXPECT_EQ(shardrec_embedding_input_dist_start_vbe(c, &view, nullptr), SHARDREC_EUNSUPPORTED);
      msg = shardrec_last_error();
      EXPECT_NE(msg.find("not supported on GPU collections"), std::string::npos) << msg;
      int64_t steps = -1;
      shardrec_embedding_num_steps(c, &steps);
      EXPECT_EQ(steps, 0);
      // The plain forward of the expanded batch runs on the same collection.
      const RefBatch e = Expand(v);
      KjtHolder kjt(e, s.num_features, false);
      int64_t dim = 0;
      shardrec_embedding_output_dim(c, &dim);
      std::vector<float> plain(static_cast<size_t>(e.batch_size * dim));
      EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), plain.data(), plain.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
    });
  }
}

}  // namespace
}  // namespace shardrec::testing
