// Local storage of a collection: fp32 weights and optimizer state share one arena (one sync
// collective), and fp16/bf16 tables really live in 16-bit buffers.
#include <gtest/gtest.h>

#include <map>

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

TEST(EmbeddingStorage, SixteenBitTablesUseSixteenBitBuffers) {
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
      EmbeddingCollection::Create(plan, std::move(comms[0]), opt, CollectionOptions(), &coll);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::map<std::string, ParamBuffer> buffers;
  for (const auto& b : coll->LocalParameterBuffers()) buffers[b.name] = b;
  ASSERT_EQ(buffers.count("weights"), 1u);
  ASSERT_EQ(buffers.count("weights_fp16"), 1u);
  ASSERT_EQ(buffers.count("weights_bf16"), 1u);
  EXPECT_EQ(buffers["weights"].dtype, DType::kFloat32);
  EXPECT_EQ(buffers["weights"].count, 100u * 8);
  EXPECT_EQ(buffers["weights_fp16"].dtype, DType::kFloat16);
  EXPECT_EQ(buffers["weights_fp16"].count, 300u * 16);
  EXPECT_EQ(buffers["weights_bf16"].dtype, DType::kBFloat16);
  EXPECT_EQ(buffers["weights_bf16"].count, 50u * 4);
  // Optimizer state stays fp32 for every table and directly follows the fp32 weights.
  EXPECT_EQ(buffers["optimizer_states"].dtype, DType::kFloat32);
  EXPECT_EQ(buffers["optimizer_states"].count, 100u * 8 + 300u * 16 + 50u * 4);
  EXPECT_EQ(static_cast<float*>(buffers["weights"].data) + buffers["weights"].count,
            static_cast<float*>(buffers["optimizer_states"].data));
  EXPECT_EQ(buffers["step"].dtype, DType::kInt64);
}

}  // namespace
}  // namespace shardrec::embedding
