// Optimizer rules against a double-precision reference written from the update formulas, plus
// hand-computed first steps, untouched rows, column-split equivalence and thread independence.
#include "impl/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "impl/core/thread_pool.h"
#include "impl/optim/dispatch.h"

namespace shardrec::optim {
namespace {

constexpr OptimizerType kAllTypes[] = {OptimizerType::kSgd,
                                       OptimizerType::kAdagrad,
                                       OptimizerType::kRowWiseAdagrad,
                                       OptimizerType::kAdam,
                                       OptimizerType::kPartialRowWiseAdam,
                                       OptimizerType::kLamb};
constexpr WeightDecayMode kAllModes[] = {WeightDecayMode::kNone, WeightDecayMode::kL2,
                                         WeightDecayMode::kDecoupled};

OptimizerConfig Config(OptimizerType t, WeightDecayMode mode = WeightDecayMode::kNone,
                       float wd = 0.0f) {
  OptimizerConfig c;
  c.type = t;
  c.learning_rate = 0.1f;
  c.eps = 1e-6f;
  c.beta1 = 0.8f;
  c.beta2 = 0.9f;
  c.weight_decay = wd;
  c.weight_decay_mode = mode;
  return c;
}

// A shard that owns its memory: rows x cols weights (fp32) and the states of StateSpecs.
struct Table {
  int64_t rows;
  int32_t cols;
  std::vector<float> w;
  std::vector<std::vector<float>> states;
  ShardParams params;

  Table(OptimizerType t, int64_t r, int32_t c) : rows(r), cols(c), w(r * c) {
    for (int64_t i = 0; i < r * c; ++i)
      w[i] = 0.5f + 0.25f * std::sin(1.0f + static_cast<float>(i));
    for (const StateSpec& s : StateSpecs(t)) states.emplace_back(s.row_wise ? r : r * c, 0.0f);
    params.weights = w.data();
    params.rows = r;
    params.cols = c;
    params.stride = c;
    for (auto& s : states) params.states.push_back(s.data());
  }
};

// Double-precision reference of one row's update, straight from the formulas.
struct RefRow {
  std::vector<double> w, m1, m2;  // row-wise states use element 0
};

void RefStep(const OptimizerConfig& c, int64_t t, RefRow& r, const std::vector<double>& g) {
  const size_t d = g.size();
  const double lr = c.learning_rate, eps = c.eps, b1 = c.beta1, b2 = c.beta2, wd = c.weight_decay;
  const bool l2 = c.weight_decay_mode == WeightDecayMode::kL2;
  const bool dec = c.weight_decay_mode == WeightDecayMode::kDecoupled;
  const double bc1 = 1 - std::pow(b1, double(t)), bc2 = 1 - std::pow(b2, double(t));
  std::vector<double> gd(d);
  double mean_sq = 0;
  for (size_t i = 0; i < d; ++i) {
    gd[i] = g[i] + (l2 ? wd * r.w[i] : 0.0);
    mean_sq += gd[i] * gd[i] / double(d);
  }
  switch (c.type) {
    case OptimizerType::kSgd:
      for (size_t i = 0; i < d; ++i) r.w[i] -= lr * (gd[i] + (dec ? wd * r.w[i] : 0));
      break;
    case OptimizerType::kAdagrad:
      for (size_t i = 0; i < d; ++i) {
        r.m1[i] += gd[i] * gd[i];
        r.w[i] -= lr * (gd[i] / (std::sqrt(r.m1[i]) + eps) + (dec ? wd * r.w[i] : 0));
      }
      break;
    case OptimizerType::kRowWiseAdagrad: {
      r.m1[0] += mean_sq;
      double mult = lr / (std::sqrt(r.m1[0]) + eps);
      double corr = l2 ? 1 - mult * wd : dec ? 1 - lr * wd : 1;
      for (size_t i = 0; i < d; ++i) r.w[i] = corr * r.w[i] - mult * g[i];
      break;
    }
    case OptimizerType::kAdam:
      for (size_t i = 0; i < d; ++i) {
        r.m1[i] = b1 * r.m1[i] + (1 - b1) * gd[i];
        r.m2[i] = b2 * r.m2[i] + (1 - b2) * gd[i] * gd[i];
        r.w[i] -=
            lr * ((r.m1[i] / bc1) / (std::sqrt(r.m2[i] / bc2) + eps) + (dec ? wd * r.w[i] : 0));
      }
      break;
    case OptimizerType::kPartialRowWiseAdam:
      r.m2[0] = b2 * r.m2[0] + (1 - b2) * mean_sq;
      for (size_t i = 0; i < d; ++i) {
        r.m1[i] = b1 * r.m1[i] + (1 - b1) * gd[i];
        r.w[i] -=
            lr * ((r.m1[i] / bc1) / (std::sqrt(r.m2[0] / bc2) + eps) + (dec ? wd * r.w[i] : 0));
      }
      break;
    case OptimizerType::kLamb: {
      std::vector<double> rr(d);
      double wn = 0, rn = 0;
      for (size_t i = 0; i < d; ++i) {
        r.m1[i] = b1 * r.m1[i] + (1 - b1) * gd[i];
        r.m2[i] = b2 * r.m2[i] + (1 - b2) * gd[i] * gd[i];
        rr[i] = (r.m1[i] / bc1) / (std::sqrt(r.m2[i] / bc2) + eps) + (dec ? wd * r.w[i] : 0);
        wn += r.w[i] * r.w[i];
        rn += rr[i] * rr[i];
      }
      double ratio = (wn > 0 && rn > 0) ? std::sqrt(wn) / std::sqrt(rn) : 1.0;
      for (size_t i = 0; i < d; ++i) r.w[i] -= lr * ratio * rr[i];
      break;
    }
  }
}

// Runs both phases on one unsplit shard.
void Step(const OptimizerConfig& c, int64_t t, Table& tab, const std::vector<int64_t>& rows,
          const std::vector<float>& grads, ThreadPool* pool = nullptr) {
  RowUpdate u{rows, grads.data()};
  int ns = NumRowStats(c.type);
  std::vector<float> stats(rows.size() * std::max(ns, 1));
  if (ns > 0) PartialRowStats(ExecContext::Host(pool), c, t, tab.params, u, stats.data());
  Apply(ExecContext::Host(pool), c, t, tab.cols, tab.params, u, ns > 0 ? stats.data() : nullptr);
}

void ExpectNear(double want, float got, const char* what) {
  EXPECT_NEAR(got, want, 2e-6 * std::max(1.0, std::fabs(want))) << what;
}

// Three steps with different row sets; every row is compared with the reference after each step.
TEST(OptimOptimizer, EveryOptimizerAndDecayModeMatchesReferenceOverThreeSteps) {
  const int64_t R = 5;
  const int32_t D = 6;
  const std::vector<std::vector<int64_t>> batches = {{1, 3}, {0, 3, 4}, {3}};
  for (OptimizerType t : kAllTypes) {
    for (WeightDecayMode mode : kAllModes) {
      OptimizerConfig c = Config(t, mode, mode == WeightDecayMode::kNone ? 0.0f : 0.05f);
      ASSERT_TRUE(ValidateConfig(c).ok());
      Table tab(t, R, D);
      ASSERT_TRUE(ValidateShard(c, tab.params).ok());
      std::vector<RefRow> ref(R);
      for (int64_t r = 0; r < R; ++r) {
        ref[r].w.assign(tab.w.begin() + r * D, tab.w.begin() + (r + 1) * D);
        ref[r].m1.assign(D, 0.0);
        ref[r].m2.assign(D, 0.0);
      }
      for (size_t s = 0; s < batches.size(); ++s) {
        const auto& rows = batches[s];
        std::vector<float> grads(rows.size() * D);
        for (size_t i = 0; i < grads.size(); ++i)
          grads[i] = 0.3f * std::cos(float(i + 7 * s)) - 0.05f;
        Step(c, static_cast<int64_t>(s + 1), tab, rows, grads);
        for (size_t k = 0; k < rows.size(); ++k)
          RefStep(c, static_cast<int64_t>(s + 1), ref[rows[k]],
                  std::vector<double>(grads.begin() + k * D, grads.begin() + (k + 1) * D));
        for (int64_t r = 0; r < R; ++r)
          for (int32_t d = 0; d < D; ++d) ExpectNear(ref[r].w[d], tab.w[r * D + d], "weight");
      }
      // Row 2 was never in a batch: weights as initialised, states still zero.
      Table fresh(t, R, D);
      for (int32_t d = 0; d < D; ++d) EXPECT_EQ(tab.w[2 * D + d], fresh.w[2 * D + d]);
      auto specs = StateSpecs(t);
      for (size_t i = 0; i < specs.size(); ++i) {
        int64_t n = specs[i].row_wise ? 1 : D;
        int64_t at = specs[i].row_wise ? 2 : 2 * D;
        for (int64_t k = 0; k < n; ++k) EXPECT_EQ(tab.states[i][at + k], 0.0f);
      }
    }
  }
}

TEST(OptimOptimizer, FirstStepsMatchHandComputedValues) {
  std::vector<int64_t> rows = {0};
  {  // SGD: 1 - 0.1 * 0.5 = 0.95.
    Table tab(OptimizerType::kSgd, 1, 1);
    tab.w[0] = 1.0f;
    Step(Config(OptimizerType::kSgd), 1, tab, rows, {0.5f});
    EXPECT_NEAR(tab.w[0], 0.95f, 1e-7);
  }
  {  // Adagrad: m = 0.25, w = 1 - 0.1 * 0.5 / (0.5 + 1e-6).
    Table tab(OptimizerType::kAdagrad, 1, 1);
    tab.w[0] = 1.0f;
    Step(Config(OptimizerType::kAdagrad), 1, tab, rows, {0.5f});
    EXPECT_NEAR(tab.states[0][0], 0.25f, 1e-7);
    EXPECT_NEAR(tab.w[0], 0.9000002f, 1e-6);
  }
  {  // Row-wise Adagrad on [1, 2] with g = [0.5, 1]: m = 0.625, mult = 0.1 / sqrt(0.625) =
     // 0.1264911.
    Table tab(OptimizerType::kRowWiseAdagrad, 1, 2);
    tab.w = {1.0f, 2.0f};
    Step(Config(OptimizerType::kRowWiseAdagrad), 1, tab, rows, {0.5f, 1.0f});
    EXPECT_NEAR(tab.states[0][0], 0.625f, 1e-7);
    EXPECT_NEAR(tab.w[0], 1.0f - 0.0632455f, 1e-6);
    EXPECT_NEAR(tab.w[1], 2.0f - 0.1264910f, 1e-6);
  }
  {  // Adam step 1: bias-corrected m^ = g, v^ = g^2, so w moves by lr * sign(g).
    Table tab(OptimizerType::kAdam, 1, 2);
    tab.w = {1.0f, -1.0f};
    Step(Config(OptimizerType::kAdam), 1, tab, rows, {0.5f, -2.0f});
    EXPECT_NEAR(tab.w[0], 0.9f, 1e-6);
    EXPECT_NEAR(tab.w[1], -0.9f, 1e-6);
  }
  {  // LAMB step 1 on w = [3, 4], g = [1, 1]: r = [1, 1], ratio = 5 / sqrt(2) = 3.5355339.
    Table tab(OptimizerType::kLamb, 1, 2);
    tab.w = {3.0f, 4.0f};
    Step(Config(OptimizerType::kLamb), 1, tab, rows, {1.0f, 1.0f});
    EXPECT_NEAR(tab.w[0], 3.0f - 0.35355339f, 1e-5);
    EXPECT_NEAR(tab.w[1], 4.0f - 0.35355339f, 1e-5);
  }
  {  // LAMB with a zero row: ||w|| = 0 gives ratio 1, so w = -lr * sign(g).
    Table tab(OptimizerType::kLamb, 1, 2);
    tab.w = {0.0f, 0.0f};
    Step(Config(OptimizerType::kLamb), 1, tab, rows, {1.0f, -1.0f});
    EXPECT_NEAR(tab.w[0], -0.1f, 1e-6);
    EXPECT_NEAR(tab.w[1], 0.1f, 1e-6);
  }
}

// A row split into column shards [3, 2, 2]: phase-1 statistics summed over the shards, Apply per
// shard, equals the unsplit update for every optimizer and decay mode.
TEST(OptimOptimizer, ColumnSplitEqualsUnsplitForEveryOptimizer) {
  const int64_t R = 4;
  const int32_t D = 7;
  const int32_t widths[] = {3, 2, 2};
  for (OptimizerType t : kAllTypes) {
    for (WeightDecayMode mode : kAllModes) {
      OptimizerConfig c = Config(t, mode, mode == WeightDecayMode::kNone ? 0.0f : 0.05f);
      Table whole(t, R, D);
      std::vector<Table> parts;
      int32_t off = 0;
      for (int32_t wdt : widths) {
        parts.emplace_back(t, R, wdt);
        for (int64_t r = 0; r < R; ++r)
          for (int32_t k = 0; k < wdt; ++k) parts.back().w[r * wdt + k] = whole.w[r * D + off + k];
        off += wdt;
      }
      const int ns = NumRowStats(t);
      for (int64_t step = 1; step <= 3; ++step) {
        std::vector<int64_t> rows =
            step == 2 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{1, 2, 3};
        std::vector<float> g(rows.size() * D);
        for (size_t i = 0; i < g.size(); ++i) g[i] = 0.2f * std::sin(float(3 * i + step)) + 0.01f;
        Step(c, step, whole, rows, g);
        std::vector<float> sum(rows.size() * std::max(ns, 1), 0.0f);
        std::vector<std::vector<float>> pg(parts.size());
        off = 0;
        for (size_t p = 0; p < parts.size(); ++p) {
          for (size_t k = 0; k < rows.size(); ++k)
            for (int32_t j = 0; j < widths[p]; ++j) pg[p].push_back(g[k * D + off + j]);
          off += widths[p];
          if (ns > 0) {
            std::vector<float> partial(rows.size() * ns);
            PartialRowStats(ExecContext(), c, step, parts[p].params, RowUpdate{rows, pg[p].data()},
                            partial.data());
            for (size_t i = 0; i < partial.size(); ++i) sum[i] += partial[i];
          }
        }
        for (size_t p = 0; p < parts.size(); ++p)
          Apply(ExecContext(), c, step, D, parts[p].params, RowUpdate{rows, pg[p].data()},
                ns > 0 ? sum.data() : nullptr);
      }
      off = 0;
      for (size_t p = 0; p < parts.size(); ++p) {
        for (int64_t r = 0; r < R; ++r)
          for (int32_t k = 0; k < widths[p]; ++k) {
            float want = whole.w[r * D + off + k];
            EXPECT_NEAR(parts[p].w[r * widths[p] + k], want, 1e-6 * std::max(1.0f, std::fabs(want)))
                << "type " << int(t) << " mode " << int(mode);
          }
        off += widths[p];
      }
    }
  }
}

TEST(OptimOptimizer, ResultsAreIdenticalForAnyThreadCount) {
  const int64_t R = 3000;
  const int32_t D = 16;
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < R; r += 2) rows.push_back(r);
  std::vector<float> g(rows.size() * D);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(float(i)) * 0.1f;
  for (OptimizerType t : kAllTypes) {
    OptimizerConfig c = Config(t, WeightDecayMode::kL2, 0.01f);
    std::vector<float> first;
    for (int threads : {1, 2, 4}) {
      ThreadPool pool(threads);
      Table tab(t, R, D);
      for (int64_t s = 1; s <= 2; ++s) Step(c, s, tab, rows, g, &pool);
      if (first.empty()) {
        first = tab.w;
      } else {
        EXPECT_EQ(0, std::memcmp(first.data(), tab.w.data(), first.size() * sizeof(float)))
            << int(t);
      }
    }
  }
}

TEST(OptimOptimizer, ValidateConfigNamesTheBadField) {
  OptimizerConfig c;
  c.learning_rate = -1.0f;
  Status s = ValidateConfig(c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("learning_rate"), std::string::npos);
  c = OptimizerConfig();
  c.eps = 0.0f;
  EXPECT_NE(ValidateConfig(c).message().find("eps"), std::string::npos);
  c = OptimizerConfig();
  c.beta2 = 1.0f;
  EXPECT_NE(ValidateConfig(c).message().find("beta2"), std::string::npos);
  c = OptimizerConfig();
  c.type = static_cast<OptimizerType>(17);
  EXPECT_NE(ValidateConfig(c).message().find("type"), std::string::npos);
  c = OptimizerConfig();
  c.weight_decay_mode = static_cast<WeightDecayMode>(9);
  EXPECT_NE(ValidateConfig(c).message().find("weight_decay_mode"), std::string::npos);
  EXPECT_TRUE(ValidateConfig(OptimizerConfig()).ok());
}

// The one dispatch (dispatch.h) hands every type its own rule, refuses a value outside the enum
// without calling the visitor, and the shape questions answer from the same table.
TEST(OptimOptimizer, DispatchVisitsEachTypesOwnRule) {
  for (OptimizerType t : kAllTypes) {
    int visits = 0;
    OptimizerType seen = OptimizerType::kSgd;
    int row_state = -2, states = -1;
    EXPECT_TRUE(DispatchOptimizer(t, [&](auto rule) {
      using R = decltype(rule);
      ++visits;
      seen = R::kType;
      row_state = R::kRowState;
      states = R::kNumStates;
    }));
    EXPECT_EQ(visits, 1);
    EXPECT_EQ(seen, t);
    const auto specs = StateSpecs(t);
    ASSERT_EQ(static_cast<int>(specs.size()), states) << OptimizerName(t);
    for (int i = 0; i < states; ++i) EXPECT_EQ(specs[i].row_wise, i == row_state);
  }
  int visits = 0;
  EXPECT_FALSE(
      DispatchOptimizer(static_cast<OptimizerType>(kNumOptimizerTypes), [&](auto) { ++visits; }));
  EXPECT_FALSE(DispatchOptimizer(static_cast<OptimizerType>(-1), [&](auto) { ++visits; }));
  EXPECT_EQ(visits, 0);
  EXPECT_STREQ(OptimizerName(static_cast<OptimizerType>(kNumOptimizerTypes)), "unknown");
  EXPECT_TRUE(StateSpecs(static_cast<OptimizerType>(kNumOptimizerTypes)).empty());
  EXPECT_EQ(NumRowStats(static_cast<OptimizerType>(kNumOptimizerTypes)), 0);
  EXPECT_STREQ(OptimizerName(OptimizerType::kPartialRowWiseAdam), "partial_rowwise_adam");
}

TEST(OptimOptimizer, StateLayoutAndShardValidation) {
  EXPECT_EQ(StateSpecs(OptimizerType::kSgd).size(), 0u);
  EXPECT_TRUE(StateSpecs(OptimizerType::kRowWiseAdagrad)[0].row_wise);
  EXPECT_FALSE(StateSpecs(OptimizerType::kPartialRowWiseAdam)[0].row_wise);
  EXPECT_TRUE(StateSpecs(OptimizerType::kPartialRowWiseAdam)[1].row_wise);
  EXPECT_EQ(NumRowStats(OptimizerType::kLamb), 2);
  EXPECT_EQ(NumRowStats(OptimizerType::kAdam), 0);
  Table tab(OptimizerType::kAdam, 2, 3);
  OptimizerConfig c = Config(OptimizerType::kAdam);
  EXPECT_TRUE(ValidateShard(c, tab.params).ok());
  ShardParams bad = tab.params;
  bad.states.pop_back();
  EXPECT_EQ(ValidateShard(c, bad).code(), Code::kInvalidArgument);
  bad = tab.params;
  bad.dtype = DType::kInt32;
  EXPECT_EQ(ValidateShard(c, bad).code(), Code::kUnsupported);
  bad = tab.params;
  bad.stride = 2;
  EXPECT_NE(ValidateShard(c, bad).message().find("stride"), std::string::npos);
}

}  // namespace
}  // namespace shardrec::optim
