// Routing of one batch without communication: validation messages, bounds policies, and the
// ids each shard owner receives.
#include "impl/embedding/input_dist.h"

#include <gtest/gtest.h>

#include <cstring>

#include "impl/core/thread_pool.h"
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
  // Messages to other ranks come in rank order; the one a rank keeps for itself comes last.
  size_t msg = 0;
  for (int32_t r = 0; r < d; ++r)
    if (r != l.rank) msg += rb.send_bytes[r];
  if (d == l.rank) msg = rb.self_offset;
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
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb).ok());
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
  Status s = RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("feature 'f' sample 0 (value position 0): id 9"), std::string::npos)
      << s.message();
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kClamp, true}, b, &rb).ok());
  EXPECT_EQ(SentRows(l, rb, 0), (std::vector<int64_t>{0, 1, 0}));
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kSkip, true}, b, &rb).ok());
  EXPECT_EQ(SentRows(l, rb, 0), (std::vector<int64_t>{1}));
  EXPECT_FLOAT_EQ(rb.mean_div[1], 0.0f);  // the skipped bag is empty
}

TEST(EmbeddingInputDist, StructuralErrorsNameTheField) {
  Layout l = RowWiseLayout();
  const int32_t lengths[] = {1, -1};
  const int64_t ids[] = {0};
  Batch b{2, 1, lengths, 2, ids, DType::kInt64, 0, nullptr, 0, {}};
  RoutedBatch rb;
  Status s = RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
  EXPECT_NE(s.message().find("negative length"), std::string::npos) << s.message();
  b.num_features = 2;
  s = RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
  EXPECT_NE(s.message().find("num_features"), std::string::npos) << s.message();
}

// A batch size so large that num_features * batch_size wraps around must be rejected, not read.
TEST(EmbeddingInputDist, OverflowingBatchSizeIsRejected) {
  Layout l = RowWiseLayout();
  Batch b{int64_t{1} << 62, 1, nullptr, 0, nullptr, DType::kInt64, 0, nullptr, 0, {}};
  RoutedBatch rb;
  EXPECT_EQ(RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb).code(),
            Code::kInvalidArgument);
  b.num_features = 1;
  b.batch_size = INT64_MAX;
  Status s = RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
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
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb).ok());
  // Rank 0's ids for itself stay in its send buffer (they are not exchanged); rank 1 sent an
  // empty batch. Build the receive side by hand.
  rb.counts_recv.assign(2 * kCountFields, 0);
  rb.counts_recv[1] = 3;  // rank 0: batch size 3, 3 ids
  rb.counts_recv[2] = 3;
  rb.recv_bytes = {rb.send_bytes[0], 0};
  rb.recv.clear();
  ASSERT_TRUE(UnpackInput(l, &rb).ok());
  EXPECT_EQ(rb.shards[0].runs[0].rows,
            reinterpret_cast<const int64_t*>(rb.send.data() + rb.self_offset + 16))
      << "the runs of a rank's own ids point into its send buffer";
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

// Pairs are routed in parallel: the messages, return bookkeeping and the first error are those of
// a sequential walk, for any thread count.
TEST(EmbeddingInputDist, ParallelRoutingEqualsSequential) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 2;
  plan->local_world_size = 2;
  plan->features = {{"a", 1.0f}, {"b", 1.0f}, {"c", 1.0f}};
  auto table = [](const char* name, int64_t rows, int32_t dim, std::vector<int32_t> f,
                  sharding::PoolingType pooling) {
    sharding::TableConfig t;
    t.name = name;
    t.rows = rows;
    t.dim = dim;
    t.features = std::move(f);
    t.pooling = pooling;
    return t;
  };
  plan->tables = {table("rw", 50, 4, {0, 2}, sharding::PoolingType::kMean),
                  table("cw", 30, 8, {1}, sharding::PoolingType::kSum),
                  table("dp", 7, 4, {2}, sharding::PoolingType::kSum)};
  plan->table_plans = {sharding::MakeRowWise(plan->tables[0], 2),
                       sharding::MakeColumnSplit(
                           plan->tables[1], sharding::ShardingType::kColumnWise, {4, 4}, {0, 1}),
                       sharding::MakeDataParallel(plan->tables[2], 2)};
  Layout l;
  ASSERT_TRUE(BuildLayout(plan, 0, Types(plan, optim::OptimizerType::kSgd), &l).ok());
  const int64_t B = 40;
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<float> weights;
  for (int f = 0; f < 3; ++f)
    for (int64_t b = 0; b < B; ++b) {
      const int32_t len = static_cast<int32_t>((b * 7 + f) % 5);
      lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) {
        ids.push_back((b * 13 + k * 3 + f) % 7);
        weights.push_back(0.5f + static_cast<float>(k));
      }
    }
  Batch batch{B,
              3,
              lengths.data(),
              lengths.size(),
              ids.data(),
              DType::kInt64,
              ids.size(),
              weights.data(),
              weights.size(),
              {}};
  RoutedBatch seq, par;
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{}, batch, &seq).ok());
  ThreadPool pool(4);
  ASSERT_TRUE(RouteBatch(ExecContext::Host(&pool), l, RouteOptions{}, batch, &par).ok());
  EXPECT_EQ(seq.send, par.send);
  EXPECT_EQ(seq.ret_target, par.ret_target);
  EXPECT_EQ(seq.mean_div, par.mean_div);
  EXPECT_EQ(seq.dp_rows, par.dp_rows);
  EXPECT_EQ(seq.dp_offsets, par.dp_offsets);
  EXPECT_EQ(seq.dp_weights, par.dp_weights);
  // Bad ids in two features: the error names the first, whoever finds it first.
  ids[1] = 999;
  ids[ids.size() - 1] = -5;
  const Status s1 = RouteBatch(ExecContext(), l, RouteOptions{}, batch, &seq);
  const Status s2 = RouteBatch(ExecContext::Host(&pool), l, RouteOptions{}, batch, &par);
  EXPECT_EQ(s1.code(), Code::kInvalidArgument);
  EXPECT_EQ(s1.message(), s2.message());
}

// A pair whose ids all go to the same units (a table-wise table under kError) is read once, in
// the writing pass, which checks its ids there; a row-wise pair's ids are checked while counted.
// Whichever pass finds a bad id, the error is the first of a sequential walk over the pairs.
TEST(EmbeddingInputDist, OnePassPairsReportTheFirstBadIdInPairOrder) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 2;
  plan->local_world_size = 2;
  plan->features = {{"a", 1.0f}, {"b", 1.0f}};
  sharding::TableConfig tw;
  tw.name = "tw";
  tw.rows = 10;
  tw.dim = 4;
  tw.features = {0};
  sharding::TableConfig rw = tw;
  rw.name = "rw";
  rw.features = {1};
  plan->tables = {tw, rw};
  plan->table_plans = {sharding::MakeTableWise(plan->tables[0], 1),
                       sharding::MakeRowWise(plan->tables[1], 2)};
  Layout l;
  ASSERT_TRUE(BuildLayout(plan, 0, Types(plan, optim::OptimizerType::kSgd), &l).ok());
  const int32_t lengths[] = {2, 1, 1, 2};  // feature a: samples 0, 1; feature b: samples 0, 1
  int64_t ids[] = {3, 9, 4, 0, 5, 8};
  Batch b{2, 2, lengths, 4, ids, DType::kInt64, 6, nullptr, 0, {}};
  RoutedBatch rb;
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb).ok());
  EXPECT_EQ(rb.counts_send[1 * kCountFields + 2], 3 + 2);  // a's 3 ids, b's 5 and 8 -> rank 1
  ids[1] = 10;  // feature a, sample 0: checked while written
  ids[4] = -1;  // feature b, sample 1: checked while counted
  Status s = RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
  EXPECT_NE(s.message().find("feature 'a' sample 0 (value position 1): id 10"), std::string::npos)
      << s.message();
  ids[1] = 9;
  s = RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
  EXPECT_NE(s.message().find("feature 'b' sample 1 (value position 4): id -1"), std::string::npos)
      << s.message();
  ids[4] = 5;
  ids[2] = 77;
  s = RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, b, &rb);
  EXPECT_NE(s.message().find("feature 'a' sample 1 (value position 2): id 77"), std::string::npos)
      << s.message();
  // Clamped, the bad id travels as row 0 of its table.
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kClamp, true}, b, &rb).ok());
  EXPECT_EQ(SentRows(l, rb, l.unit_of[0][0]), (std::vector<int64_t>{3, 9, 0}));
}

// A forward's whole verdict on its inputs in one call: the batch's errors first, then its ids',
// then its output buffer's (judged by the batch's own sizes).
TEST(EmbeddingInputDist, OutputBufferIsJudgedAfterTheBatch) {
  Layout l = RowWiseLayout();  // one feature, output_dim 4
  const int32_t lengths[] = {1, 1};
  int64_t ids[] = {4, 0};
  Batch b{2, 1, lengths, 2, ids, DType::kInt64, 2, nullptr, 0, {}};
  std::vector<float> out(8);
  RoutedBatch rb;
  OutputBuffer right{out.data(), 8};
  OutputBuffer wrong{out.data(), 7};
  const RouteOptions o{BoundsPolicy::kError, true};
  EXPECT_TRUE(RouteBatch(ExecContext(), l, o, b, &rb, &right).ok());
  Status s = RouteBatch(ExecContext(), l, o, b, &rb, &wrong);
  EXPECT_NE(s.message().find("out_len is 7 but this batch needs 8"), std::string::npos)
      << s.message();
  ids[1] = 5;
  s = RouteBatch(ExecContext(), l, o, b, &rb, &wrong);
  EXPECT_NE(s.message().find("id 5"), std::string::npos) << s.message();
  OutputBuffer null_out{nullptr, 8};
  ids[1] = 0;
  s = RouteBatch(ExecContext(), l, o, b, &rb, &null_out);
  EXPECT_NE(s.message().find("out must not be NULL"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shardrec::embedding
