// VBE training (docs/variable-batch.md) through the public C API: every sharding type, SUM / MEAN
// / NONE, weighted ids, at worlds 1, 2 and 4, with and without inverse indices, against a
// collection of the same plan fed the expanded plain batches (outputs bit for bit; weights bit
// for bit where no bag is read twice, else within the documented bound) and the reference model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "tests/capi/vbe/vbe_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

using Param = std::tuple<int32_t /*world*/, int32_t /*sharding*/, int32_t /*pooling*/, VbeMode>;

class VbeEquivalence : public ::testing::TestWithParam<Param> {};

TEST_P(VbeEquivalence, MatchesTheExpandedBatch) {
  const auto [world, sharding, pooling, mode] = GetParam();
  Scenario s = StandardScenario(world, sharding, pooling);
  s.optimizer.type = 2;  // row-wise Adagrad: a state beside the weights
  s.optimizer.lr = 0.05f;
  s.max_bag = 3;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  VbeRunOptions o;
  o.mode = mode;
  RunVbeEquivalence(s, plan.get(), o);
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  static const char* kSharding[] = {"DP", "TW", "RW", "CW", "TWRW", "TWCW", "GRID"};
  static const char* kPooling[] = {"Sum", "Mean", "None"};
  return "W" + std::to_string(std::get<0>(info.param)) + "_" + kSharding[std::get<1>(info.param)] +
         "_" + kPooling[std::get<2>(info.param)] + "_" + VbeModeName(std::get<3>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, VbeEquivalence,
    ::testing::Combine(
        ::testing::Values(1, 2, 4),
        ::testing::Values(SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_TABLE_WISE,
                          SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_COLUMN_WISE,
                          SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_SHARDING_GRID),
        ::testing::Values(SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN, SHARDREC_POOLING_NONE),
        ::testing::Values(VbeMode::kNoInverse, VbeMode::kInverse, VbeMode::kOnce)),
    Name);

// Weighted ids (SUM and MEAN) and SGD, at worlds 2 and 4, row-wise and table-wise.
TEST(VbeWeighted, MatchesTheExpandedBatch) {
  for (int32_t world : {2, 4})
    for (int32_t sharding : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_TABLE_WISE})
      for (int32_t pooling : {SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN})
        for (VbeMode mode : {VbeMode::kInverse, VbeMode::kNoInverse}) {
          SCOPED_TRACE("world " + std::to_string(world) + " sharding " + std::to_string(sharding) +
                       " pooling " + std::to_string(pooling) + " " + VbeModeName(mode));
          Scenario s = StandardScenario(world, sharding, pooling);
          s.weighted = true;
          s.data_seed = 17;
          PlanPtr plan = MakePlan(s);
          ASSERT_NE(plan, nullptr);
          VbeRunOptions o;
          o.mode = mode;
          RunVbeEquivalence(s, plan.get(), o);
        }
}

// The pipelined input distribution (input_dist_start_vbe, wait, forward_distributed), ranks
// mixing VBE and plain batches.
TEST(VbePipelined, MatchesTheExpandedBatch) {
  for (int32_t world : {1, 2, 4})
    for (int32_t pooling : {SHARDREC_POOLING_SUM, SHARDREC_POOLING_NONE})
      for (VbeMode mode : {VbeMode::kInverse, VbeMode::kNoInverse}) {
        SCOPED_TRACE("world " + std::to_string(world) + " pooling " + std::to_string(pooling) +
                     " " + VbeModeName(mode));
        Scenario s = StandardScenario(world, SHARDREC_SHARDING_ROW_WISE, pooling);
        PlanPtr plan = MakePlan(s);
        ASSERT_NE(plan, nullptr);
        VbeRunOptions o;
        o.mode = mode;
        o.pipelined = true;
        RunVbeEquivalence(s, plan.get(), o);
      }
}

// Quantized communication (fp16 forward, bf16 backward): the VBE collection against the expanded
// batch's collection with the same encodings (outputs bit for bit: each bag's rows are encoded
// once either way; weights bit for bit where no bag is read twice: the modes tested). With bags
// read several times the gradient is summed before its encoding, so the weights differ from the
// expanded batch's by the encoding's rounding, which this test does not bound. Not against the
// fp32 reference, whose distance the qcomms tests bound.
TEST(VbeQuantizedComm, MatchesTheExpandedBatch) {
  for (int32_t world : {2, 4})
    for (int32_t sharding : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_TABLE_WISE})
      for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kOnce}) {
        SCOPED_TRACE("world " + std::to_string(world) + " sharding " + std::to_string(sharding) +
                     " " + VbeModeName(mode));
        Scenario s = StandardScenario(world, sharding, SHARDREC_POOLING_MEAN);
        PlanPtr plan = MakePlan(s);
        ASSERT_NE(plan, nullptr);
        VbeRunOptions o;
        o.mode = mode;
        o.check_reference = false;
        o.options = [](shardrec_embedding_options_t* eo) {
          eo->forward_comm_encoding = SHARDREC_COMM_ENCODING_FP16;
          eo->backward_comm_encoding = SHARDREC_COMM_ENCODING_BF16;
        };
        RunVbeEquivalence(s, plan.get(), o);
      }
}

// forward_vbe_tensor on host tensor views: a 1-D view of either layout gives forward_vbe's output
// bit for bit, a [B, output_dim] view takes the plain layout, and a 2-D view of a feature-major
// output is refused on every rank.
TEST(VbeTensor, HostViewsMatchForwardVbe) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), &opt, nullptr),
              SHARDREC_OK);
    CollPtr coll(c);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    for (VbeMode mode : {VbeMode::kInverse, VbeMode::kNoInverse}) {
      const VbeBatchData v = MakeVbeBatch(31 + r, IdRanges(s), mode, false, 3);
      const shardrec_kjt_vbe_view_t view = v.View();
      size_t len = 0;
      ASSERT_EQ(shardrec_embedding_vbe_output_len(c, &view, &len), SHARDREC_OK);
      std::vector<float> want(len), got(len, -1.0f);
      ASSERT_EQ(shardrec_embedding_forward_vbe(c, &view, want.data(), len, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      shardrec_tensor_view_t t{};
      t.data = got.data();
      t.dtype = SHARDREC_DTYPE_FLOAT32;
      t.device_type = SHARDREC_DEVICE_HOST;
      t.ndim = 1;
      t.shape[0] = static_cast<int64_t>(len);
      ASSERT_EQ(shardrec_embedding_forward_vbe_tensor(c, &view, &t, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_EQ(got, want);
      t.ndim = 2;
      t.shape[1] = dim;
      t.shape[0] = static_cast<int64_t>(len) / dim;
      if (mode == VbeMode::kInverse) {
        std::fill(got.begin(), got.end(), -1.0f);
        ASSERT_EQ(shardrec_embedding_forward_vbe_tensor(c, &view, &t, nullptr), SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_EQ(got, want);
      } else {
        EXPECT_EQ(shardrec_embedding_forward_vbe_tensor(c, &view, &t, nullptr), SHARDREC_EINVAL);
        if (r == 0) {
          EXPECT_NE(std::string(shardrec_last_error()).find("give a 1-D view"), std::string::npos)
              << shardrec_last_error();
        }
      }
    }
  });
}

// Several threads per rank: the sums into the bags run per group of features (each thread
// walking the rows once for its features), the combine and the packing per chunk of rows; the
// results must not depend on it.
TEST(VbeThreads, MatchesTheExpandedBatch) {
  for (VbeMode mode : {VbeMode::kInverse, VbeMode::kOnce, VbeMode::kNoInverse}) {
    SCOPED_TRACE(VbeModeName(mode));
    Scenario s = StandardScenario(2, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_MEAN);
    s.num_threads = 3;
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    VbeRunOptions o;
    o.mode = mode;
    RunVbeEquivalence(s, plan.get(), o);
  }
}

// A feature whose every bag holds one id has its rows written by the combine rather than added
// into zeros (CombineInit, output_dist.cc): the output keeps the bits of the add, so rows of -0.0
// come out as +0.0, as the expanded batch's do. World 2: some rows are the peer's (returned),
// some this rank's.
TEST(VbeWrittenRows, NegativeZeroRowsComeOutAsTheAddGivesThem) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  const std::vector<int64_t> range = IdRanges(s);
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), &opt, nullptr),
              SHARDREC_OK);
    CollPtr coll(c);
    for (const RefTable& t : s.tables) {
      const std::vector<float> zeros(static_cast<size_t>(t.rows * t.dim), -0.0f);
      ASSERT_EQ(shardrec_embedding_set_weights(c, t.name.c_str(), zeros.data(), zeros.size()),
                SHARDREC_OK)
          << shardrec_last_error();
    }
    // B_f = 3 + f bags of one id each, without inverse indices (feature-major output).
    VbeBatchData v;
    for (size_t f = 0; f < range.size(); ++f) {
      v.sizes.push_back(3 + static_cast<int64_t>(f));
      for (int64_t b = 0; b < v.sizes.back(); ++b) {
        v.lengths.push_back(1);
        v.ids.push_back((b + r) % range[f]);
      }
      v.batch_size = std::max(v.batch_size, v.sizes.back());
    }
    const shardrec_kjt_vbe_view_t view = v.View();
    size_t len = 0;
    ASSERT_EQ(shardrec_embedding_vbe_output_len(c, &view, &len), SHARDREC_OK);
    std::vector<float> out(len, 1.0f);
    ASSERT_EQ(shardrec_embedding_forward_vbe(c, &view, out.data(), len, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    for (size_t i = 0; i < len; ++i)
      ASSERT_FALSE(std::signbit(out[i])) << "out[" << i << "] is " << out[i];
  });
}

}  // namespace
}  // namespace shardrec::testing
