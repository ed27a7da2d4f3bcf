// FP8 tables under shardrec_optimizer_config_t.stochastic_rounding: each updated row keeps its
// power-of-two scale and each value rounds between its two neighbouring codes with bits keyed by
// (seed, step, table, global row, column). Against the reference that rounds the same way
// (RoundRowToFp8 with those bits) at worlds 1, 2 and 4; and, on data whose fp32 arithmetic is
// exact in every summation order, the same bits as that reference at world 1, at world 2 under
// three plans and with 1 or 3 threads per rank, unlike nearest rounding.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

Scenario StochasticScenario(int32_t world, int32_t dtype, int32_t type) {
  Scenario s = DTypeScenario(world, dtype, type, SHARDREC_POOLING_SUM);
  s.optimizer.stochastic_rounding = true;
  return s;
}

// (world, dtype, optimizer, sharding type)
using Param = std::tuple<int32_t, int32_t, int32_t, int32_t>;

class EmbeddingFp8Stochastic : public ::testing::TestWithParam<Param> {};

TEST_P(EmbeddingFp8Stochastic, MatchesReferenceThatRoundsWithTheSameBits) {
  const auto [world, dtype, opt, type] = GetParam();
  Scenario s = StochasticScenario(world, dtype, type);
  s.optimizer.type = opt;
  s.optimizer.lr = 0.02f;
  s.weighted = true;
  s.steps = 4;
  RunEquivalence(s);
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto [world, dtype, opt, type] = info.param;
  return std::string("W") + std::to_string(world) +
         (dtype == SHARDREC_DTYPE_FP8_E4M3 ? "_E4M3_" : "_E5M2_") +
         (opt == SHARDREC_OPTIMIZER_ADAM ? "Adam_" : "RowWiseAdagrad_") + kShardingTypeNames[type];
}

INSTANTIATE_TEST_SUITE_P(Rows, EmbeddingFp8Stochastic,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(SHARDREC_DTYPE_FP8_E4M3,
                                                              SHARDREC_DTYPE_FP8_E5M2),
                                            ::testing::Values(SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD,
                                                              SHARDREC_OPTIMIZER_ADAM),
                                            ::testing::Values(SHARDREC_SHARDING_DATA_PARALLEL,
                                                              SHARDREC_SHARDING_ROW_WISE,
                                                              SHARDREC_SHARDING_TABLE_ROW_WISE)),
                         ParamName);

// Every table's weights after training `s` (rank 0's; every rank's must agree).
std::vector<std::vector<float>> Train(const Scenario& s,
                                      const std::vector<std::vector<RefBatch>>& batches,
                                      const std::vector<std::vector<std::vector<float>>>& grads,
                                      int64_t output_dim) {
  PlanPtr plan = MakePlan(s);
  EXPECT_NE(plan, nullptr);
  std::vector<std::vector<std::vector<float>>> got(s.world);
  SpawnRanks(s.world, [&](int r) {
    CollPtr c = CreateRank(s, plan.get(), r, s.seed);
    ASSERT_NE(c, nullptr);
    for (size_t step = 0; step < batches.size(); ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, false);
      std::vector<float> out(static_cast<size_t>(batches[step][r].batch_size) * output_dim);
      ASSERT_EQ(shardrec_embedding_forward(c.get(), kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_backward(c.get(), grads[step][r].data(), grads[step][r].size(),
                                            nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
    }
    for (const RefTable& t : s.tables) got[r].push_back(GetWeights(c.get(), t));
  });
  for (int32_t r = 1; r < s.world; ++r) EXPECT_EQ(got[r], got[0]) << "rank " << r;
  return got[0];
}

size_t BitsDiffer(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0 ? 1 : 0;
  return n + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

// SGD at learning rate 1/8 on SUM bags without weights, output gradients multiples of 2^-8: every
// sum of gradients, its mean over the ranks and every updated weight is exact in fp32, so a run's
// fp32 rows do not depend on the world size, the plan or the thread count, and any difference in
// the stored bits would come from the rounding's keys. World 2's two batches are world 1's batch
// split in halves (world 1's gradients halved, as the ranks' mean divides by 2).
TEST(EmbeddingFp8StochasticBits, SameBitsAtEveryWorldPlanAndThreadCount) {
  for (int32_t dtype : {SHARDREC_DTYPE_FP8_E4M3, SHARDREC_DTYPE_FP8_E5M2}) {
    SCOPED_TRACE(dtype == SHARDREC_DTYPE_FP8_E4M3 ? "E4M3" : "E5M2");
    Scenario two = StochasticScenario(2, dtype, SHARDREC_SHARDING_ROW_WISE);
    two.optimizer.type = SHARDREC_OPTIMIZER_SGD;
    two.optimizer.lr = 0.125f;
    two.batch_sizes = {6, 6};
    two.steps = 4;
    ReferenceModel ref(two.num_features, two.tables, two.optimizer, two.seed, two.world);
    const auto batches = MakeBatches(two, ref);
    const int64_t out_dim = ref.output_dim();
    std::vector<std::vector<std::vector<float>>> grads(two.steps);
    std::vector<std::vector<RefBatch>> one_batches(two.steps, std::vector<RefBatch>(1));
    std::vector<std::vector<std::vector<float>>> one_grads(two.steps);
    uint32_t state = 12345;
    for (int32_t step = 0; step < two.steps; ++step) {
      for (int32_t r = 0; r < 2; ++r) {
        std::vector<float> g(static_cast<size_t>(batches[step][r].batch_size) * out_dim);
        for (float& x : g) {
          state = state * 1664525u + 1013904223u;
          x = static_cast<float>(static_cast<int32_t>(state >> 24) - 128) / 256.0f;
        }
        grads[step].push_back(std::move(g));
      }
      // The world-1 batch: each feature's lengths and ids of rank 0, then of rank 1.
      RefBatch& b = one_batches[step][0];
      b.batch_size = batches[step][0].batch_size + batches[step][1].batch_size;
      std::vector<size_t> at(2, 0);
      for (int32_t f = 0; f < two.num_features; ++f) {
        for (int32_t r = 0; r < 2; ++r) {
          const RefBatch& src = batches[step][r];
          for (int64_t i = 0; i < src.batch_size; ++i) {
            const int32_t len = src.lengths[f * src.batch_size + i];
            b.lengths.push_back(len);
            for (int32_t k = 0; k < len; ++k) b.ids.push_back(src.ids[at[r]++]);
          }
        }
      }
      std::vector<float> g1;
      for (int32_t r = 0; r < 2; ++r)
        for (float x : grads[step][r]) g1.push_back(x * 0.5f);
      one_grads[step].push_back(std::move(g1));
      ref.Backward(batches[step], grads[step]);
    }
    std::vector<std::vector<float>> want;
    for (size_t t = 0; t < two.tables.size(); ++t) want.push_back(ref.weights(t));

    Scenario one = two;
    one.world = 1;
    one.ranks_per_node = 1;
    one.sharding.assign(one.tables.size(), SHARDREC_SHARDING_TABLE_WISE);
    const auto w1 = Train(one, one_batches, one_grads, out_dim);
    const auto rw = Train(two, batches, grads, out_dim);
    Scenario threads = two;
    threads.num_threads = 3;
    const auto rw3 = Train(threads, batches, grads, out_dim);
    Scenario mixed = two;
    mixed.sharding = {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_TABLE_WISE,
                      SHARDREC_SHARDING_TABLE_ROW_WISE};
    const auto mx = Train(mixed, batches, grads, out_dim);
    Scenario nearest = two;
    nearest.optimizer.stochastic_rounding = false;
    const auto nr = Train(nearest, batches, grads, out_dim);
    ASSERT_EQ(w1.size(), want.size());
    size_t total = 0, from_nearest = 0;
    for (size_t t = 0; t < want.size(); ++t) {
      SCOPED_TRACE("table " + two.tables[t].name);
      EXPECT_EQ(BitsDiffer(w1[t], want[t]), 0u) << "world 1";
      EXPECT_EQ(BitsDiffer(rw[t], want[t]), 0u) << "world 2 row-wise";
      EXPECT_EQ(BitsDiffer(rw3[t], want[t]), 0u) << "world 2 row-wise, 3 threads";
      EXPECT_EQ(BitsDiffer(mx[t], want[t]), 0u) << "world 2 DP / TW / TWRW";
      total += want[t].size();
      from_nearest += BitsDiffer(nr[t], want[t]);
    }
    // The flag takes effect: nearest rounding stores other codes for many weights.
    EXPECT_GT(from_nearest, total / 20) << from_nearest << " of " << total;
  }
}

}  // namespace
}  // namespace shardrec::testing
