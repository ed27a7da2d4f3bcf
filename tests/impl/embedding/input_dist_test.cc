// Routing of one batch without communication: validation messages, bounds policies, and the
// ids each shard owner receives.
#include "impl/embedding/input_dist.h"

#include <gtest/gtest.h>

#include <cstring>

#include "impl/sharding/layout.h"

namespace shardrec::embedding {
namespace {

// One optimizer type for every table of `plan`.
template <typename PlanPtr>
std::vector<optim::OptimizerType> Types(const PlanPtr& plan, optim::OptimizerType type) {
  return std::vector<optim::OptimizerType>(plan->tables.size(), type);
}

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
  EXPECT_TRUE(BuildLayout(plan, 0, Types(plan, optim::OptimizerType::kSgd), &l).ok());
  return l;
}

// The local rows routed to `unit`, read back from its destination's message in the send buffer.
std::vector<int64_t> SentRows(const Layout& l, const RoutedBatch& rb, int32_t unit) {
  const int32_t d = l.units[unit].rank;
  size_t msg = 0;
  for (int32_t r = 0; r < d; ++r) msg += rb.send_bytes[r];
  const size_t lens = 4 * l.units_to_rank[d].size() * static_cast<size_t>(rb.batch_size);
  const size_t rows_at = msg + ((lens + 7) & ~size_t{7});
  int64_t first = 0;
  for (int32_t u : l.units_to_rank[d]) {
    if (u == unit) break;
    first += rb.unit_ids[u];
  }
  std::vector<int64_t> out(static_cast<size_t>(rb.unit_ids[unit]));
  for (size_t i = 0; i < out.size(); ++i)
    std::memcpy(&out[i], rb.send.data() + rows_at + 8 * (first + i), 8);
  return out;
}

TEST(EmbeddingInputDist, RoutesEachIdToTheRankHoldingItsRow) {
  Layout l = RowWiseLayout();
  const int32_t lengths[] = {3, 0};
  const int64_t ids[] = {4, 0, 3};
  Batch b{2, 1, lengths, 2, ids, DType::kInt64, 3, nullptr, 0, {}};
  RoutedBatch rb;
  ASSERT_TRUE(RouteBatch(l, RouteOptions{BoundsPolicy::kError, true}, b, &rb).ok());
  EXPECT_EQ(rb.counts_send[1 * kCountFields + 2], 2);  // ids 4 and 3 -> rank 1
  EXPECT_EQ(rb.counts_send[0 * kCountFields + 2], 1);
  EXPECT_EQ(SentRows(l, rb, 1), (std::vector<int64_t>{1, 0}));  // local rows on rank 1
  EXPECT_FLOAT_EQ(rb.mean_div[0], 3.0f);
  EXPECT_EQ(rb.ret_target, (std::vector<int64_t>{0, 0}));  // sample 0 comes back from both
}

TEST(EmbeddingInputDist, BoundsPolicies) {
  Layout l = RowWiseLayout();
  const int32_t lengths[] = {2, 1};
  const int32_t ids[] = {9, 1, -1};
  Batch b{2, 1, lengths, 2, ids, DType::kInt32, 3, nullptr, 0, {}};
  RoutedBatch rb;
  Status s = RouteBatch(l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("feature 'f' sample 0 (value position 0): id 9"), std::string::npos)
      << s.message();
  ASSERT_TRUE(RouteBatch(l, RouteOptions{BoundsPolicy::kClamp, true}, b, &rb).ok());
  EXPECT_EQ(SentRows(l, rb, 0), (std::vector<int64_t>{0, 1, 0}));
  ASSERT_TRUE(RouteBatch(l, RouteOptions{BoundsPolicy::kSkip, true}, b, &rb).ok());
  EXPECT_EQ(SentRows(l, rb, 0), (std::vector<int64_t>{1}));
  EXPECT_FLOAT_EQ(rb.mean_div[1], 0.0f);  // the skipped bag is empty
}

TEST(EmbeddingInputDist, StructuralErrorsNameTheField) {
  Layout l = RowWiseLayout();
  const int32_t lengths[] = {1, -1};
  const int64_t ids[] = {0};
  Batch b{2, 1, lengths, 2, ids, DType::kInt64, 0, nullptr, 0, {}};
  RoutedBatch rb;
  Status s = RouteBatch(l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
  EXPECT_NE(s.message().find("negative length"), std::string::npos) << s.message();
  b.num_features = 2;
  s = RouteBatch(l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
  EXPECT_NE(s.message().find("num_features"), std::string::npos) << s.message();
}

// A batch size so large that num_features * batch_size wraps around must be rejected, not read.
TEST(EmbeddingInputDist, OverflowingBatchSizeIsRejected) {
  Layout l = RowWiseLayout();
  Batch b{int64_t{1} << 62, 1, nullptr, 0, nullptr, DType::kInt64, 0, nullptr, 0, {}};
  RoutedBatch rb;
  EXPECT_EQ(RouteBatch(l, RouteOptions{BoundsPolicy::kError, true}, b, &rb).code(),
            Code::kInvalidArgument);
  b.num_features = 1;
  b.batch_size = INT64_MAX;
  Status s = RouteBatch(l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
}

// The owner side describes what it received as runs pointing into the receive buffer, one per
// (source, unit), with outputs placed back to back in the return message.
TEST(EmbeddingInputDist, UnpackDescribesRunsPerShard) {
  Layout l = RowWiseLayout();  // rank 0 holds rows 0-2
  const int32_t lengths[] = {2, 0, 1};
  const int64_t ids[] = {0, 2, 1};
  Batch b{3, 1, lengths, 3, ids, DType::kInt64, 3, nullptr, 0, {}};
  RoutedBatch rb;
  ASSERT_TRUE(RouteBatch(l, RouteOptions{BoundsPolicy::kError, true}, b, &rb).ok());
  // Pretend rank 0 sent the same batch to itself and rank 1 sent nothing: build the receive
  // side by hand from this rank's own message.
  rb.counts_recv = {0, 3, 3, 0, 0, 0, 0, 0};
  rb.recv_bytes = {rb.send_bytes[0], 8};
  rb.recv.assign(rb.send.begin(), rb.send.begin() + rb.send_bytes[0]);
  rb.recv.resize(rb.recv.size() + 8, 0);
  ASSERT_TRUE(UnpackInput(l, &rb).ok());
  ASSERT_EQ(rb.shards.size(), 1u);
  ASSERT_EQ(rb.shards[0].runs.size(), 1u);
  const kernels::BagRun& run = rb.shards[0].runs[0];
  EXPECT_EQ(run.num_bags, 2);  // the empty bag of sample 1 is dropped
  EXPECT_EQ(run.offsets[0], 0);
  EXPECT_EQ(run.offsets[1], 2);
  EXPECT_EQ(run.offsets[2], 3);
  EXPECT_EQ(run.rows[0], 0);
  EXPECT_EQ(run.rows[2], 1);
  EXPECT_EQ(run.io_offset, 0);
  EXPECT_EQ(rb.shards[0].num_ids, 3);
  EXPECT_EQ(rb.ret_floats_to[0], 2u * 4);
  EXPECT_EQ(rb.ret_floats_total, 2u * 4);
}

}  // namespace
}  // namespace shardrec::embedding
