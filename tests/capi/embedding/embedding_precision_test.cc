// fp16/bf16 weight storage with fp32 math: sharded training equals the unsharded reference with
// the same rounding, mixed-dtype collections, fp32 accessors, stochastic rounding and the 2D
// replica sync of 16-bit weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

const char* kOptNames[] = {"Sgd", "Adagrad", "RowWiseAdagrad", "Adam"};
const char* kDTypes[] = {"Fp32", "Fp16", "Bf16"};

// (world, dtype, optimizer, sharding type, pooling)
using LowParam = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>;

class EmbeddingLowPrecision : public ::testing::TestWithParam<LowParam> {};

TEST_P(EmbeddingLowPrecision, MatchesRoundedReference) {
  const auto [world, dtype, opt, type, pooling] = GetParam();
  Scenario s = StandardScenario(world, type, pooling);
  for (RefTable& t : s.tables) t.dtype = dtype;
  s.optimizer.type = opt;
  s.optimizer.lr = opt == 0 ? 0.1f : 0.02f;
  RunEquivalence(s);
}

std::string LowName(const ::testing::TestParamInfo<LowParam>& info) {
  const auto [world, dtype, opt, type, pooling] = info.param;
  return std::string("W") + std::to_string(world) + "_" + kDTypes[dtype] + "_" + kOptNames[opt] +
         "_" + kShardingTypeNames[type] + (pooling == SHARDREC_POOLING_SUM ? "_Sum" : "_Mean");
}

INSTANTIATE_TEST_SUITE_P(
    Types, EmbeddingLowPrecision,
    ::testing::Combine(::testing::Values(2, 4),
                       ::testing::Values(SHARDREC_DTYPE_FLOAT16, SHARDREC_DTYPE_BFLOAT16),
                       ::testing::Range(0, 4),
                       ::testing::Values(SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE,
                                         SHARDREC_SHARDING_COLUMN_WISE, SHARDREC_SHARDING_GRID),
                       ::testing::Values(SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN)),
    LowName);

// One fp32, one fp16 and one bf16 table in one plan.
Scenario MixedScenario(int32_t world, int32_t type, int32_t pooling) {
  Scenario s = StandardScenario(world, type, pooling);
  s.tables[0].dtype = SHARDREC_DTYPE_FLOAT32;
  s.tables[1].dtype = SHARDREC_DTYPE_FLOAT16;
  s.tables[2].dtype = SHARDREC_DTYPE_BFLOAT16;
  return s;
}

// (world, sharding type, optimizer, pooling)
using MixedParam = std::tuple<int32_t, int32_t, int32_t, int32_t>;

class EmbeddingMixedDTypes : public ::testing::TestWithParam<MixedParam> {};

TEST_P(EmbeddingMixedDTypes, MatchesRoundedReference) {
  const auto [world, type, opt, pooling] = GetParam();
  Scenario s = MixedScenario(world, type, pooling);
  s.optimizer.type = opt;
  s.optimizer.lr = 0.02f;
  s.weighted = true;
  RunEquivalence(s);
}

std::string MixedName(const ::testing::TestParamInfo<MixedParam>& info) {
  const auto [world, type, opt, pooling] = info.param;
  return std::string("W") + std::to_string(world) + "_" + kShardingTypeNames[type] + "_" +
         kOptNames[opt] + (pooling == SHARDREC_POOLING_SUM ? "_Sum" : "_None");
}

INSTANTIATE_TEST_SUITE_P(AllTypes, EmbeddingMixedDTypes,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Range(0, 7),
                                            ::testing::Values(SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD,
                                                              SHARDREC_OPTIMIZER_ADAM),
                                            ::testing::Values(SHARDREC_POOLING_SUM,
                                                              SHARDREC_POOLING_NONE)),
                         MixedName);

bool BitEqual(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(EmbeddingPrecision, InitialWeightsAreTheRoundedFp32Values) {
  for (int32_t type : {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_GRID}) {
    Scenario s = MixedScenario(4, type, SHARDREC_POOLING_MEAN);
    ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    SpawnRanks(s.world, [&](int r) {
      CollPtr c = CreateRank(s, plan.get(), r, s.seed);
      ASSERT_NE(c, nullptr);
      for (size_t t = 0; t < s.tables.size(); ++t) {
        const std::vector<float> w = GetWeights(c.get(), s.tables[t]);
        ASSERT_EQ(w.size(), ref.weights(t).size());
        size_t differ = 0;
        for (size_t i = 0; i < w.size(); ++i) differ += BitEqual(w[i], ref.weights(t)[i]) ? 0 : 1;
        EXPECT_EQ(differ, 0u) << "rank " << r << " table " << s.tables[t].name;
        // The 16-bit tables really are rounded (not merely fp32 values that happen to agree).
        if (s.tables[t].dtype != SHARDREC_DTYPE_FLOAT32) {
          std::string first;
          EXPECT_EQ(CountNotRepresentable(w, s.tables[t].dtype, &first), 0u) << first;
        }
      }
    });
  }
}

TEST(EmbeddingPrecision, AccessorsRoundOnSetAndWidenOnGet) {
  Scenario s = MixedScenario(2, SHARDREC_SHARDING_COLUMN_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  // Values that need rounding, exact ties, fp16 subnormals and values beyond fp16's range.
  std::vector<std::vector<float>> in(s.tables.size());
  for (size_t t = 0; t < s.tables.size(); ++t) {
    const size_t n = static_cast<size_t>(s.tables[t].rows) * s.tables[t].dim;
    for (size_t i = 0; i < n; ++i) {
      const float base = static_cast<float>(i % 97) / 97.0f - 0.5f;
      switch (i % 6) {
        case 0:
          in[t].push_back(base);
          break;
        case 1:
          in[t].push_back(1.0f + std::ldexp(1.0f, -11));  // fp16 tie: rounds to 1
          break;
        case 2:
          in[t].push_back(1.0f + 3.0f * std::ldexp(1.0f, -8));  // bf16 tie: up to even
          break;
        case 3:
          in[t].push_back(3.0e-6f * base);
          break;  // fp16 subnormal range
        case 4:
          in[t].push_back(i % 12 == 4 ? 70000.0f : -65519.0f);
          break;  // fp16 inf / max
        default:
          in[t].push_back(1e30f * base);
          break;  // finite in bf16 only
      }
    }
  }
  SpawnRanks(s.world, [&](int r) {
    CollPtr c = CreateRank(s, plan.get(), r, s.seed);
    ASSERT_NE(c, nullptr);
    for (size_t t = 0; t < s.tables.size(); ++t) {
      const RefTable& rt = s.tables[t];
      ASSERT_EQ(
          shardrec_embedding_set_weights(c.get(), rt.name.c_str(), in[t].data(), in[t].size()),
          SHARDREC_OK)
          << shardrec_last_error();
      const std::vector<float> got = GetWeights(c.get(), rt);
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const float want = RoundToStorage(in[t][i], rt.dtype);
        if (!BitEqual(got[i], want) && differ++ == 0)
          ADD_FAILURE() << "table " << rt.name << " element " << i << ": set " << in[t][i]
                        << ", got " << got[i] << ", expected " << want;
      }
      EXPECT_EQ(differ, 0u) << "table " << rt.name;
    }
    // Sanity of the expectations themselves: the fp16 table saw infinities and a tie.
    const std::vector<float> h = GetWeights(c.get(), s.tables[1]);
    EXPECT_TRUE(std::isinf(h[4]));
    EXPECT_EQ(h[1], 1.0f);
    EXPECT_EQ(GetWeights(c.get(), s.tables[2])[2], 1.0f + 4.0f * std::ldexp(1.0f, -8));
  });
}

// One table of 16 x 16 weights starting at 1.0; every step each rank looks up every row once and
// sends a gradient of ones, so each element moves by -lr per step (the sum over 2 ranks / 2).
// Returns the weights after `steps` SGD steps, read on every rank (data-parallel tables: each
// rank's own copy).
std::vector<std::vector<float>> TrainSmallSteps(int32_t dtype, int32_t type, bool stochastic,
                                                uint64_t seed, float lr, int32_t steps) {
  Scenario s;
  s.world = 2;
  s.num_features = 1;
  s.tables = {RefTable{"small", 16, 16, SHARDREC_POOLING_SUM, {0}, 2, 1.0f, 1.0f, dtype}};
  s.sharding = {type};
  s.optimizer.type = SHARDREC_OPTIMIZER_SGD;
  s.optimizer.lr = lr;
  s.optimizer.stochastic_rounding = stochastic;
  PlanPtr plan = MakePlan(s);
  EXPECT_NE(plan, nullptr);
  RefBatch b;
  b.batch_size = 16;
  b.lengths.assign(16, 1);
  for (int64_t i = 0; i < 16; ++i) b.ids.push_back(i);
  const std::vector<float> grad(16 * 16, 1.0f);
  std::vector<std::vector<float>> result(s.world);
  SpawnRanks(s.world, [&](int r) {
    CollPtr c = CreateRank(s, plan.get(), r, seed);
    ASSERT_NE(c, nullptr);
    KjtHolder kjt(b, 1, false);
    std::vector<float> out(16 * 16);
    for (int32_t step = 0; step < steps; ++step) {
      ASSERT_EQ(shardrec_embedding_forward(c.get(), kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_backward(c.get(), grad.data(), grad.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
    }
    result[r] = GetWeights(c.get(), s.tables[0]);
  });
  return result;
}

double Mean(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

TEST(EmbeddingPrecision, StochasticRoundingIsDeterministicAndTracksFp32) {
  constexpr int32_t kSteps = 40;
  for (int32_t dtype : {SHARDREC_DTYPE_FLOAT16, SHARDREC_DTYPE_BFLOAT16}) {
    for (int32_t type : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_DATA_PARALLEL}) {
      SCOPED_TRACE(std::string(kDTypes[dtype]) + " " + kShardingTypeNames[type]);
      // About a quarter of an ulp just below 1.0 per step: nearest-even rounding never moves.
      const float lr = dtype == SHARDREC_DTYPE_FLOAT16 ? 1.2e-4f : 1e-3f;
      float fp32 = 1.0f;
      for (int32_t k = 0; k < kSteps; ++k) fp32 -= lr;
      const auto nearest = TrainSmallSteps(dtype, type, false, 7, lr, kSteps);
      for (float w : nearest[0]) ASSERT_EQ(w, 1.0f) << "nearest-even rounding moved a weight";
      const auto a = TrainSmallSteps(dtype, type, true, 7, lr, kSteps);
      const auto b = TrainSmallSteps(dtype, type, true, 7, lr, kSteps);
      const auto other = TrainSmallSteps(dtype, type, true, 8, lr, kSteps);
      // Deterministic for a seed, on every rank (data-parallel copies stay identical).
      for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(a[r].size(), b[r].size());
        EXPECT_EQ(std::memcmp(a[r].data(), b[r].data(), sizeof(float) * a[r].size()), 0);
        EXPECT_EQ(std::memcmp(a[r].data(), a[0].data(), sizeof(float) * a[r].size()), 0);
      }
      EXPECT_NE(std::memcmp(a[0].data(), other[0].data(), sizeof(float) * a[0].size()), 0)
          << "another seed should draw other rounding bits";
      std::string first;
      EXPECT_EQ(CountNotRepresentable(a[0], dtype, &first), 0u) << first;
      // Unbiased: the mean of 256 elements follows the fp32 trajectory (per-element error is
      // a sum of kSteps zero-mean roundings of at most one ulp each).
      EXPECT_NEAR(Mean(a[0]), fp32, 0.01) << "fp32 reaches " << fp32;
      EXPECT_NEAR(Mean(other[0]), fp32, 0.01);
    }
  }
}

// 2D: world 4 as 2 replicas x 2-way sharding, fp32 + fp16 + bf16 tables. After training the
// replicas on different data, a sync leaves both replicas with the same weights, equal to the
// average of their weights rounded to the storage type; weights-only mode syncs 16-bit weights
// too and leaves optimizer state per replica.
TEST(EmbeddingPrecision, ReplicaSyncAveragesSixteenBitWeights) {
  constexpr int32_t kWorld = 4;
  for (int32_t mode : {SHARDREC_SYNC_WEIGHTS_AND_STATE, SHARDREC_SYNC_WEIGHTS_ONLY}) {
    SCOPED_TRACE(mode == SHARDREC_SYNC_WEIGHTS_ONLY ? "weights only" : "weights and state");
    Scenario s = MixedScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
    s.optimizer.type = SHARDREC_OPTIMIZER_ADAM;
    s.optimizer.lr = 0.05f;
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
    std::vector<std::vector<std::vector<RefBatch>>> batches;  // [replica][step][plan rank]
    std::vector<std::vector<std::vector<std::vector<float>>>> grads;
    for (uint64_t g = 0; g < 2; ++g) {
      Scenario sg = s;
      sg.data_seed = 5 + g;
      batches.push_back(MakeBatches(sg, ref));
      grads.push_back(MakeGrads(sg, batches.back(), ref.output_dim()));
    }
    std::vector<std::vector<std::vector<float>>> before(kWorld), after(kWorld);
    std::vector<int32_t> partner(kWorld, -1);
    SpawnRanks(kWorld, [&](int r) {
      shardrec_mesh_options_t mo;
      shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
      mo.sharding_group_size = 2;
      mo.sync_mode = mode;
      shardrec_mesh_t* mesh = nullptr;
      ASSERT_EQ(shardrec_mesh_create(&mesh, GroupComm(kWorld, r), &mo), SHARDREC_OK)
          << shardrec_last_error();
      std::unique_ptr<shardrec_mesh_t, void (*)(shardrec_mesh_t*)> mesh_guard(
          mesh, shardrec_mesh_destroy);
      int32_t group = 0, prank = 0;
      ASSERT_EQ(shardrec_mesh_coords(mesh, &group, &prank, nullptr, nullptr), SHARDREC_OK);
      const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      o.seed = s.seed;
      shardrec_embedding_t* c = nullptr;
      ASSERT_EQ(shardrec_mesh_embedding_create(&c, mesh, plan.get(), &opt, &o), SHARDREC_OK)
          << shardrec_last_error();
      CollPtr coll(c);
      for (int32_t step = 0; step < s.steps; ++step) {
        KjtHolder kjt(batches[group][step][prank], s.num_features, false);
        std::vector<float> out(static_cast<size_t>(batches[group][step][prank].batch_size) *
                               ref.output_dim());
        ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                  SHARDREC_OK)
            << shardrec_last_error();
        const auto& g = grads[group][step][prank];
        ASSERT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_OK)
            << shardrec_last_error();
      }
      before[r] = Snapshot(c, s);
      ASSERT_EQ(shardrec_mesh_sync(mesh, c, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
          << shardrec_last_error();
      after[r] = Snapshot(c, s);
      // The other member of this rank's replica group holds the same shards: in the default
      // layout plan rank p of sharding group g is global rank 2p + g.
      partner[r] = 2 * prank + (1 - group);
    });
    const size_t per_table = 3;  // weights, momentum1, momentum2 (Adam)
    for (int32_t r = 0; r < kWorld; ++r) {
      const int32_t p = partner[r];
      ASSERT_GE(p, 0);
      ASSERT_EQ(after[r].size(), s.tables.size() * per_table);
      for (size_t t = 0; t < s.tables.size(); ++t) {
        const RefTable& rt = s.tables[t];
        const auto& w = after[r][t * per_table];
        // Both replicas hold the same weights, the rounded mean of what they held before.
        EXPECT_EQ(std::memcmp(w.data(), after[p][t * per_table].data(), sizeof(float) * w.size()),
                  0)
            << "rank " << r << " table " << rt.name;
        std::vector<float> mean(w.size());
        for (size_t i = 0; i < w.size(); ++i)
          mean[i] = RoundToStorage(
              0.5f * (before[r][t * per_table][i] + before[p][t * per_table][i]), rt.dtype);
        std::string first;
        EXPECT_EQ(CountMismatches(w, mean, rt.dtype == 0 ? 1e-6f : 1e-2f, 1e-6f, &first), 0u)
            << "rank " << r << " table " << rt.name << ": " << first;
        EXPECT_EQ(CountNotRepresentable(w, rt.dtype, &first), 0u) << first;
        // The replicas trained on different data, so the sync did change something.
        EXPECT_NE(before[r][t * per_table], before[p][t * per_table]) << rt.name;
        for (size_t k = 1; k < per_table; ++k) {
          if (mode == SHARDREC_SYNC_WEIGHTS_ONLY) {
            EXPECT_EQ(after[r][t * per_table + k], before[r][t * per_table + k]);
          } else {
            EXPECT_EQ(after[r][t * per_table + k], after[p][t * per_table + k]);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace shardrec::testing
