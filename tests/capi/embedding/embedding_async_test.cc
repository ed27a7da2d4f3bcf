// The pipelined input distribution (start / wait / forward_distributed, batch i+1 distributed
// while batch i runs backward) gives bit-for-bit the results of the synchronous forward.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

// Bit-for-bit equality of two float vectors (memcmp on empty vectors' null data is undefined).
bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

class EmbeddingAsync : public ::testing::TestWithParam<int32_t> {};

TEST_P(EmbeddingAsync, PipelinedEqualsSynchronousBitForBit) {
  Scenario s = StandardScenario(4, SHARDREC_SHARDING_TABLE_WISE, GetParam());
  s.sharding = {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_GRID,
                SHARDREC_SHARDING_ROW_WISE};
  s.optimizer.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  s.weighted = true;
  s.steps = 4;
  s.batch_sizes = {3, 0, 4, 2};
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    shardrec_embedding_t* a = nullptr;
    shardrec_embedding_t* b = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&a, plan.get(), GroupComm(s.world, r), &opt, &o),
              SHARDREC_OK);
    CollPtr ca(a);
    ASSERT_EQ(shardrec_embedding_create(&b, plan.get(), GroupComm(s.world, r), &opt, &o),
              SHARDREC_OK);
    CollPtr cb(b);
    int64_t dim = 0;
    shardrec_embedding_output_dim(a, &dim);
    const bool seq = GetParam() == SHARDREC_POOLING_NONE;
    auto out_size = [&](int step) {
      return static_cast<size_t>(seq ? static_cast<int64_t>(batches[step][r].ids.size())
                                     : batches[step][r].batch_size) *
             static_cast<size_t>(dim);
    };
    // A: synchronous.
    std::vector<std::vector<float>> out_a;
    for (int step = 0; step < s.steps; ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, false);
      std::vector<float> out(out_size(step));
      ASSERT_EQ(shardrec_embedding_forward(a, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK);
      ASSERT_EQ(
          shardrec_embedding_backward(a, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK);
      out_a.push_back(std::move(out));
    }
    // B: batch i+1's ids travel while batch i does its backward.
    {
      KjtHolder kjt(batches[0][r], s.num_features, false);
      ASSERT_EQ(shardrec_embedding_input_dist_start(b, kjt.view(), nullptr), SHARDREC_OK);
    }
    EXPECT_EQ(shardrec_embedding_forward_distributed(b, nullptr, 0, nullptr), SHARDREC_EUSAGE);
    ASSERT_EQ(shardrec_embedding_input_dist_wait(b, nullptr), SHARDREC_OK);
    for (int step = 0; step < s.steps; ++step) {
      std::vector<float> out(out_size(step));
      ASSERT_EQ(shardrec_embedding_forward_distributed(b, out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_TRUE(BitEqual(out, out_a[step])) << "rank " << r << " step " << step;
      if (step + 1 < s.steps) {
        KjtHolder next(batches[step + 1][r], s.num_features, false);
        ASSERT_EQ(shardrec_embedding_input_dist_start(b, next.view(), nullptr), SHARDREC_OK);
        EXPECT_EQ(shardrec_embedding_input_dist_start(b, next.view(), nullptr), SHARDREC_EUSAGE);
      }
      ASSERT_EQ(
          shardrec_embedding_backward(b, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << shardrec_last_error();
      if (step + 1 < s.steps) {
        ASSERT_EQ(shardrec_embedding_input_dist_wait(b, nullptr), SHARDREC_OK);
      }
    }
    EXPECT_EQ(shardrec_embedding_input_dist_wait(b, nullptr), SHARDREC_EUSAGE);
    const auto snap_a = Snapshot(a, s);
    const auto snap_b = Snapshot(b, s);
    ASSERT_EQ(snap_a.size(), snap_b.size());
    for (size_t i = 0; i < snap_a.size(); ++i)
      EXPECT_TRUE(BitEqual(snap_a[i], snap_b[i])) << "rank " << r << " tensor " << i;
  });
}

INSTANTIATE_TEST_SUITE_P(Poolings, EmbeddingAsync,
                         ::testing::Values(SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN,
                                           SHARDREC_POOLING_NONE));

// The refusal tests' world: two ranks, one row-wise table set, two batches of 3 samples a rank.
Scenario RefusalScenario() {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.optimizer.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  s.steps = 2;
  s.batch_sizes = {3, 3};
  return s;
}

// A pipelined forward whose distribution failed is a failed forward: the backward after it is
// refused on every rank, and does not train the batch of the forward before it (which has had
// no backward yet) with the failed batch's gradient. Found by fuzz_vbe.
TEST(EmbeddingAsyncRefusal, FailedDistributionLeavesNoBatchToTrain) {
  const Scenario s = RefusalScenario();
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  PlanPtr plan = MakePlan(s);
  for (int bad_rank = 0; bad_rank < s.world; ++bad_rank) {
    SpawnRanks(s.world, [&](int r) {
      CollPtr c = CreateRank(s, plan.get(), r, s.seed);
      ASSERT_NE(c, nullptr);
      int64_t dim = 0;
      shardrec_embedding_output_dim(c.get(), &dim);
      const size_t len = static_cast<size_t>(batches[0][r].batch_size * dim);
      std::vector<float> out(len);
      KjtHolder first(batches[0][r], s.num_features, false);
      ASSERT_EQ(shardrec_embedding_forward(c.get(), first.view(), out.data(), len, nullptr),
                SHARDREC_OK);
      const auto before = Snapshot(c.get(), s);
      int64_t steps_before = -1;
      shardrec_embedding_num_steps(c.get(), &steps_before);
      // The next batch: the bad rank's names a feature count the collection does not have.
      KjtHolder next(batches[1][r], s.num_features, false);
      shardrec_kjt_view_t view = *next.view();
      if (r == bad_rank) view.num_features += 1;
      const shardrec_status_t start = shardrec_embedding_input_dist_start(c.get(), &view, nullptr);
      const shardrec_status_t wait =
          start == SHARDREC_OK ? shardrec_embedding_input_dist_wait(c.get(), nullptr) : start;
      EXPECT_NE(wait, SHARDREC_OK) << "rank " << r;
      std::vector<float> out2(static_cast<size_t>(batches[1][r].batch_size * dim));
      EXPECT_EQ(shardrec_embedding_forward_distributed(c.get(), out2.data(), out2.size(), nullptr),
                SHARDREC_EUSAGE);
      // A gradient of the first forward's size: it would fit the batch before, and must not
      // train it.
      const std::vector<float> grad(len, 0.5f);
      EXPECT_EQ(shardrec_embedding_backward(c.get(), grad.data(), grad.size(), nullptr),
                SHARDREC_EUSAGE)
          << "rank " << r;
      int64_t steps_after = -1;
      shardrec_embedding_num_steps(c.get(), &steps_after);
      EXPECT_EQ(steps_after, steps_before);
      const auto after = Snapshot(c.get(), s);
      ASSERT_EQ(after.size(), before.size());
      for (size_t i = 0; i < after.size(); ++i)
        EXPECT_TRUE(BitEqual(after[i], before[i])) << "rank " << r << " tensor " << i;
      // A good pipelined step then trains.
      ASSERT_EQ(shardrec_embedding_input_dist_start(c.get(), next.view(), nullptr), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_input_dist_wait(c.get(), nullptr), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_forward_distributed(c.get(), out2.data(), out2.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      const std::vector<float> grad2(out2.size(), 0.5f);
      ASSERT_EQ(shardrec_embedding_backward(c.get(), grad2.data(), grad2.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
    });
  }
}

// In TorchRec's pipelined order (forward_distributed(b), input_dist_start(b+1), backward(b)) a
// refused start of the next batch leaves batch b to train: its backward runs on every rank and
// trains exactly what it trains without the refused start (a second collection is the reference).
TEST(EmbeddingAsyncRefusal, FailedStartOfTheNextBatchLeavesTheBatchBeforeToTrain) {
  const Scenario s = RefusalScenario();
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  PlanPtr plan = MakePlan(s);
  for (int bad_rank = 0; bad_rank < s.world; ++bad_rank) {
    SpawnRanks(s.world, [&](int r) {
      CollPtr c = CreateRank(s, plan.get(), r, s.seed);
      CollPtr plain = CreateRank(s, plan.get(), r, s.seed);
      ASSERT_NE(c, nullptr);
      ASSERT_NE(plain, nullptr);
      int64_t dim = 0;
      shardrec_embedding_output_dim(c.get(), &dim);
      const size_t len = static_cast<size_t>(batches[0][r].batch_size * dim);
      const std::vector<float> grad(len, 0.5f);
      std::vector<float> out(len);
      KjtHolder first(batches[0][r], s.num_features, false);
      for (shardrec_embedding_t* coll : {c.get(), plain.get()})
        ASSERT_EQ(shardrec_embedding_forward(coll, first.view(), out.data(), len, nullptr),
                  SHARDREC_OK);
      KjtHolder next(batches[1][r], s.num_features, false);
      shardrec_kjt_view_t view = *next.view();
      if (r == bad_rank) view.num_features += 1;
      const shardrec_status_t start = shardrec_embedding_input_dist_start(c.get(), &view, nullptr);
      const shardrec_status_t wait =
          start == SHARDREC_OK ? shardrec_embedding_input_dist_wait(c.get(), nullptr) : start;
      EXPECT_EQ(wait, SHARDREC_EINVAL) << "rank " << r;
      for (shardrec_embedding_t* coll : {c.get(), plain.get()})
        ASSERT_EQ(shardrec_embedding_backward(coll, grad.data(), grad.size(), nullptr), SHARDREC_OK)
            << "rank " << r << ": " << shardrec_last_error();
      const auto got = Snapshot(c.get(), s);
      const auto want = Snapshot(plain.get(), s);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(BitEqual(got[i], want[i])) << "rank " << r << " tensor " << i;
      int64_t steps = -1;
      shardrec_embedding_num_steps(c.get(), &steps);
      EXPECT_EQ(steps, 1);
    });
  }
}

// Destroying a collection with a distribution in flight waits for it instead of crashing.
TEST(EmbeddingAsyncLifetime, DestroyWithDistributionInFlight) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  PlanPtr plan = MakePlan(s);
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(s.world, r), nullptr, nullptr),
              SHARDREC_OK);
    KjtHolder kjt(batches[0][r], s.num_features, false);
    ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjt.view(), nullptr), SHARDREC_OK);
    shardrec_embedding_destroy(c);
  });
}

}  // namespace
}  // namespace shardrec::testing
