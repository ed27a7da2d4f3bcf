// The parameter store of a collection: fp32 weights and optimizer state share one arena (one sync
// collective), fp16/bf16 tables really live in 16-bit buffers, every buffer says what it holds,
// and the per-shard views place each local tensor in its full table.
#include <gtest/gtest.h>

#include <map>
#include <utility>

#include "impl/comm/factory.h"
#include "impl/embedding/collection.h"
#include "impl/sharding/layout.h"

namespace shardrec::embedding {
namespace {

sharding::TableConfig Table(const std::string& name, int64_t rows, int32_t dim, int32_t feature,
                            DType dtype) {
  sharding::TableConfig t;
  t.name = name;
  t.rows = rows;
  t.dim = dim;
  t.features = {feature};
  t.dtype = dtype;
  return t;
}

TEST(EmbeddingParamStore, SixteenBitTablesUseSixteenBitBuffers) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->features = {{"a", 1.0f}, {"b", 1.0f}, {"c", 1.0f}};
  plan->tables = {Table("f32", 100, 8, 0, DType::kFloat32),
                  Table("f16", 300, 16, 1, DType::kFloat16),
                  Table("b16", 50, 4, 2, DType::kBFloat16)};
  for (const auto& t : plan->tables) plan->table_plans.push_back(sharding::MakeTableWise(t, 0));
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  ASSERT_TRUE(comm::CreateLocalGroup(1, comm::CommOptions(), &comms).ok());
  optim::OptimizerConfig opt;
  opt.type = optim::OptimizerType::kAdagrad;  // one element-wise fp32 state per table
  std::unique_ptr<EmbeddingCollection> coll;
  Status s =
      EmbeddingCollection::Create(plan, std::move(comms[0]), &opt, CollectionOptions(), &coll);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::map<std::pair<ParamKind, DType>, ParamBuffer> buffers;
  for (const auto& b : coll->ParamBuffers()) {
    EXPECT_TRUE(b.device.is_host());
    EXPECT_TRUE(buffers.emplace(std::make_pair(b.kind, b.dtype), b).second)
        << "one buffer per kind and dtype";
  }
  const auto w32 = buffers.at({ParamKind::kWeights, DType::kFloat32});
  const auto w16 = buffers.at({ParamKind::kWeights, DType::kFloat16});
  const auto wb16 = buffers.at({ParamKind::kWeights, DType::kBFloat16});
  const auto states = buffers.at({ParamKind::kOptimizerState, DType::kFloat32});
  const auto step = buffers.at({ParamKind::kCounter, DType::kInt64});
  EXPECT_EQ(buffers.size(), 5u);
  EXPECT_EQ(w32.count, 100u * 8);
  EXPECT_EQ(w16.count, 300u * 16);
  EXPECT_EQ(wb16.count, 50u * 4);
  // Optimizer state stays fp32 for every table and directly follows the fp32 weights.
  EXPECT_EQ(states.count, 100u * 8 + 300u * 16 + 50u * 4);
  EXPECT_EQ(static_cast<float*>(w32.data) + w32.count, static_cast<float*>(states.data));
  EXPECT_EQ(step.count, 1u);
  EXPECT_EQ(*static_cast<int64_t*>(step.data), 0);
}

// Column-wise shards with row-wise state: each local tensor knows its table, block and kind; the
// row-wise state of the second column shard is flagged as a duplicate of the first's.
TEST(EmbeddingParamStore, ShardTensorsPlaceEveryLocalTensor) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->features = {{"a", 1.0f}, {"b", 1.0f}};
  plan->tables = {Table("cw", 10, 8, 0, DType::kFloat32), Table("rw", 7, 4, 1, DType::kFloat16)};
  plan->table_plans = {sharding::MakeColumnSplit(
                           plan->tables[0], sharding::ShardingType::kColumnWise, {4, 4}, {0, 0}),
                       sharding::MakeRowWise(plan->tables[1], 1)};
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  ASSERT_TRUE(comm::CreateLocalGroup(1, comm::CommOptions(), &comms).ok());
  optim::OptimizerConfig opt;
  opt.type = optim::OptimizerType::kPartialRowWiseAdam;  // one element-wise, one row-wise state
  std::unique_ptr<EmbeddingCollection> coll;
  CollectionOptions o;
  o.seed = 7;
  ASSERT_TRUE(EmbeddingCollection::Create(plan, std::move(comms[0]), &opt, o, &coll).ok());
  std::vector<float> full(10 * 8);
  ASSERT_TRUE(coll->GetWeights("cw", full.data(), full.size()).ok());
  int weights = 0, states = 0, duplicates = 0;
  for (const ShardTensor& t : coll->ShardTensors()) {
    EXPECT_EQ(t.table_name, plan->tables[t.table].name);
    EXPECT_EQ(t.full_rows, plan->tables[t.table].rows);
    EXPECT_LE(t.row_offset + t.rows, t.full_rows);
    EXPECT_LE(t.col_offset + t.cols, t.full_cols);
    duplicates += t.duplicate;
    if (t.kind == ParamKind::kWeights) {
      ++weights;
      EXPECT_EQ(t.name, "weights");
      EXPECT_EQ(t.dtype, plan->tables[t.table].dtype);
      EXPECT_EQ(t.full_cols, plan->tables[t.table].dim);
      if (t.table == 0) {  // the fp32 view agrees with the gathered table
        const float* d = static_cast<const float*>(t.data);
        for (int64_t r = 0; r < t.rows; ++r)
          for (int64_t c = 0; c < t.cols; ++c)
            ASSERT_EQ(d[r * t.row_stride + c], full[(t.row_offset + r) * 8 + t.col_offset + c]);
      }
    } else {
      ++states;
      EXPECT_EQ(t.kind, ParamKind::kOptimizerState);
      EXPECT_EQ(t.dtype, DType::kFloat32);
      EXPECT_EQ(t.full_cols, t.name == "momentum2" ? 1 : plan->tables[t.table].dim);
    }
  }
  EXPECT_EQ(weights, 3);     // two column shards of "cw", one shard of "rw"
  EXPECT_EQ(states, 6);      // two states each
  EXPECT_EQ(duplicates, 1);  // "cw"'s second column shard's row-wise momentum2
}

}  // namespace
}  // namespace shardrec::embedding
