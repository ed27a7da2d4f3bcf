// Routing of one batch without communication: validation messages, bounds policies, and the
// ids each shard owner receives.
#include "impl/embedding/input_dist.h"

#include <gtest/gtest.h>

#include "impl/sharding/layout.h"

namespace shardrec::embedding {
namespace {

Layout RowWiseLayout() {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 2;
  plan->local_world_size = 2;
  plan->features = {{"f", 1.0f}};
  sharding::TableConfig t;
  t.name = "t";
  t.rows = 5;
  t.dim = 4;
  t.features = {0};
  t.pooling = sharding::PoolingType::kMean;
  plan->tables = {t};
  plan->table_plans = {sharding::MakeRowWise(t, 2)};  // rows 0-2 on rank 0, 3-4 on rank 1
  Layout l;
  EXPECT_TRUE(BuildLayout(plan, 0, optim::OptimizerType::kSgd, &l).ok());
  return l;
}

TEST(EmbeddingInputDist, RoutesEachIdToTheRankHoldingItsRow) {
  Layout l = RowWiseLayout();
  const int32_t lengths[] = {3, 0};
  const int64_t ids[] = {4, 0, 3};
  Batch b{2, 1, lengths, 2, ids, DType::kInt64, 3, nullptr, 0};
  RoutedBatch rb;
  ASSERT_TRUE(RouteBatch(l, BoundsPolicy::kError, b, &rb).ok());
  EXPECT_EQ(rb.counts_send[1 * kCountFields + 2], 2);  // ids 4 and 3 -> rank 1
  EXPECT_EQ(rb.counts_send[0 * kCountFields + 2], 1);
  EXPECT_EQ(rb.unit_rows[1], (std::vector<int64_t>{1, 0}));  // local rows on rank 1
  EXPECT_FLOAT_EQ(rb.mean_div[0], 3.0f);
  EXPECT_EQ(rb.ret_target, (std::vector<int64_t>{0, 0}));  // sample 0 comes back from both
}

TEST(EmbeddingInputDist, BoundsPolicies) {
  Layout l = RowWiseLayout();
  const int32_t lengths[] = {2, 1};
  const int32_t ids[] = {9, 1, -1};
  Batch b{2, 1, lengths, 2, ids, DType::kInt32, 3, nullptr, 0};
  RoutedBatch rb;
  Status s = RouteBatch(l, BoundsPolicy::kError, b, &rb);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("feature 'f' sample 0 (value position 0): id 9"), std::string::npos)
      << s.message();
  ASSERT_TRUE(RouteBatch(l, BoundsPolicy::kClamp, b, &rb).ok());
  EXPECT_EQ(rb.unit_rows[0], (std::vector<int64_t>{0, 1, 0}));
  ASSERT_TRUE(RouteBatch(l, BoundsPolicy::kSkip, b, &rb).ok());
  EXPECT_EQ(rb.unit_rows[0], (std::vector<int64_t>{1}));
  EXPECT_FLOAT_EQ(rb.mean_div[1], 0.0f);  // the skipped bag is empty
}

TEST(EmbeddingInputDist, StructuralErrorsNameTheField) {
  Layout l = RowWiseLayout();
  const int32_t lengths[] = {1, -1};
  const int64_t ids[] = {0};
  Batch b{2, 1, lengths, 2, ids, DType::kInt64, 0, nullptr, 0};
  RoutedBatch rb;
  Status s = RouteBatch(l, BoundsPolicy::kError, b, &rb);
  EXPECT_NE(s.message().find("negative length"), std::string::npos) << s.message();
  b.num_features = 2;
  s = RouteBatch(l, BoundsPolicy::kError, b, &rb);
  EXPECT_NE(s.message().find("num_features"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shardrec::embedding
