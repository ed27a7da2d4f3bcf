// Bad VBE views and calls (docs/variable-batch.md, "Validation"): each is SHARDREC_EINVAL on every
// rank, the refusing rank's message names what is wrong (feature and sample where there is one),
// the peers' name the refusing rank, and nothing changes: the weights are those before, the step
// count too, and the next good step trains as if the bad one never was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/capi/vbe/vbe_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

struct BadCase {
  std::string name;
  std::function<void(VbeBatchData*, shardrec_kjt_vbe_view_t*)> spoil;  // on rank 0's view
  std::string message;                                                 // in rank 0's error
  bool bad_out_len = false;
};

std::vector<BadCase> Cases() {
  return {
      {"version0", [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) { v->version = 0; },
       "unsupported struct version 0"},
      {"version2", [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) { v->version = 2; },
       "unsupported struct version 2"},
      {"features",
       [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) { v->num_feature_batch_sizes = 3; },
       "num_feature_batch_sizes is 3"},
      {"lengths", [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) { v->kjt.num_lengths += 1; },
       "expected the sum of the feature batch sizes"},
      {"negative", [](VbeBatchData* d, shardrec_kjt_vbe_view_t*) { d->sizes[2] = -1; },
       "feature 'f2' (2): batch size -1 is negative"},
      {"inverse_range",
       [](VbeBatchData* d, shardrec_kjt_vbe_view_t*) { d->inverse[1 * d->batch_size + 1] = 99; },
       "feature 'f1' sample 1: inverse index 99 is outside [0, "},
      {"inverse_negative",
       [](VbeBatchData* d, shardrec_kjt_vbe_view_t*) { d->inverse[3 * d->batch_size] = -1; },
       "feature 'f3' sample 0: inverse index -1"},
      {"inverse_count",
       [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) { v->num_inverse_indices -= 1; },
       "num_inverse_indices is"},
      {"stride",
       [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) {
         v->inverse_indices = nullptr;
         v->num_inverse_indices = 0;
       },
       "must be the largest feature batch size"},
      {"inverse_without_sizes",
       [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) {
         v->feature_batch_sizes = nullptr;
         v->num_feature_batch_sizes = 0;
       },
       "inverse_indices given without feature_batch_sizes"},
      {"negative_length",
       [](VbeBatchData* d, shardrec_kjt_vbe_view_t*) {
         // Feature 1's bag 2: the third length after feature 0's B_0 bags.
         d->lengths[static_cast<size_t>(d->sizes[0]) + 2] = -3;
       },
       "feature 'f1' sample 2: negative length -3"},
      {"out_len", [](VbeBatchData*, shardrec_kjt_vbe_view_t*) {}, "out_len is", true},
  };
}

// A fixed good batch with inverse indices whose batch size is not its largest B_f.
VbeBatchData GoodBatch(const Scenario& s) {
  VbeBatchData v;
  for (uint64_t seed = 99;; ++seed) {
    v = MakeVbeBatch(seed, IdRanges(s), VbeMode::kInverse, false, 2);
    const int64_t max = *std::max_element(v.sizes.begin(), v.sizes.end());
    if (v.batch_size >= 2 && v.sizes[1] >= 3 && max != v.batch_size) break;
  }
  return v;
}

TEST(VbeValidation, BadViewIsRefusedOnEveryRankAndChangesNothing) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  for (const BadCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    SpawnRanks(2, [&](int r) {
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      o.seed = s.seed;
      shardrec_embedding_t* cc = nullptr;
      ASSERT_EQ(shardrec_embedding_create(&cc, plan.get(), GroupComm(2, r), &opt, &o), SHARDREC_OK);
      CollPtr coll(cc);
      const auto before = Snapshot(cc, s);
      VbeBatchData good = GoodBatch(s);
      const shardrec_kjt_vbe_view_t good_view = good.View();
      size_t len = 0;
      ASSERT_EQ(shardrec_embedding_vbe_output_len(cc, &good_view, &len), SHARDREC_OK);
      VbeBatchData bad = good;
      shardrec_kjt_vbe_view_t view = bad.View();
      if (r == 0) {
        c.spoil(&bad, &view);
        if (view.feature_batch_sizes != nullptr) view.feature_batch_sizes = bad.sizes.data();
        if (view.inverse_indices != nullptr) view.inverse_indices = bad.inverse.data();
        view.kjt.lengths = bad.lengths.data();
      }
      std::vector<float> out(len + 1);
      const size_t out_len = r == 0 && c.bad_out_len ? len + 1 : len;
      EXPECT_EQ(shardrec_embedding_forward_vbe(cc, &view, out.data(), out_len, nullptr),
                SHARDREC_EINVAL);
      const std::string err = shardrec_last_error();
      if (r == 0)
        EXPECT_NE(err.find(c.message), std::string::npos) << err;
      else
        EXPECT_NE(err.find("rank 0"), std::string::npos) << err;
      // Nothing changed, and there is no batch to train.
      EXPECT_NE(shardrec_embedding_backward(cc, out.data(), len, nullptr), SHARDREC_OK);
      int64_t steps = -1;
      shardrec_embedding_num_steps(cc, &steps);
      EXPECT_EQ(steps, 0);
      const auto after = Snapshot(cc, s);
      EXPECT_EQ(before, after);
      // The next good step trains.
      ASSERT_EQ(shardrec_embedding_forward_vbe(cc, &good_view, out.data(), len, nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      std::vector<float> grad(len, 0.5f);
      ASSERT_EQ(shardrec_embedding_backward(cc, grad.data(), len, nullptr), SHARDREC_OK)
          << shardrec_last_error();
    });
  }
}

TEST(VbeValidation, BadGradientIsRefusedOnEveryRank) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_MEAN);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  for (int bad_kind = 0; bad_kind < 2; ++bad_kind) {
    SpawnRanks(2, [&](int r) {
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      shardrec_embedding_t* cc = nullptr;
      ASSERT_EQ(shardrec_embedding_create(&cc, plan.get(), GroupComm(2, r), &opt, &o), SHARDREC_OK);
      CollPtr coll(cc);
      const VbeBatchData v = MakeVbeBatch(5 + r, IdRanges(s), VbeMode::kNoInverse, false, 3);
      const shardrec_kjt_vbe_view_t view = v.View();
      size_t len = 0;
      ASSERT_EQ(shardrec_embedding_vbe_output_len(cc, &view, &len), SHARDREC_OK);
      std::vector<float> out(len);
      ASSERT_EQ(shardrec_embedding_forward_vbe(cc, &view, out.data(), len, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      const auto before = Snapshot(cc, s);
      std::vector<float> grad(len + 1, 0.25f);
      size_t glen = len;
      if (r == 1 && bad_kind == 0) glen = len + 1;  // the plain layout's length would be wrong too
      if (r == 1 && bad_kind == 1 && len > 0) grad[len - 1] = std::nanf("");
      if (r == 1 && bad_kind == 1 && len == 0) glen = 1;
      EXPECT_EQ(shardrec_embedding_backward(cc, grad.data(), glen, nullptr), SHARDREC_EINVAL);
      const std::string err = shardrec_last_error();
      if (r == 1)
        EXPECT_NE(err.find(bad_kind == 0 || len == 0 ? "grad_len is" : "must be finite"),
                  std::string::npos)
            << err;
      else
        EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
      EXPECT_EQ(before, Snapshot(cc, s));
    });
  }
}

// With inverse indices a pooled gradient is checked once, after the rows of the samples that read
// a bag are summed into it: a non-finite element is still named, and so is a bag whose sum of
// finite rows overflows; either is refused on every rank with nothing changed.
TEST(VbeValidation, GradientWithInverseIsCheckedAfterItsSums) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  const std::vector<int64_t> widths = FeatureWidths(s);
  int64_t D = 0;
  for (int64_t w : widths) D += w;
  // Rank 1's batch: some feature f has a bag read by two samples b0 < b1.
  VbeBatchData bad;
  int64_t f = -1, b0 = -1, b1 = -1;
  for (uint64_t seed = 7; f < 0; ++seed) {
    bad = MakeVbeBatch(seed, IdRanges(s), VbeMode::kInverse, false, 2);
    const int64_t B = bad.batch_size;
    for (int64_t g = 0; g < static_cast<int64_t>(bad.sizes.size()) && f < 0; ++g)
      for (int64_t a = 0; a < B && f < 0; ++a)
        for (int64_t c = a + 1; c < B && f < 0; ++c)
          if (widths[g] > 0 && bad.inverse[g * B + a] == bad.inverse[g * B + c]) {
            f = g;
            b0 = a;
            b1 = c;
          }
  }
  int64_t col = 0;
  for (int64_t g = 0; g < f; ++g) col += widths[g];
  for (int kind = 0; kind < 2; ++kind) {  // 0: a NaN element; 1: two finite rows that overflow
    SpawnRanks(2, [&](int r) {
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      shardrec_embedding_t* cc = nullptr;
      ASSERT_EQ(shardrec_embedding_create(&cc, plan.get(), GroupComm(2, r), &opt, &o), SHARDREC_OK);
      CollPtr coll(cc);
      const VbeBatchData v =
          r == 1 ? bad : MakeVbeBatch(11, IdRanges(s), VbeMode::kInverse, false, 2);
      const shardrec_kjt_vbe_view_t view = v.View();
      size_t len = 0;
      ASSERT_EQ(shardrec_embedding_vbe_output_len(cc, &view, &len), SHARDREC_OK);
      std::vector<float> out(len);
      ASSERT_EQ(shardrec_embedding_forward_vbe(cc, &view, out.data(), len, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      const auto before = Snapshot(cc, s);
      std::vector<float> grad(len, 0.25f);
      const auto at0 = static_cast<size_t>(b0 * D + col);
      const auto at1 = static_cast<size_t>(b1 * D + col);
      if (r == 1 && kind == 0) grad[at1] = std::nanf("");
      if (r == 1 && kind == 1) grad[at0] = grad[at1] = 3e38f;
      EXPECT_EQ(shardrec_embedding_backward(cc, grad.data(), len, nullptr), SHARDREC_EINVAL);
      const std::string err = shardrec_last_error();
      if (r == 1 && kind == 0)
        EXPECT_NE(err.find("grad[" + std::to_string(at1) + "] is nan"), std::string::npos) << err;
      else if (r == 1)
        EXPECT_NE(
            err.find("the gradient of feature 'f" + std::to_string(f) + "' bag " +
                     std::to_string(bad.inverse[static_cast<size_t>(f * bad.batch_size + b0)]) +
                     " (the sum of the rows of the samples that read it) is inf"),
            std::string::npos)
            << err;
      else
        EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
      EXPECT_EQ(before, Snapshot(cc, s));
      // Nothing was trained: a good gradient trains this forward's batch.
      std::fill(grad.begin(), grad.end(), 0.25f);
      EXPECT_EQ(shardrec_embedding_backward(cc, grad.data(), len, nullptr), SHARDREC_OK)
          << shardrec_last_error();
    });
  }
}

TEST(VbeValidation, OutputLenChecksItsArguments) {
  Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_t* cc = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&cc, plan.get(), GroupComm(1, 0), &opt, nullptr),
            SHARDREC_OK);
  CollPtr coll(cc);
  VbeBatchData v = MakeVbeBatch(3, IdRanges(s), VbeMode::kNoInverse, false, 2);
  shardrec_kjt_vbe_view_t view = v.View();
  size_t len = 0;
  EXPECT_EQ(shardrec_embedding_vbe_output_len(nullptr, &view, &len), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_embedding_vbe_output_len(cc, nullptr, &len), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_embedding_vbe_output_len(cc, &view, nullptr), SHARDREC_EINVAL);
  ASSERT_EQ(shardrec_embedding_vbe_output_len(cc, &view, &len), SHARDREC_OK);
  // Feature-major: sum_f B_f * width_f (widths 8, 12, 12, 16).
  const size_t want =
      static_cast<size_t>(v.sizes[0] * 8 + v.sizes[1] * 12 + v.sizes[2] * 12 + v.sizes[3] * 16);
  EXPECT_EQ(len, want);
  view.version = 7;
  EXPECT_EQ(shardrec_embedding_vbe_output_len(cc, &view, &len), SHARDREC_EINVAL);
  view = v.View();
  v.sizes[1] = -2;
  EXPECT_EQ(shardrec_embedding_vbe_output_len(cc, &view, &len), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("feature 'f1'"), std::string::npos);
  // A plain view in the VBE call: the plain output's size.
  shardrec_kjt_vbe_view_t plain = SHARDREC_KJT_VBE_VIEW_INIT;
  plain.kjt.batch_size = 5;
  plain.kjt.num_features = 4;
  ASSERT_EQ(shardrec_embedding_vbe_output_len(cc, &plain, &len), SHARDREC_OK);
  EXPECT_EQ(len, 5u * 48u);
  // ... of a plain view whose shape the forward accepts: a feature count the plan does not have
  // is refused here too (found by fuzz_vbe), and `len` is left as it was.
  plain.kjt.num_features = 3;
  EXPECT_EQ(shardrec_embedding_vbe_output_len(cc, &plain, &len), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("num_features is 3"), std::string::npos);
  EXPECT_EQ(len, 5u * 48u);
  plain.kjt.num_features = 4;
  plain.kjt.batch_size = -2;
  EXPECT_EQ(shardrec_embedding_vbe_output_len(cc, &plain, &len), SHARDREC_EINVAL);
  EXPECT_EQ(len, 5u * 48u);
}

}  // namespace
}  // namespace shardrec::testing
