// Edge cases of the sharded collection against the unsharded reference: empty and uneven
// batches, tiny tables, int32 ids, mixed sharding types, duplicate ids, init kinds, weight
// decay, learning-rate changes and the CLAMP / SKIP bounds policies.
#include <gtest/gtest.h>

#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kDP = SHARDREC_SHARDING_DATA_PARALLEL, kTW = SHARDREC_SHARDING_TABLE_WISE,
                  kRW = SHARDREC_SHARDING_ROW_WISE, kCW = SHARDREC_SHARDING_COLUMN_WISE,
                  kTWRW = SHARDREC_SHARDING_TABLE_ROW_WISE,
                  kTWCW = SHARDREC_SHARDING_TABLE_COLUMN_WISE, kGRID = SHARDREC_SHARDING_GRID;

class EmbeddingEdge : public ::testing::TestWithParam<int32_t> {};

TEST_P(EmbeddingEdge, ZeroBatchOnSomeRanks) {
  Scenario s = StandardScenario(4, GetParam(), SHARDREC_POOLING_MEAN);
  s.batch_sizes = {3, 0, 5, 0};
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAGRAD;
  RunEquivalence(s);
}

TEST_P(EmbeddingEdge, DifferentBatchSizesPerRank) {
  Scenario s = StandardScenario(2, GetParam(), SHARDREC_POOLING_SUM);
  s.batch_sizes = {6, 1};
  s.weighted = true;
  s.optimizer.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  RunEquivalence(s);
}

TEST_P(EmbeddingEdge, Int32Ids) {
  Scenario s = StandardScenario(4, GetParam(), SHARDREC_POOLING_SUM);
  s.int32_ids = true;
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAM;
  RunEquivalence(s);
}

TEST_P(EmbeddingEdge, AllIdsOfABagAreTheSameRow) {
  Scenario s = StandardScenario(2, GetParam(), SHARDREC_POOLING_MEAN);
  s.tables = {RefTable{"tiny", 2, 8, SHARDREC_POOLING_MEAN, {0, 1}, 0, 0, 0}};
  s.num_features = 2;
  s.sharding = {GetParam()};
  s.max_bag = 6;
  s.optimizer.type = SHARDREC_OPTIMIZER_LAMB;
  RunEquivalence(s);
}

std::string TypeName(const ::testing::TestParamInfo<int32_t>& info) {
  static const char* const kNames[] = {"DP", "TW", "RW", "CW", "TWRW", "TWCW", "GRID"};
  return kNames[info.param];
}

INSTANTIATE_TEST_SUITE_P(AllTypes, EmbeddingEdge, ::testing::Range(0, 7), TypeName);

TEST(EmbeddingEdgeCases, FewerRowsThanRanksRowWise) {
  Scenario s = StandardScenario(4, kRW, SHARDREC_POOLING_SUM);
  s.tables = {RefTable{"three", 3, 4, SHARDREC_POOLING_SUM, {0}, 0, 0, 0},
              RefTable{"five", 5, 8, SHARDREC_POOLING_MEAN, {1}, 0, 0, 0}};
  s.num_features = 2;
  s.sharding = {kRW, kRW};
  s.optimizer.type = SHARDREC_OPTIMIZER_PARTIAL_ROWWISE_ADAM;
  RunEquivalence(s);
}

TEST(EmbeddingEdgeCases, MixedShardingTypesInOneCollection) {
  Scenario s = StandardScenario(4, kTW, SHARDREC_POOLING_MEAN);
  s.tables.push_back(RefTable{"t3", 17, 8, SHARDREC_POOLING_SUM, {4}, 0, 0, 0});
  s.tables.push_back(RefTable{"t4", 9, 12, SHARDREC_POOLING_MEAN, {5}, 0, 0, 0});
  s.tables.push_back(RefTable{"t5", 31, 8, SHARDREC_POOLING_SUM, {6}, 0, 0, 0});
  s.num_features = 7;
  s.sharding = {kDP, kRW, kCW, kTWRW, kTWCW, kGRID};
  for (int32_t opt : {SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD, SHARDREC_OPTIMIZER_LAMB}) {
    s.optimizer.type = opt;
    s.weighted = opt == SHARDREC_OPTIMIZER_LAMB;
    RunEquivalence(s);
  }
}

// Feature f0 feeds t0 and t3 (output "f0@t0" then "f0@t3"), and t3 is also read by f3.
TEST(EmbeddingEdgeCases, FeatureFeedingTwoTables) {
  Scenario s = StandardScenario(4, kTW, SHARDREC_POOLING_MEAN);
  s.tables.push_back(RefTable{"t3", 7, 4, SHARDREC_POOLING_MEAN, {0, 3}, 0, 0, 0});
  s.sharding = {kRW, kCW, kDP, kGRID};
  s.weighted = true;
  s.optimizer.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  RunEquivalence(s);
}

TEST(EmbeddingEdgeCases, MixedShardingTypesSequence) {
  Scenario s = StandardScenario(4, kTW, SHARDREC_POOLING_NONE);
  s.tables.push_back(RefTable{"t3", 17, 8, SHARDREC_POOLING_NONE, {4}, 0, 0, 0});
  s.num_features = 5;
  s.sharding = {kDP, kRW, kCW, kGRID};
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAM;
  RunEquivalence(s);
}

TEST(EmbeddingEdgeCases, InitKinds) {
  Scenario s = StandardScenario(2, kRW, SHARDREC_POOLING_SUM);
  s.tables[0].init_kind = SHARDREC_INIT_UNIFORM;
  s.tables[0].init_low = -0.5f;
  s.tables[0].init_high = 0.25f;
  s.tables[1].init_kind = SHARDREC_INIT_CONSTANT;
  s.tables[1].init_low = 0.125f;
  s.sharding = {kRW, kCW, kTW};
  s.optimizer.type = SHARDREC_OPTIMIZER_LAMB;
  RunEquivalence(s);
}

TEST(EmbeddingEdgeCases, WeightDecayModes) {
  Scenario s = StandardScenario(2, kTW, SHARDREC_POOLING_SUM);
  s.sharding = {kDP, kRW, kCW};
  for (int32_t opt = 0; opt < 6; ++opt) {
    for (int32_t mode : {SHARDREC_WEIGHT_DECAY_L2, SHARDREC_WEIGHT_DECAY_DECOUPLED}) {
      s.optimizer.type = opt;
      s.optimizer.weight_decay = 0.05f;
      s.optimizer.weight_decay_mode = mode;
      SCOPED_TRACE("optimizer " + std::to_string(opt) + " decay mode " + std::to_string(mode));
      RunEquivalence(s);
    }
  }
}

// The thread count changes how a backward schedules its shards (one at a time with every
// thread, or several side by side on one thread each, largest first), never the bits: eight
// tables of mixed sharding types (fused shards, and column shards whose row statistics are
// exchanged) trained with 1, 2 and 3 threads per rank end bit-identical, and equal to the
// reference, at world 1 and 2.
TEST(EmbeddingEdgeCases, ThreadCountsGiveTheSameBits) {
  for (int32_t world : {1, 2}) {
    Scenario s;
    s.world = world;
    s.ranks_per_node = world;
    s.num_features = 8;
    for (int32_t t = 0; t < 8; ++t)
      s.tables.push_back(RefTable{"t" + std::to_string(t),
                                  20 + 7 * t,
                                  8 + 4 * (t % 3),
                                  t % 2 == 0 ? SHARDREC_POOLING_SUM : SHARDREC_POOLING_MEAN,
                                  {t},
                                  0,
                                  0,
                                  0});
    s.sharding = {kTW, kTW, kCW, kTW, kRW, kTW, kTWCW, kTW};
    s.optimizer.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
    s.weighted = true;
    s.batch_sizes.assign(world, 24);
    s.max_bag = 6;
    std::vector<std::vector<std::vector<float>>> first, snaps;
    for (int32_t threads : {1, 2, 3}) {
      SCOPED_TRACE("world " + std::to_string(world) + " threads " + std::to_string(threads));
      s.num_threads = threads;
      RunEquivalence(s, threads == 1 ? &first : &snaps);
      if (threads > 1) {
        EXPECT_EQ(snaps, first);
      }
    }
  }
}

// A learning-rate schedule: the reference and the collection change the rate between steps.
TEST(EmbeddingEdgeCases, SetLearningRateBetweenSteps) {
  Scenario s = StandardScenario(2, kCW, SHARDREC_POOLING_SUM);
  s.sharding = {kCW, kRW, kDP};
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAGRAD;
  s.optimizer.lr = 0.1f;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  const float lrs[] = {0.1f, 0.02f, 0.3f};
  for (int32_t step = 0; step < s.steps; ++step) {
    ref.set_lr(lrs[step]);
    ref.Backward(batches[step], grads[step]);
  }
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(s.world, r), &opt, &o),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    for (int32_t step = 0; step < s.steps; ++step) {
      ASSERT_EQ(shardrec_embedding_set_learning_rate(c, lrs[step]), SHARDREC_OK);
      KjtHolder kjt(batches[step][r], s.num_features, false);
      std::vector<float> out(static_cast<size_t>(batches[step][r].batch_size * dim));
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK);
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK);
    }
    EXPECT_EQ(shardrec_embedding_set_learning_rate(c, -1.0f), SHARDREC_EINVAL);
    for (size_t t = 0; t < s.tables.size(); ++t) {
      std::vector<float> w(ref.weights(t).size());
      ASSERT_EQ(shardrec_embedding_get_weights(c, s.tables[t].name.c_str(), w.data(), w.size()),
                SHARDREC_OK);
      std::string first;
      EXPECT_EQ(CountMismatches(w, ref.weights(t), 1e-5f, 1e-6f, &first), 0u) << first;
    }
  });
}

// CLAMP replaces an out-of-range id by row 0 and SKIP drops it; the reference sees the batch
// already rewritten that way.
TEST(EmbeddingEdgeCases, BoundsPoliciesClampAndSkip) {
  for (int32_t policy : {SHARDREC_BOUNDS_CLAMP, SHARDREC_BOUNDS_SKIP}) {
    Scenario s = StandardScenario(2, kRW, SHARDREC_POOLING_MEAN);
    s.sharding = {kRW, kCW, kDP};
    s.weighted = true;
    s.steps = 1;
    s.optimizer.type = SHARDREC_OPTIMIZER_ADAGRAD;
    ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
    auto batches = MakeBatches(s, ref);
    // Corrupt every third id (-7 or 1000: out of range of every table); the sharded model gets
    // them, the reference the batch rewritten as the policy says.
    auto bad = batches;
    for (int32_t r = 0; r < s.world; ++r) {
      RefBatch& b = bad[0][r];
      for (size_t i = 0; i < b.ids.size(); i += 3) b.ids[i] = (i % 2) ? -7 : 1000;
      RefBatch fixed;
      fixed.batch_size = b.batch_size;
      size_t pos = 0;
      for (int32_t len : b.lengths) {
        int32_t kept = 0;
        for (int32_t k = 0; k < len; ++k, ++pos) {
          const bool oob = b.ids[pos] < 0 || b.ids[pos] >= 1000;
          if (oob && policy == SHARDREC_BOUNDS_SKIP) continue;
          fixed.ids.push_back(oob ? 0 : b.ids[pos]);
          fixed.weights.push_back(b.weights[pos]);
          ++kept;
        }
        fixed.lengths.push_back(kept);
      }
      batches[0][r] = fixed;
    }
    const auto grads = MakeGrads(s, batches, ref.output_dim());
    std::vector<std::vector<float>> ref_out;
    for (int32_t r = 0; r < s.world; ++r) ref_out.push_back(ref.Forward(batches[0][r]));
    ref.Backward(batches[0], grads[0]);
    PlanPtr plan = MakePlan(s);
    const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
    SpawnRanks(s.world, [&](int r) {
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      o.seed = s.seed;
      o.bounds_policy = policy;
      shardrec_embedding_t* c = nullptr;
      ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(s.world, r), &opt, &o),
                SHARDREC_OK)
          << shardrec_last_error();
      CollPtr coll(c);
      KjtHolder kjt(bad[0][r], s.num_features, false);
      std::vector<float> out(ref_out[r].size());
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      std::string first;
      EXPECT_EQ(CountMismatches(out, ref_out[r], 1e-5f, 1e-6f, &first), 0u)
          << "policy " << policy << ": " << first;
      ASSERT_EQ(shardrec_embedding_backward(c, grads[0][r].data(), grads[0][r].size(), nullptr),
                SHARDREC_OK);
      for (size_t t = 0; t < s.tables.size(); ++t) {
        std::vector<float> w(ref.weights(t).size());
        ASSERT_EQ(shardrec_embedding_get_weights(c, s.tables[t].name.c_str(), w.data(), w.size()),
                  SHARDREC_OK);
        EXPECT_EQ(CountMismatches(w, ref.weights(t), 1e-5f, 1e-6f, &first), 0u)
            << "policy " << policy << " table " << t << ": " << first;
      }
    });
  }
}

}  // namespace
}  // namespace shardrec::testing
