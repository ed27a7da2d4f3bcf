// Quantized communication (shardrec_embedding_options_t.forward/backward_comm_encoding) through
// the public C API: fp16/bf16 runs against the exact fp32 run of the same collection, within the
// per-element bounds documented in shardrec/embedding_options.h (computed here from the weights,
// batches and gradients; FP8's block floor from the largest magnitude that travels); forward and
// backward encodings chosen independently; the default (and every pre-version-3 caller)
// bit-identical to explicit fp32; fp16 saturation; misuse rejected.
#include <gtest/gtest.h>

#include <algorithm>
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

const char* kTypeNames[] = {"DP", "TW", "RW", "CW"};

// Per-element relative bound of one rounding (embedding.h).
double UnitRoundoff(int32_t encoding) {
  return encoding == SHARDREC_COMM_ENCODING_FP16       ? std::ldexp(1.0, -11)
         : encoding == SHARDREC_COMM_ENCODING_BF16     ? std::ldexp(1.0, -8)
         : encoding == SHARDREC_COMM_ENCODING_FP8_E4M3 ? std::ldexp(1.0, -4)
         : encoding == SHARDREC_COMM_ENCODING_FP8_E5M2 ? std::ldexp(1.0, -3)
                                                       : 0.0;
}
// FP8's absolute term per rounding, as a fraction f of the largest magnitude in its block.
double BlockFloor(int32_t encoding) {
  return encoding == SHARDREC_COMM_ENCODING_FP8_E4M3   ? std::ldexp(1.0, -17)
         : encoding == SHARDREC_COMM_ENCODING_FP8_E5M2 ? std::ldexp(1.0, -31)
                                                       : 0.0;
}
const char* EncodingSuffix(int32_t encoding) {
  return encoding == SHARDREC_COMM_ENCODING_FP16       ? "_Fp16"
         : encoding == SHARDREC_COMM_ENCODING_BF16     ? "_Bf16"
         : encoding == SHARDREC_COMM_ENCODING_FP8_E4M3 ? "_Fp8E4M3"
                                                       : "_Fp8E5M2";
}
// FP16's absolute error below its normal range (half its subnormal step).
double AbsoluteFloor(int32_t encoding) {
  return encoding == SHARDREC_COMM_ENCODING_FP16 ? std::ldexp(1.0, -25) : 0.0;
}

// What one run of one step gives back, per rank.
struct RunResult {
  std::vector<std::vector<float>> initial;             // per table, full weights before the step
  std::vector<std::vector<float>> out;                 // per rank, the forward output
  std::vector<std::vector<std::vector<float>>> after;  // per rank, per table, weights after
  int64_t output_dim = 0;
  size_t num_outputs = 0;
};

// One forward + backward of batches[0]/grads[0]. `version` is the options struct version the
// caller was built with (2: no encoding fields); `null_options` passes NULL.
RunResult RunStep(const Scenario& s, shardrec_plan_t* plan,
                  const std::vector<std::vector<RefBatch>>& batches,
                  const std::vector<std::vector<std::vector<float>>>& grads, int32_t fwd,
                  int32_t bwd, uint32_t version = SHARDREC_EMBEDDING_OPTIONS_VERSION,
                  bool null_options = false) {
  RunResult res;
  res.out.resize(s.world);
  res.after.resize(s.world);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_options_t o;
    ASSERT_EQ(shardrec_embedding_options_init(&o, version), SHARDREC_OK);
    o.seed = s.seed;
    if (version >= 3) {
      o.forward_comm_encoding = fwd;
      o.backward_comm_encoding = bwd;
    }
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan, GroupComm(s.world, r), &opt,
                                        null_options ? nullptr : &o),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    CollPtr coll(c);
    if (r == 0) {
      shardrec_embedding_output_dim(c, &res.output_dim);
      shardrec_embedding_num_outputs(c, &res.num_outputs);
    }
    for (size_t t = 0; t < s.tables.size(); ++t) {
      std::vector<float> w(static_cast<size_t>(s.tables[t].rows) * s.tables[t].dim);
      ASSERT_EQ(shardrec_embedding_get_weights(c, s.tables[t].name.c_str(), w.data(), w.size()),
                SHARDREC_OK);
      if (r == 0) res.initial.push_back(std::move(w));
    }
    KjtHolder kjt(batches[0][r], s.num_features, false);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    const bool seq = s.tables[0].pooling == SHARDREC_POOLING_NONE;
    const size_t rows =
        seq ? batches[0][r].ids.size() : static_cast<size_t>(batches[0][r].batch_size);
    std::vector<float> out(rows * static_cast<size_t>(dim));
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    res.out[r] = std::move(out);
    ASSERT_EQ(shardrec_embedding_backward(c, grads[0][r].data(), grads[0][r].size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    // The embedding collectives' time is part of the collective time (timings version 2).
    shardrec_step_timings_t tm;
    ASSERT_EQ(shardrec_step_timings_init(&tm, SHARDREC_STEP_TIMINGS_VERSION), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_step_timings(c, &tm), SHARDREC_OK);
    if (s.world > 1) {
      EXPECT_GT(tm.embedding_comm_seconds, 0.0);
    }
    EXPECT_LE(tm.embedding_comm_seconds, tm.collective_seconds);
    for (const RefTable& t : s.tables) {
      std::vector<float> w(static_cast<size_t>(t.rows) * t.dim);
      ASSERT_EQ(shardrec_embedding_get_weights(c, t.name.c_str(), w.data(), w.size()), SHARDREC_OK);
      res.after[r].push_back(std::move(w));
    }
  });
  return res;
}

// One id occurrence of a rank's batch: the output row it lands in, its table, row, the column
// of its block, and weight / divisor.
struct Occ {
  size_t out_row;
  size_t table;
  int64_t row;
  int64_t col;
  int32_t dim;
  double scale;
};

std::vector<Occ> Occurrences(const Scenario& s, const RefBatch& b) {
  // Output blocks: for each feature, each table reading it (table order).
  std::vector<Occ> occ;
  const bool seq = s.tables[0].pooling == SHARDREC_POOLING_NONE;
  const int64_t B = b.batch_size;
  std::vector<int64_t> start(static_cast<size_t>(s.num_features * B) + 1, 0);
  for (size_t k = 0; k < b.lengths.size(); ++k) start[k + 1] = start[k] + b.lengths[k];
  int64_t col = 0;
  for (int32_t f = 0; f < s.num_features; ++f) {
    for (size_t t = 0; t < s.tables.size(); ++t) {
      const RefTable& rt = s.tables[t];
      bool reads = false;
      for (int32_t g : rt.features) reads = reads || g == f;
      if (!reads) continue;
      for (int64_t i = 0; i < B; ++i) {
        const int64_t k = f * B + i;
        double div = 1.0;
        if (rt.pooling == SHARDREC_POOLING_MEAN) {
          div = 0.0;
          for (int64_t j = start[k]; j < start[k + 1]; ++j)
            div += b.weights.empty() ? 1.0 : b.weights[j];
        }
        for (int64_t j = start[k]; j < start[k + 1]; ++j) {
          const double w = b.weights.empty() ? 1.0 : b.weights[j];
          occ.push_back({seq ? static_cast<size_t>(j) : static_cast<size_t>(i), t, b.ids[j],
                         seq ? 0 : col, rt.dim, div != 0.0 ? w / div : 0.0});
        }
      }
      if (!seq) col += rt.dim;
    }
  }
  return occ;
}

// Checks `got` against `exact` element-wise within u * terms + floor * n + block_floor + fp32
// slack; returns the number of elements that differ at all (the encoding must actually be in
// effect).
size_t ExpectWithin(const std::vector<float>& got, const std::vector<float>& exact,
                    const std::vector<double>& terms, const std::vector<double>& count, double u,
                    double floor, double base_slack, const std::string& what,
                    double block_floor = 0.0) {
  size_t differ = 0, bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - exact[i]);
    if (got[i] != exact[i]) ++differ;
    // fp32 rounding of the arithmetic after the wire, the same in both runs up to the perturbed
    // inputs: a few ulps of the magnitudes involved.
    const double slack = std::ldexp(1.0, -21) * (terms[i] + std::fabs(exact[i]) + base_slack);
    const double bound = u * terms[i] + floor * count[i] + block_floor * count[i] + slack;
    if (!(err <= bound) && bad++ == 0)
      ADD_FAILURE() << what << " element " << i << ": |" << got[i] << " - " << exact[i]
                    << "| = " << err << " exceeds the documented bound " << bound;
  }
  EXPECT_EQ(bad, 0u) << what;
  return differ;
}

// (world, sharding type, encoding)
using QParam = std::tuple<int32_t, int32_t, int32_t>;
class EmbeddingQComms : public ::testing::TestWithParam<QParam> {};

Scenario QScenario(int32_t world, int32_t type) {
  // World 3 covers MEAN with weighted bags; world 2 plain SUM.
  Scenario s =
      StandardScenario(world, type, world == 3 ? SHARDREC_POOLING_MEAN : SHARDREC_POOLING_SUM);
  s.weighted = world == 3;
  s.optimizer.type = SHARDREC_OPTIMIZER_SGD;
  s.optimizer.lr = 0.5f;
  s.steps = 1;
  s.max_bag = 5;
  s.batch_sizes.assign(world, 6);
  return s;
}

// Outputs and post-step weights of an encoded run stay within the documented bounds of the
// exact run (SGD: a weight moves by lr times the gradient error).
void CheckAgainstExact(const Scenario& s, int32_t fwd, int32_t bwd) {
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const RunResult exact = RunStep(s, plan.get(), batches, grads, SHARDREC_COMM_ENCODING_FP32,
                                  SHARDREC_COMM_ENCODING_FP32);
  const RunResult enc = RunStep(s, plan.get(), batches, grads, fwd, bwd);
  ASSERT_EQ(exact.out.size(), enc.out.size());
  ASSERT_EQ(exact.initial.size(), s.tables.size());
  const bool dp = s.sharding[0] == SHARDREC_SHARDING_DATA_PARALLEL;
  const int64_t D = exact.output_dim;
  // Forward: u * sum over the bag of |weight * row element| / divisor per output element.
  size_t fwd_differ = 0;
  std::vector<std::vector<double>> gterms(s.tables.size()), gcount(s.tables.size());
  for (size_t t = 0; t < s.tables.size(); ++t) {
    gterms[t].assign(exact.initial[t].size(), 0.0);
    gcount[t].assign(exact.initial[t].size(), 0.0);
  }
  // FP8's floor: f times the largest magnitude any travelling value may have (a partial sum is
  // at most its element's terms; an occurrence's gradient at most W times gterms).
  double max_terms = 0.0;
  for (int32_t r = 0; r < s.world; ++r) {
    std::vector<double> terms(exact.out[r].size(), 0.0);
    for (const Occ& o : Occurrences(s, batches[0][r]))
      for (int32_t c = 0; c < o.dim; ++c)
        terms[o.out_row * D + o.col + c] +=
            std::fabs(o.scale * exact.initial[o.table][o.row * o.dim + c]);
    for (double t : terms) max_terms = std::max(max_terms, t);
  }
  for (int32_t r = 0; r < s.world; ++r) {
    std::vector<double> terms(exact.out[r].size(), 0.0), count(exact.out[r].size(), 0.0);
    for (const Occ& o : Occurrences(s, batches[0][r])) {
      const std::vector<float>& w = exact.initial[o.table];
      for (int32_t c = 0; c < o.dim; ++c) {
        const size_t at = o.out_row * D + o.col + c;
        terms[at] += std::fabs(o.scale * w[o.row * o.dim + c]);
        count[at] += 1.0;
        // Backward: each occurrence's gradient, gathered per table element (divided by W).
        gterms[o.table][o.row * o.dim + c] +=
            std::fabs(o.scale * grads[0][r][at]) / static_cast<double>(s.world);
        gcount[o.table][o.row * o.dim + c] += 1.0;
      }
    }
    if (dp) {
      // Data-parallel tables are looked up locally: nothing crosses ranks in forward.
      EXPECT_EQ(std::memcmp(enc.out[r].data(), exact.out[r].data(), 4 * exact.out[r].size()), 0)
          << "rank " << r;
      continue;
    }
    fwd_differ +=
        ExpectWithin(enc.out[r], exact.out[r], terms, count, UnitRoundoff(fwd), AbsoluteFloor(fwd),
                     0.0, "rank " + std::to_string(r) + " output", BlockFloor(fwd) * max_terms);
  }
  if (fwd != SHARDREC_COMM_ENCODING_FP32 && !dp) {
    EXPECT_GT(fwd_differ, 0u) << "the forward encoding changed nothing";
  }
  if (fwd == SHARDREC_COMM_ENCODING_FP32) {
    EXPECT_EQ(fwd_differ, 0u) << "an exact forward differs from the exact run";
  }
  // Backward (SGD): lr * u_eff * gradient magnitudes; DP rounds twice.
  const double u = UnitRoundoff(bwd);
  const double u_eff = dp ? 2 * u + u * u : u;
  const double lr = s.optimizer.lr;
  double max_gterms = 0.0;
  for (const auto& g : gterms)
    for (double v : g) max_gterms = std::max(max_gterms, v);
  // Per rounding (count holds lr and DP's two roundings): f times the largest travelling
  // gradient, at most W * max_gterms.
  const double gfloor = BlockFloor(bwd) * s.world * max_gterms;
  size_t bwd_differ = 0;
  for (int32_t r = 0; r < s.world; ++r) {
    for (size_t t = 0; t < s.tables.size(); ++t) {
      std::vector<double> terms(gterms[t].size()), count(gcount[t].size());
      for (size_t i = 0; i < terms.size(); ++i) {
        terms[i] = lr * gterms[t][i];
        count[i] = lr * gcount[t][i] * (dp ? 2 : 1);
      }
      bwd_differ +=
          ExpectWithin(enc.after[r][t], exact.after[r][t], terms, count, u_eff, AbsoluteFloor(bwd),
                       0.0, "rank " + std::to_string(r) + " table " + s.tables[t].name, gfloor);
      // Every replica of a data-parallel table holds the same bits.
      if (dp && r > 0) {
        EXPECT_EQ(
            std::memcmp(enc.after[r][t].data(), enc.after[0][t].data(), 4 * enc.after[0][t].size()),
            0)
            << "DP replicas differ: rank " << r << " table " << s.tables[t].name;
      }
    }
  }
  if (bwd != SHARDREC_COMM_ENCODING_FP32)
    EXPECT_GT(bwd_differ, 0u) << "the backward encoding changed nothing";
  else
    EXPECT_EQ(bwd_differ, 0u) << "an exact backward differs from the exact run";
}

TEST_P(EmbeddingQComms, WithinDocumentedBoundOfExactRun) {
  const auto [world, type, encoding] = GetParam();
  CheckAgainstExact(QScenario(world, type), encoding, encoding);
}

std::string QName(const ::testing::TestParamInfo<QParam>& info) {
  const auto [world, type, encoding] = info.param;
  return std::string("W") + std::to_string(world) + "_" + kTypeNames[type] +
         EncodingSuffix(encoding);
}

INSTANTIATE_TEST_SUITE_P(
    Types, EmbeddingQComms,
    ::testing::Combine(::testing::Values(2, 3),
                       ::testing::Values(SHARDREC_SHARDING_DATA_PARALLEL,
                                         SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE,
                                         SHARDREC_SHARDING_COLUMN_WISE),
                       ::testing::Values(SHARDREC_COMM_ENCODING_FP16, SHARDREC_COMM_ENCODING_BF16)),
    QName);

INSTANTIATE_TEST_SUITE_P(Fp8, EmbeddingQComms,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(SHARDREC_SHARDING_DATA_PARALLEL,
                                                              SHARDREC_SHARDING_TABLE_WISE,
                                                              SHARDREC_SHARDING_ROW_WISE,
                                                              SHARDREC_SHARDING_COLUMN_WISE),
                                            ::testing::Values(SHARDREC_COMM_ENCODING_FP8_E4M3,
                                                              SHARDREC_COMM_ENCODING_FP8_E5M2)),
                         QName);

TEST(EmbeddingQCommsModes, ForwardAndBackwardAreChosenIndependently) {
  for (int32_t type : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_DATA_PARALLEL}) {
    SCOPED_TRACE(kTypeNames[type]);
    // bf16 forward, exact backward: weights bit-identical, outputs within bound (checked inside).
    CheckAgainstExact(QScenario(2, type), SHARDREC_COMM_ENCODING_BF16, SHARDREC_COMM_ENCODING_FP32);
    // Exact forward, fp16 backward.
    CheckAgainstExact(QScenario(2, type), SHARDREC_COMM_ENCODING_FP32, SHARDREC_COMM_ENCODING_FP16);
  }
}

TEST(EmbeddingQCommsModes, SequenceRowsAreEncodedToo) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_NONE);
  s.optimizer.lr = 0.5f;
  s.steps = 1;
  CheckAgainstExact(s, SHARDREC_COMM_ENCODING_BF16, SHARDREC_COMM_ENCODING_BF16);
  CheckAgainstExact(s, SHARDREC_COMM_ENCODING_FP8_E4M3, SHARDREC_COMM_ENCODING_FP8_E5M2);
}

bool BitEqual(const RunResult& a, const RunResult& b) {
  if (a.out.size() != b.out.size() || a.after.size() != b.after.size()) return false;
  for (size_t r = 0; r < a.out.size(); ++r) {
    if (a.out[r].size() != b.out[r].size() ||
        std::memcmp(a.out[r].data(), b.out[r].data(), 4 * a.out[r].size()) != 0)
      return false;
    for (size_t t = 0; t < a.after[r].size(); ++t)
      if (std::memcmp(a.after[r][t].data(), b.after[r][t].data(), 4 * a.after[r][t].size()) != 0)
        return false;
  }
  return true;
}

TEST(EmbeddingQCommsModes, DefaultAndOlderCallersAreExactFp32) {
  for (int32_t type : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_DATA_PARALLEL}) {
    Scenario s = QScenario(3, type);
    ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
    const auto batches = MakeBatches(s, ref);
    const auto grads = MakeGrads(s, batches, ref.output_dim());
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    const RunResult v3 = RunStep(s, plan.get(), batches, grads, SHARDREC_COMM_ENCODING_FP32,
                                 SHARDREC_COMM_ENCODING_FP32);
    const RunResult v2 = RunStep(s, plan.get(), batches, grads, 0, 0, 2);
    const RunResult v1 = RunStep(s, plan.get(), batches, grads, 0, 0, 1);
    const RunResult null_opts = RunStep(s, plan.get(), batches, grads, 0, 0, 3, true);
    EXPECT_TRUE(BitEqual(v3, v2)) << kTypeNames[type];
    EXPECT_TRUE(BitEqual(v3, v1)) << kTypeNames[type];
    // NULL options use seed 0: compare shapes only against it, bits against a seed-0 run.
    Scenario s0 = s;
    s0.seed = 0;
    EXPECT_TRUE(BitEqual(null_opts, RunStep(s0, plan.get(), batches, grads, 0, 0)));
    // An encoding changes values, never shapes.
    const RunResult bf = RunStep(s, plan.get(), batches, grads, SHARDREC_COMM_ENCODING_BF16,
                                 SHARDREC_COMM_ENCODING_BF16);
    EXPECT_EQ(bf.output_dim, v3.output_dim);
    EXPECT_EQ(bf.num_outputs, v3.num_outputs);
    for (size_t r = 0; r < v3.out.size(); ++r) EXPECT_EQ(bf.out[r].size(), v3.out[r].size());
  }
}

// 2D: world 4 as 2 replica groups of 2-way sharding. Data-parallel tables all-reduce over the
// global group; with bf16 every rank still ends with the same bits, close to the exact run.
TEST(EmbeddingQCommsModes, MeshKeepsDataParallelReplicasIdentical) {
  Scenario s = QScenario(2, SHARDREC_SHARDING_DATA_PARALLEL);
  s.sharding = {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_ROW_WISE,
                SHARDREC_SHARDING_TABLE_WISE};
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  s.world = 4;
  s.batch_sizes.assign(4, 6);
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  const int32_t encodings[] = {SHARDREC_COMM_ENCODING_FP32, SHARDREC_COMM_ENCODING_BF16,
                               SHARDREC_COMM_ENCODING_FP8_E4M3};
  std::vector<std::vector<std::vector<float>>> after[3];  // [encoding][rank][table]
  for (int e = 0; e < 3; ++e) {
    after[e].assign(4, {});
    SpawnRanks(4, [&](int r) {
      shardrec_mesh_options_t mo;
      shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
      mo.sharding_group_size = 2;
      shardrec_mesh_t* mesh = nullptr;
      ASSERT_EQ(shardrec_mesh_create(&mesh, GroupComm(4, r), &mo), SHARDREC_OK)
          << shardrec_last_error();
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      o.seed = s.seed;
      o.forward_comm_encoding = encodings[e];
      o.backward_comm_encoding = o.forward_comm_encoding;
      shardrec_embedding_t* c = nullptr;
      ASSERT_EQ(shardrec_mesh_embedding_create(&c, mesh, plan.get(), &opt, &o), SHARDREC_OK)
          << shardrec_last_error();
      CollPtr coll(c);
      KjtHolder kjt(batches[0][r], s.num_features, false);
      int64_t dim = 0;
      shardrec_embedding_output_dim(c, &dim);
      std::vector<float> out(static_cast<size_t>(batches[0][r].batch_size * dim));
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_backward(c, grads[0][r].data(), grads[0][r].size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      for (const RefTable& t : s.tables) {
        std::vector<float> w(static_cast<size_t>(t.rows) * t.dim);
        ASSERT_EQ(shardrec_embedding_get_weights(c, t.name.c_str(), w.data(), w.size()),
                  SHARDREC_OK);
        after[e][r].push_back(std::move(w));
      }
      coll.reset();
      shardrec_mesh_destroy(mesh);
    });
  }
  // Table 0 is data-parallel: identical on all four ranks, encoded or not (FP8 included: every
  // rank decodes the same gathered bytes).
  for (int e = 0; e < 3; ++e)
    for (int r = 1; r < 4; ++r)
      EXPECT_EQ(
          std::memcmp(after[e][r][0].data(), after[e][0][0].data(), 4 * after[e][0][0].size()), 0)
          << "encoding " << e << " rank " << r;
  size_t differ = 0;
  for (size_t i = 0; i < after[0][0][0].size(); ++i) {
    const float x = after[0][0][0][i], y = after[1][0][0][i];
    differ += x != y;
    EXPECT_NEAR(y, x, 1e-2 * std::max(0.1f, std::fabs(x))) << "element " << i;
  }
  EXPECT_GT(differ, 0u) << "bf16 changed nothing in the data-parallel table";
  // (FP8's bound against the exact run is checked in 1D by the parameterized tests.)
  EXPECT_NE(std::memcmp(after[2][0][0].data(), after[0][0][0].data(), 4 * after[0][0][0].size()), 0)
      << "FP8 changed nothing in the data-parallel table";
}

// FP8 blocks share one scale: a data-parallel row's touched flag (a 1 after every gradient of
// the all-reduce) in a block with a gradient 2^10 times larger would flush to zero and the row
// would not train. Gradients of 1e7 on table t2 (whose last row's gradient ends where the flags
// begin) must leave every row the exact run trains trained by the FP8 run too.
TEST(EmbeddingQCommsModes, Fp8DataParallelRowsTrainBesideLargeGradients) {
  Scenario s = QScenario(2, SHARDREC_SHARDING_DATA_PARALLEL);
  s.optimizer.lr = 1e-8f;  // keeps the 1e7 gradients' steps small
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  auto grads = MakeGrads(s, batches, ref.output_dim());
  // t2's output columns (feature 3: after 8 + 12 + 12 columns): 1e7 on every sample.
  const int64_t D = ref.output_dim();
  for (auto& rank : grads[0])
    for (size_t i = 0; i < rank.size(); ++i)
      if (static_cast<int64_t>(i % D) >= 32) rank[i] = 1e7f;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const RunResult exact = RunStep(s, plan.get(), batches, grads, 0, 0);
  for (int32_t e : {SHARDREC_COMM_ENCODING_FP8_E4M3, SHARDREC_COMM_ENCODING_FP8_E5M2}) {
    SCOPED_TRACE(e);
    const RunResult enc = RunStep(s, plan.get(), batches, grads, e, e);
    size_t trained = 0;
    for (size_t t = 0; t < s.tables.size(); ++t) {
      const int32_t dim = s.tables[t].dim;
      for (int64_t r = 0; r < s.tables[t].rows; ++r) {
        bool moved_exact = false, moved_enc = false;
        for (int32_t c = 0; c < dim; ++c) {
          const size_t i = static_cast<size_t>(r * dim + c);
          moved_exact |= exact.after[0][t][i] != exact.initial[t][i];
          moved_enc |= enc.after[0][t][i] != exact.initial[t][i];
        }
        trained += moved_exact;
        EXPECT_TRUE(!moved_exact || moved_enc)
            << "table " << t << " row " << r << " trained in the exact run only";
      }
    }
    EXPECT_GT(trained, 10u);
  }
}

TEST(EmbeddingQCommsModes, WorldOneIsExactInEveryEncoding) {
  Scenario s = QScenario(2, SHARDREC_SHARDING_TABLE_WISE);
  s.world = 1;
  s.batch_sizes.assign(1, 6);
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const RunResult exact = RunStep(s, plan.get(), batches, grads, 0, 0);
  for (int32_t e : {SHARDREC_COMM_ENCODING_FP16, SHARDREC_COMM_ENCODING_BF16,
                    SHARDREC_COMM_ENCODING_FP8_E4M3, SHARDREC_COMM_ENCODING_FP8_E5M2})
    EXPECT_TRUE(BitEqual(exact, RunStep(s, plan.get(), batches, grads, e, e)));
}

TEST(EmbeddingQCommsModes, Fp16SaturatesInsteadOfOverflowing) {
  Scenario s = QScenario(2, SHARDREC_SHARDING_TABLE_WISE);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.forward_comm_encoding = SHARDREC_COMM_ENCODING_FP16;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), &opt, &o), SHARDREC_OK);
    CollPtr coll(c);
    for (const RefTable& t : s.tables) {
      std::vector<float> w(static_cast<size_t>(t.rows) * t.dim, 1e5f);
      for (size_t i = 0; i < w.size(); i += 2) w[i] = -1e5f;
      ASSERT_EQ(shardrec_embedding_set_weights(c, t.name.c_str(), w.data(), w.size()), SHARDREC_OK);
    }
    // One id per bag: every output element is +-1e5 exactly when computed locally.
    RefBatch b;
    b.batch_size = 2;
    for (int32_t f = 0; f < s.num_features; ++f)
      for (int i = 0; i < 2; ++i) {
        b.lengths.push_back(1);
        b.ids.push_back(1);
      }
    KjtHolder kjt(b, s.num_features, false);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    std::vector<float> out(2 * static_cast<size_t>(dim));
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK);
    size_t saturated = 0;
    for (float v : out) {
      ASSERT_TRUE(std::isfinite(v));
      ASSERT_TRUE(std::fabs(v) == 1e5f || std::fabs(v) == 65504.0f) << v;
      saturated += std::fabs(v) == 65504.0f;
    }
    // Each rank holds some tables and not others: some elements crossed ranks, some did not.
    EXPECT_GT(saturated, 0u);
    EXPECT_LT(saturated, out.size());
  });
}

TEST(EmbeddingQCommsModes, UnknownEncodingIsRejectedOnCreate) {
  Scenario s = QScenario(2, SHARDREC_SHARDING_ROW_WISE);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  // 5 and 6 are RowFormat's FP8 values (row_format.h), not the C enum's: refused like any other.
  for (int32_t bad : {5, 6, -1, 255}) {
    for (int which = 0; which < 2; ++which) {
      SpawnRanks(2, [&](int r) {
        shardrec_embedding_options_t o;
        shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
        // Rank 1 alone is misconfigured: rank 0 must fail too, naming it.
        if (r == 1) (which == 0 ? o.forward_comm_encoding : o.backward_comm_encoding) = bad;
        shardrec_embedding_t* c = reinterpret_cast<shardrec_embedding_t*>(0x1);
        EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), nullptr, &o),
                  SHARDREC_EINVAL);
        EXPECT_EQ(c, reinterpret_cast<shardrec_embedding_t*>(0x1)) << "out changed on failure";
        const std::string msg = shardrec_last_error();
        if (r == 1)
          EXPECT_NE(msg.find(which == 0 ? "forward_comm_encoding" : "backward_comm_encoding"),
                    std::string::npos)
              << msg;
        else
          EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
      });
    }
  }
  // A version-2 caller's struct has no encoding fields: whatever follows it is never read.
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, 2);
    o.forward_comm_encoding = 77;
    o.backward_comm_encoding = -5;
    shardrec_embedding_t* c = nullptr;
    EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), nullptr, &o), SHARDREC_OK)
        << shardrec_last_error();
    shardrec_embedding_destroy(c);
  });
}

TEST(EmbeddingQCommsModes, OptionsInitFillsExactDefaults) {
  shardrec_embedding_options_t o;
  std::memset(&o, 0x5a, sizeof(o));
  ASSERT_EQ(shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION), SHARDREC_OK);
  EXPECT_EQ(o.forward_comm_encoding, SHARDREC_COMM_ENCODING_FP32);
  EXPECT_EQ(o.backward_comm_encoding, SHARDREC_COMM_ENCODING_FP32);
  const shardrec_embedding_options_t m = SHARDREC_EMBEDDING_OPTIONS_INIT;
  EXPECT_EQ(m.forward_comm_encoding, SHARDREC_COMM_ENCODING_FP32);
  EXPECT_EQ(m.backward_comm_encoding, SHARDREC_COMM_ENCODING_FP32);
  // A version-2 init leaves the newer fields alone (the caller's struct is shorter).
  std::memset(&o, 0x5a, sizeof(o));
  ASSERT_EQ(shardrec_embedding_options_init(&o, 2), SHARDREC_OK);
  EXPECT_EQ(o.version, 2u);
  EXPECT_EQ(o.forward_comm_encoding, 0x5a5a5a5a);
  EXPECT_EQ(shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION + 1),
            SHARDREC_EINVAL);
}

}  // namespace
}  // namespace shardrec::testing
