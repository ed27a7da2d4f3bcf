// Helpers of the inference C API tests (inference_test_util.h).
#include "tests/capi/inference/inference_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

std::vector<float> Forward(shardrec_embedding_t* coll, const RefBatch& b, int32_t num_features) {
  KjtHolder kjt(b, num_features, false);
  int64_t dim = 0;
  int32_t seq = 0;
  EXPECT_EQ(shardrec_embedding_output_dim(coll, &dim), SHARDREC_OK);
  EXPECT_EQ(shardrec_embedding_is_sequence(coll, &seq), SHARDREC_OK);
  std::vector<float> out((seq ? b.ids.size() : static_cast<size_t>(b.batch_size)) * dim);
  EXPECT_EQ(shardrec_embedding_forward(coll, kjt.view(), out.data(), out.size(), nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  return out;
}

// Half the spacing of `storage`'s values near |x|, plus the fp32 rounding of the decode, as a
// bound on |stored - x| for an element of a row whose quantization scale is `scale`.
double ElementBound(int32_t storage, double x, double scale) {
  const double ax = std::fabs(x);
  switch (storage) {
    case SHARDREC_SERVING_FP16:
      return ax * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
    case SHARDREC_SERVING_BF16:
      return ax * std::ldexp(1.0, -8) + std::ldexp(1.0, -133);
    case SHARDREC_SERVING_INT8:
    case SHARDREC_SERVING_INT4:
      return scale / 2 + (ax + scale) * std::ldexp(1.0, -22);
    case SHARDREC_SERVING_FP8_E4M3:  // decoding is exact: the encoding's bound alone
      return std::max(ax * std::ldexp(1.0, -4), scale * std::ldexp(1.0, -10));
    case SHARDREC_SERVING_FP8_E5M2:
      return std::max(ax * std::ldexp(1.0, -3), scale * std::ldexp(1.0, -17));
    default:
      return 0.0;
  }
}

// The value of FP8 code `c` from the definitions: E4M3 (bias 7, 3 mantissa bits, no
// infinities, S.1111.111 NaN) or E5M2 (bias 15, 2 bits, IEEE-like); NaN for a non-finite code.
double Fp8Value(bool e4m3, int c) {
  const int m_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int e = (c & 0x7F) >> m_bits, m = c & ((1 << m_bits) - 1);
  const int top = (1 << (7 - m_bits)) - 1;
  if (e4m3 ? (e == top && m == (1 << m_bits) - 1) : e == top) return NAN;
  const double mag =
      e == 0 ? std::ldexp(m, 1 - bias - m_bits) : std::ldexp((1 << m_bits) + m, e - bias - m_bits);
  return (c & 0x80) ? -mag : mag;
}

}  // namespace

float Fp8Scale(int32_t storage, const float* x, int32_t dim) {
  const bool e4m3 = storage == SHARDREC_SERVING_FP8_E4M3;
  double amax = 0;
  for (int32_t c = 0; c < dim; ++c) amax = std::max(amax, std::fabs(static_cast<double>(x[c])));
  if (amax == 0) return 1.0f;  // an all-zero row
  int k = -126;
  while (k < 111 &&
         (e4m3 ? amax / std::ldexp(1.0, k) > 464.0 : amax / std::ldexp(1.0, k) >= 61440.0))
    ++k;
  return static_cast<float>(std::ldexp(1.0, k));
}

void Fp8RoundTrip(int32_t storage, const float* x, int32_t dim, float* out) {
  const bool e4m3 = storage == SHARDREC_SERVING_FP8_E4M3;
  const double scale = Fp8Scale(storage, x, dim);
  for (int32_t c = 0; c < dim; ++c) {
    const double v = x[c] / scale;
    int best = -1;
    for (int code = 0; code < 256; ++code) {
      const double d = Fp8Value(e4m3, code);
      if (std::isnan(d)) continue;
      if (best < 0) {
        best = code;
        continue;
      }
      const double now = std::fabs(d - v), was = std::fabs(Fp8Value(e4m3, best) - v);
      if (now < was || (now == was && (code & 1) == 0 && (best & 1) == 1)) best = code;
    }
    out[c] = static_cast<float>(Fp8Value(e4m3, best) * scale);
  }
}

Trained TrainAndSave(const Side& side, int32_t pooling, bool weighted, int32_t max_bag) {
  Trained t;
  const int32_t group = side.shard_size ? side.shard_size : side.world;
  Scenario s = StandardScenario(group, side.sharding, pooling);
  s.min_partition = side.min_partition;
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAGRAD;
  s.optimizer.lr = 0.05f;
  s.weighted = weighted;
  s.max_bag = max_bag;
  for (RefTable& rt : s.tables) rt.dtype = side.dtype;
  t.s = s;
  t.trained_dir = FreshDir("trained");
  t.dyadic_dir = FreshDir("dyadic");
  Scenario g = s;
  g.world = side.world;
  g.steps = 4;
  ReferenceModel ref(g.num_features, g.tables, g.optimizer, g.seed, g.world);
  const auto batches = MakeBatches(g, ref);
  for (int32_t r = 0; r < side.world; ++r) {
    t.batches.push_back(batches[2][r]);
    RefBatch d = batches[3][r];
    for (float& w : d.weights) w = std::round(w * 8.0f) / 8.0f;
    t.dyadic_batches.push_back(d);
  }
  t.trained_out.resize(side.world);
  t.dyadic_out.resize(side.world);
  t.weights.resize(s.tables.size());
  OnSide(side, s, [&](int r, shardrec_embedding_t* coll, shardrec_mesh_t* mesh) {
    TrainSteps(side, s, r, coll, mesh, 0, 2);
    ASSERT_EQ(SaveOn(coll, mesh, t.trained_dir), SHARDREC_OK) << shardrec_last_error();
    t.trained_out[r] = Forward(coll, t.batches[r], s.num_features);
    for (size_t k = 0; k < s.tables.size(); ++k) {
      const RefTable& rt = s.tables[k];
      std::vector<float> w(static_cast<size_t>(rt.rows) * rt.dim);
      ASSERT_EQ(shardrec_embedding_get_weights(coll, rt.name.c_str(), w.data(), w.size()),
                SHARDREC_OK);
      if (r == 0) t.weights[k] = w;
      // + 0.0f: no -0 (a data-parallel sequence lookup copies a row's -0, the others add it to
      // +0), so the sign of a zero never depends on the sharding type.
      for (float& x : w) x = std::round(x * 256.0f) / 256.0f + 0.0f;
      ASSERT_EQ(shardrec_embedding_set_weights(coll, rt.name.c_str(), w.data(), w.size()),
                SHARDREC_OK);
    }
    ASSERT_EQ(SaveOn(coll, mesh, t.dyadic_dir), SHARDREC_OK) << shardrec_last_error();
    t.dyadic_out[r] = Forward(coll, t.dyadic_batches[r], s.num_features);
  });
  return t;
}

InferencePtr Open(const std::string& path, int32_t storage, int32_t bounds) {
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.default_storage = storage;
  o.bounds_policy = bounds;
  shardrec_inference_t* inf = nullptr;
  EXPECT_EQ(shardrec_inference_open(path.c_str(), &o, &inf), SHARDREC_OK)
      << path << ": " << shardrec_last_error();
  return InferencePtr(inf);
}

std::vector<float> Lookup(shardrec_inference_t* inf, const RefBatch& b, int32_t num_features,
                          uint64_t* version) {
  KjtHolder kjt(b, num_features, false);
  int64_t dim = 0;
  int32_t seq = 0;
  EXPECT_EQ(shardrec_inference_output_dim(inf, &dim), SHARDREC_OK);
  EXPECT_EQ(shardrec_inference_is_sequence(inf, &seq), SHARDREC_OK);
  std::vector<float> out((seq ? b.ids.size() : static_cast<size_t>(b.batch_size)) * dim, NAN);
  EXPECT_EQ(shardrec_inference_lookup(inf, kjt.view(), out.data(), out.size(), version),
            SHARDREC_OK)
      << shardrec_last_error();
  return out;
}

void ExactAndBound(const Scenario& s, const std::vector<std::vector<float>>& weights,
                   const RefBatch& b, int32_t storage, std::vector<double>* exact,
                   std::vector<double>* bound) {
  const bool seq = s.tables[0].pooling == SHARDREC_POOLING_NONE;
  const int64_t B = b.batch_size;
  const int bits = storage == SHARDREC_SERVING_INT8 ? 8 : 4;
  // Per table and row, the quantization scale the library stores: (max - min) / (2^bits - 1);
  // FP8: the power of two that fits the row's largest magnitude (fp8.h).
  auto scale = [&](size_t t, int64_t row) {
    const int32_t dim = s.tables[t].dim;
    const float* x = weights[t].data() + row * dim;
    if (storage == SHARDREC_SERVING_FP8_E4M3 || storage == SHARDREC_SERVING_FP8_E5M2)
      return static_cast<double>(Fp8Scale(storage, x, dim));
    const float lo = *std::min_element(x, x + dim), hi = *std::max_element(x, x + dim);
    return static_cast<double>((hi - lo) / static_cast<float>((1 << bits) - 1));
  };
  // INT8/INT4 pooled sums fold the dequantization (docs/serving.md): their rounding is relative
  // to |q·scale| + |bias| <= |x| + e + 2 |bias|, the bias being the row's minimum.
  const bool folded = storage == SHARDREC_SERVING_INT8 || storage == SHARDREC_SERVING_INT4;
  auto bias = [&](size_t t, int64_t row) {
    const int32_t dim = s.tables[t].dim;
    const float* x = weights[t].data() + row * dim;
    return folded ? static_cast<double>(*std::min_element(x, x + dim)) : 0.0;
  };
  std::vector<size_t> begin(s.num_features + 1, 0);
  for (int32_t f = 0; f < s.num_features; ++f) {
    size_t n = 0;
    for (int64_t k = 0; k < B; ++k) n += b.lengths[f * B + k];
    begin[f + 1] = begin[f] + n;
  }
  int64_t width = 0;
  for (const RefTable& t : s.tables)
    width += seq ? 0 : static_cast<int64_t>(t.dim * t.features.size());
  if (seq) width = s.tables[0].dim;
  const size_t rows = seq ? b.ids.size() : static_cast<size_t>(B);
  exact->assign(rows * width, 0.0);
  bound->assign(rows * width, 0.0);
  int64_t offset = 0;
  for (int32_t f = 0; f < s.num_features; ++f) {
    for (size_t t = 0; t < s.tables.size(); ++t) {
      const RefTable& rt = s.tables[t];
      if (std::find(rt.features.begin(), rt.features.end(), f) == rt.features.end()) continue;
      size_t pos = begin[f];
      for (int64_t k = 0; k < B; ++k) {
        const int32_t len = b.lengths[f * B + k];
        for (int32_t c = 0; c < rt.dim; ++c) {
          double sum = 0, err = 0, mag = 0, div = 0;
          for (size_t i = pos; i < pos + len; ++i) {
            const double w = b.weights.empty() ? 1.0 : b.weights[i];
            const double x = weights[t][b.ids[i] * rt.dim + c];
            const double e = ElementBound(storage, x, bits ? scale(t, b.ids[i]) : 0.0);
            if (seq) {
              (*exact)[i * width + c] = w * x;
              (*bound)[i * width + c] = std::fabs(w) * e + std::fabs(w * x) * std::ldexp(1.0, -23);
              continue;
            }
            sum += w * x;
            err += std::fabs(w) * e;
            mag += std::fabs(w) * (std::fabs(x) + e + 2 * std::fabs(bias(t, b.ids[i])));
            div += w;
          }
          if (seq) continue;
          // fp32 accumulation: each add and multiply rounds once (relative 2^-24 each).
          double bnd = err + (len + 2) * mag * std::ldexp(1.0, -23);
          if (rt.pooling == SHARDREC_POOLING_MEAN && div != 0) {
            sum /= div;
            bnd = bnd / div + std::fabs(sum) * (len + 2) * std::ldexp(1.0, -23);
          }
          (*exact)[k * width + offset + c] = sum;
          (*bound)[k * width + offset + c] = bnd;
        }
        pos += len;
      }
      if (!seq) offset += rt.dim;
    }
  }
}

}  // namespace shardrec::testing
