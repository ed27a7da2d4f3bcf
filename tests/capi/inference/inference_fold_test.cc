// Serving's folded INT8/INT4 pooled sums (docs/serving.md, "Storage types and their error bounds"):
// every element of a SUM bag within γ(n+3) Σ |w|·(|q·s| + |b|) of the fp64 sum of the stored
// values, γ(k) = k·2^-24 / (1 - k·2^-24). Rows whose values sit far from zero (a bias of about
// ±100 over a spread of 1), bags of up to 300 ids with weights of both signs (sums that cancel),
// and dims with and without a tail past the last whole vector. The stored codes are read back
// through the API: a bag of one unweighted id is q·s + b exactly as the decode computes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/capi/inference/inference_test_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

constexpr int64_t kRows = 40;
const int32_t kDims[] = {64, 40};  // one table per feature

float Rounded(float x) {
  volatile float v = x;
  return v;
}

// A world-1 checkpoint of two SUM tables whose row r holds values around ±(100 + r).
std::string SaveFarFromZero() {
  const std::string dir = FreshDir("fold");
  Side side;
  side.world = 1;
  side.sharding = SHARDREC_SHARDING_TABLE_WISE;
  Scenario s = StandardScenario(1, side.sharding, SHARDREC_POOLING_SUM);
  s.num_features = 2;
  s.tables = {RefTable{"a", kRows, kDims[0], SHARDREC_POOLING_SUM, {0}, 0, 0, 0},
              RefTable{"b", kRows, kDims[1], SHARDREC_POOLING_SUM, {1}, 0, 0, 0}};
  s.sharding.assign(2, side.sharding);
  OnSide(side, s, [&](int, shardrec_embedding_t* coll, shardrec_mesh_t* mesh) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> spread(-0.5f, 0.5f);
    for (const RefTable& t : s.tables) {
      std::vector<float> w(static_cast<size_t>(t.rows) * t.dim);
      for (int64_t r = 0; r < t.rows; ++r) {
        const float center = (r % 3 == 0 ? -1.0f : 1.0f) * (100.0f + static_cast<float>(r));
        for (int32_t c = 0; c < t.dim; ++c) w[r * t.dim + c] = center + spread(rng);
      }
      ASSERT_EQ(shardrec_embedding_set_weights(coll, t.name.c_str(), w.data(), w.size()),
                SHARDREC_OK);
    }
    ASSERT_EQ(SaveOn(coll, mesh, dir), SHARDREC_OK) << shardrec_last_error();
  });
  return dir;
}

// Per table, each row's stored scale, bias and codes (row-major), as the handle serves them.
struct Stored {
  std::vector<float> scale, bias;
  std::vector<double> code;
};

std::vector<Stored> ReadStored(shardrec_inference_t* inf, int32_t storage) {
  const char* names[] = {"a", "b"};
  const double top = storage == SHARDREC_SERVING_INT8 ? 255 : 15;
  std::vector<int64_t> rows(kRows);
  for (int64_t r = 0; r < kRows; ++r) rows[r] = r;
  RefBatch one;  // bag r of each feature: row r alone, unweighted
  one.batch_size = kRows;
  one.lengths.assign(2 * kRows, 1);
  for (int f = 0; f < 2; ++f) one.ids.insert(one.ids.end(), rows.begin(), rows.end());
  const std::vector<float> out = Lookup(inf, one, 2);
  const int32_t width = kDims[0] + kDims[1];
  std::vector<Stored> st(2);
  for (int t = 0; t < 2; ++t) {
    st[t].scale.resize(kRows);
    st[t].bias.resize(kRows);
    EXPECT_EQ(shardrec_inference_row_scales(inf, names[t], rows.data(), kRows, st[t].scale.data(),
                                            st[t].bias.data(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    for (int64_t r = 0; r < kRows; ++r)
      for (int32_t c = 0; c < kDims[t]; ++c) {
        const float s = st[t].scale[r], b = st[t].bias[r];
        const float v = out[r * width + (t == 0 ? 0 : kDims[0]) + c];
        const double q = s == 0.0f ? 0.0 : std::nearbyint((double{v} - b) / s);
        EXPECT_TRUE(q >= 0 && q <= top) << "table " << t << " row " << r << ": code " << q;
        EXPECT_EQ(Rounded(Rounded(static_cast<float>(q) * s) + b), v)
            << "table " << t << " row " << r << " column " << c << ": not a stored value";
        st[t].code.push_back(q);
      }
  }
  return st;
}

TEST(InferenceFold, Int8Int4WithinTheRoundingBound) {
  const std::string dir = SaveFarFromZero();
  if (::testing::Test::HasFatalFailure()) return;
  std::mt19937 rng(9);
  std::uniform_int_distribution<int64_t> id(0, kRows - 1);
  std::uniform_real_distribution<float> weight(-2.0f, 2.0f);
  const std::vector<int32_t> lengths = {0, 1, 2, 7, 50, 300, 33};
  const auto B = static_cast<int64_t>(lengths.size());
  for (const int32_t storage : {SHARDREC_SERVING_INT8, SHARDREC_SERVING_INT4}) {
    InferencePtr inf = Open(dir, storage);
    ASSERT_TRUE(inf);
    const std::vector<Stored> st = ReadStored(inf.get(), storage);
    if (::testing::Test::HasFailure()) return;
    for (const bool weighted : {false, true}) {
      RefBatch b;
      b.batch_size = B;
      for (int f = 0; f < 2; ++f)
        for (const int32_t n : lengths) {
          b.lengths.push_back(n);
          for (int32_t k = 0; k < n; ++k) {
            b.ids.push_back(id(rng));
            if (weighted) b.weights.push_back(weight(rng));
          }
        }
      const std::vector<float> got = Lookup(inf.get(), b, 2);
      const int32_t width = kDims[0] + kDims[1];
      ASSERT_EQ(got.size(), static_cast<size_t>(B * width));
      double worst = 0;  // the largest error as a share of its bound
      size_t pos = 0;
      for (int t = 0; t < 2; ++t) {
        for (int64_t k = 0; k < B; ++k) {
          const int32_t n = lengths[k];
          const double g = (n + 3) * std::ldexp(1.0, -24);
          for (int32_t c = 0; c < kDims[t]; ++c) {
            double sum = 0, mag = 0;
            for (size_t i = pos; i < pos + static_cast<size_t>(n); ++i) {
              const int64_t r = b.ids[i];
              const double w = weighted ? b.weights[i] : 1.0;
              const double qs = st[t].code[r * kDims[t] + c] * st[t].scale[r];
              sum += w * (qs + st[t].bias[r]);
              mag += std::fabs(w) * (std::fabs(qs) + std::fabs(double{st[t].bias[r]}));
            }
            const double bound = g / (1 - g) * mag;
            const double err = std::fabs(got[k * width + (t == 0 ? 0 : kDims[0]) + c] - sum);
            ASSERT_LE(err, bound) << "storage " << storage << (weighted ? " weighted" : "")
                                  << " table " << t << " bag " << k << " column " << c;
            if (bound > 0) worst = std::max(worst, err / bound);
          }
          pos += static_cast<size_t>(n);
        }
      }
      std::printf("storage %d%s: largest error %.3f of the bound\n", storage,
                  weighted ? " weighted" : "", worst);
    }
  }
}

}  // namespace
}  // namespace shardrec::testing
