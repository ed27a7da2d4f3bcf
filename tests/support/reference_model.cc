// The unsharded reference model: full tables, the global batch, plain loops.
#include "tests/support/reference_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "impl/core/rng.h"
#include "impl/optim/rounding.h"

namespace shardrec::testing {

float RoundToStorage(float x, int32_t dtype) {
  if (dtype == 0 || IsFp8Storage(dtype) || x == 0.0f || !std::isfinite(x)) return x;
  // Significand bits after the leading one, smallest normal exponent, largest finite value.
  const int mant = dtype == 1 ? 10 : 7;
  const int min_exp = dtype == 1 ? -14 : -126;
  const double max_finite = dtype == 1 ? 65504.0 : 3.3895313892515355e38;
  int e2 = 0;
  std::frexp(static_cast<double>(x), &e2);  // |x| = m * 2^e2, m in [0.5, 1)
  const int e = std::max(e2 - 1, min_exp);  // exponent of the leading bit (subnormals clamp)
  const double quantum = std::ldexp(1.0, e - mant);
  // x / quantum is exact in double; nearbyint rounds half to even in the default mode.
  const double r = std::nearbyint(static_cast<double>(x) / quantum) * quantum;
  if (std::fabs(r) > max_finite) return x > 0 ? INFINITY : -INFINITY;
  return static_cast<float>(r);
}

namespace {

// x rounded to nearest even with `mant` bits after the leading one and smallest normal exponent
// `min_exp`, the exponent unbounded above (double arithmetic, exact for these widths).
double RoundBits(double x, int mant, int min_exp) {
  if (x == 0.0) return x;
  int e2 = 0;
  std::frexp(x, &e2);
  const int e = std::max(e2 - 1, min_exp);
  const double quantum = std::ldexp(1.0, e - mant);
  return std::nearbyint(x / quantum) * quantum;
}

// x rounded as RoundBits's grid, stochastically: away from zero iff its fraction of a step is at
// least 1 - bits x 2^-32 (both sides exact in double: the fraction of a float over a power of
// two, and a 33-bit integer over 2^32).
double RoundBitsStochastic(double x, int mant, int min_exp, uint32_t bits) {
  if (x == 0.0) return x;
  int e2 = 0;
  std::frexp(x, &e2);
  const int e = std::max(e2 - 1, min_exp);
  const double quantum = std::ldexp(1.0, e - mant);
  const double n = std::fabs(x) / quantum;
  const double lo = std::floor(n);
  const double need = std::ldexp(4294967296.0 - static_cast<double>(bits), -32);
  const double r = (n - lo >= need ? lo + 1.0 : lo) * quantum;
  return x < 0 ? -r : r;
}

}  // namespace

void RoundRowToFp8(float* row, int32_t dim, int32_t dtype, const uint32_t* bits) {
  const bool e4m3 = dtype == 7;
  const int mant = e4m3 ? 3 : 2;
  const int min_exp = e4m3 ? -6 : -14;
  const double max_finite = e4m3 ? 448.0 : 57344.0;
  const double fit = e4m3 ? 464.0 : 61440.0;
  double amax = 0;
  for (int32_t c = 0; c < dim; ++c)
    if (std::isfinite(row[c])) amax = std::max(amax, std::fabs(static_cast<double>(row[c])));
  int k = 0;
  if (amax > 0) {
    k = -126;
    while (k < 111 && amax / std::ldexp(1.0, k) > fit) ++k;
  }
  const double scale = std::ldexp(1.0, k);
  for (int32_t c = 0; c < dim; ++c) {
    const float x = row[c];
    if (std::isnan(x)) continue;
    const double y = static_cast<double>(x) / scale;
    double r = std::isinf(x)     ? (x > 0 ? max_finite : -max_finite)
               : bits != nullptr ? RoundBitsStochastic(y, mant, min_exp, bits[c])
                                 : RoundBits(y, mant, min_exp);
    r = std::min(max_finite, std::max(-max_finite, r));
    row[c] = static_cast<float>(r * scale);
  }
}

void RoundRowToStorage(float* row, int32_t dim, int32_t dtype) {
  if (IsFp8Storage(dtype)) {
    RoundRowToFp8(row, dim, dtype);
    return;
  }
  for (int32_t c = 0; c < dim; ++c) row[c] = RoundToStorage(row[c], dtype);
}

float RefInitValue(const RefTable& t, uint64_t seed, uint64_t row, int32_t col) {
  float low = t.init_low, high = t.init_high;
  if (t.init_kind == 0) {
    high = static_cast<float>(std::sqrt(1.0 / static_cast<double>(t.rows)));
    low = -high;
  }
  return t.init_kind == 2 ? low
                          : low + (high - low) * UniformAt(seed, HashName(t.name), row,
                                                           static_cast<uint64_t>(col));
}

ReferenceModel::ReferenceModel(int32_t num_features, std::vector<RefTable> tables,
                               RefOptimizer optimizer, uint64_t seed, int32_t world)
    : num_features_(num_features),
      tables_(std::move(tables)),
      opt_(optimizer),
      world_(world),
      seed_(seed) {
  for (const RefTable& t : tables_) {
    float low = t.init_low, high = t.init_high;
    if (t.init_kind == 0) {
      high = static_cast<float>(std::sqrt(1.0 / static_cast<double>(t.rows)));
      low = -high;
    }
    std::vector<float> w(static_cast<size_t>(t.rows) * t.dim);
    for (int64_t r = 0; r < t.rows; ++r)
      for (int32_t c = 0; c < t.dim; ++c)
        w[r * t.dim + c] =
            t.init_kind == 2 ? low : low + (high - low) * UniformAt(seed, HashName(t.name), r, c);
    for (int64_t r = 0; r < t.rows; ++r) RoundRowToStorage(w.data() + r * t.dim, t.dim, t.dtype);
    weights_.push_back(std::move(w));
    const size_t full = static_cast<size_t>(t.rows) * t.dim;
    const bool m1 = opt_.type != 0;
    const bool m1_row = opt_.type == 2;
    const bool m2 = opt_.type >= 3;
    const bool m2_row = opt_.type == 4;
    m1_.emplace_back(m1 ? (m1_row ? static_cast<size_t>(t.rows) : full) : 0, 0.0f);
    m2_.emplace_back(m2 ? (m2_row ? static_cast<size_t>(t.rows) : full) : 0, 0.0f);
  }
}

bool ReferenceModel::sequence() const { return tables_[0].pooling == 2; }

int64_t ReferenceModel::output_dim() const {
  if (sequence()) return tables_[0].dim;
  int64_t d = 0;
  for (int32_t f = 0; f < num_features_; ++f)
    for (const RefTable& t : tables_)
      for (int32_t tf : t.features)
        if (tf == f) d += t.dim;
  return d;
}

const std::vector<float>& ReferenceModel::state(size_t table, const std::string& name) const {
  if (name == "momentum1") return m1_[table];
  if (name == "momentum2") return m2_[table];
  return empty_;
}

std::vector<ReferenceModel::Occurrence> ReferenceModel::Occurrences(const RefBatch& b) const {
  std::vector<Occurrence> occ;
  const int64_t B = b.batch_size;
  const int64_t D = output_dim();
  size_t pos = 0;
  int64_t col = 0;
  for (int32_t f = 0; f < num_features_; ++f) {
    size_t feature_pos = pos;
    for (int64_t bb = 0; bb < B; ++bb) pos += static_cast<size_t>(b.lengths[f * B + bb]);
    for (size_t t = 0; t < tables_.size(); ++t) {
      bool reads = false;
      for (int32_t tf : tables_[t].features) reads |= tf == f;
      if (!reads) continue;
      size_t p = feature_pos;
      for (int64_t bb = 0; bb < B; ++bb) {
        const int32_t len = b.lengths[f * B + bb];
        float div = 0.0f;
        for (int32_t k = 0; k < len; ++k) div += b.weights.empty() ? 1.0f : b.weights[p + k];
        for (int32_t k = 0; k < len; ++k) {
          const size_t i = p + static_cast<size_t>(k);
          const float w = b.weights.empty() ? 1.0f : b.weights[i];
          Occurrence o;
          o.table = t;
          o.row = b.ids[i];
          o.cols = tables_[t].dim;
          if (sequence()) {
            o.grad_offset = i * static_cast<size_t>(D);
            o.scale = w;
          } else {
            o.grad_offset = static_cast<size_t>(bb * D + col);
            o.scale = tables_[t].pooling == 1 ? (div != 0.0f ? w / div : 0.0f) : w;
          }
          occ.push_back(o);
        }
        p += static_cast<size_t>(len);
      }
      if (!sequence()) col += tables_[t].dim;
    }
  }
  return occ;
}

std::vector<float> ReferenceModel::Forward(const RefBatch& b) const {
  const int64_t D = output_dim();
  const size_t rows = sequence() ? b.ids.size() : static_cast<size_t>(b.batch_size);
  std::vector<float> out(rows * static_cast<size_t>(D), 0.0f);
  for (const Occurrence& o : Occurrences(b)) {
    const float* w = weights_[o.table].data() + o.row * o.cols;
    for (int32_t c = 0; c < o.cols; ++c) out[o.grad_offset + c] += o.scale * w[c];
  }
  return out;
}

void ReferenceModel::Backward(const std::vector<RefBatch>& batches,
                              const std::vector<std::vector<float>>& grads) {
  ++step_;
  // Sum of every occurrence's gradient per (table, row), over all ranks, then / world.
  std::vector<std::map<int64_t, std::vector<double>>> acc(tables_.size());
  for (size_t r = 0; r < batches.size(); ++r) {
    for (const Occurrence& o : Occurrences(batches[r])) {
      auto& g = acc[o.table][o.row];
      g.resize(o.cols, 0.0);
      for (int32_t c = 0; c < o.cols; ++c)
        g[c] += static_cast<double>(grads[r][o.grad_offset + c]) * o.scale;
    }
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    for (auto& [row, g] : acc[t]) {
      std::vector<float> gf(g.size());
      for (size_t c = 0; c < g.size(); ++c) gf[c] = static_cast<float>(g[c] / world_);
      Update(t, row, gf.data());
    }
  }
}

void ReferenceModel::Update(size_t t, int64_t row, const float* g_in) {
  const int32_t D = tables_[t].dim;
  float* w = weights_[t].data() + row * D;
  const float lr = opt_.lr, eps = opt_.eps, b1 = opt_.beta1, b2 = opt_.beta2;
  const float l2 = opt_.weight_decay_mode == 1 ? opt_.weight_decay : 0.0f;
  const float dwd = opt_.weight_decay_mode == 2 ? opt_.weight_decay : 0.0f;
  std::vector<float> g(D), w0(w, w + D);
  for (int32_t c = 0; c < D; ++c) g[c] = g_in[c] + l2 * w0[c];
  const double t_step = static_cast<double>(step_);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t_step));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), t_step));
  double mean_sq = 0.0;
  for (int32_t c = 0; c < D; ++c) mean_sq += static_cast<double>(g[c]) * g[c];
  mean_sq /= D;
  switch (opt_.type) {
    case 0:  // SGD
      for (int32_t c = 0; c < D; ++c) w[c] = w0[c] - lr * (g[c] + dwd * w0[c]);
      break;
    case 1: {  // Adagrad
      float* m = m1_[t].data() + row * D;
      for (int32_t c = 0; c < D; ++c) {
        m[c] += g[c] * g[c];
        w[c] = w0[c] - lr * (g[c] / (std::sqrt(m[c]) + eps) + dwd * w0[c]);
      }
      break;
    }
    case 2: {  // row-wise Adagrad: FBGEMM applies L2 through the correction, step with raw g
      float& m = m1_[t][row];
      m += static_cast<float>(mean_sq);
      const float mult = lr / (std::sqrt(m) + eps);
      for (int32_t c = 0; c < D; ++c) w[c] = (1.0f - mult * l2 - lr * dwd) * w0[c] - mult * g_in[c];
      break;
    }
    case 3: {  // Adam
      float* m = m1_[t].data() + row * D;
      float* v = m2_[t].data() + row * D;
      for (int32_t c = 0; c < D; ++c) {
        m[c] = b1 * m[c] + (1 - b1) * g[c];
        v[c] = b2 * v[c] + (1 - b2) * g[c] * g[c];
        const float dir = (m[c] / bc1) / (std::sqrt(v[c] / bc2) + eps);
        w[c] = w0[c] - lr * (dir + dwd * w0[c]);
      }
      break;
    }
    case 4: {  // partial row-wise Adam
      float* m = m1_[t].data() + row * D;
      float& v = m2_[t][row];
      v = b2 * v + (1 - b2) * static_cast<float>(mean_sq);
      for (int32_t c = 0; c < D; ++c) {
        m[c] = b1 * m[c] + (1 - b1) * g[c];
        const float dir = (m[c] / bc1) / (std::sqrt(v / bc2) + eps);
        w[c] = w0[c] - lr * (dir + dwd * w0[c]);
      }
      break;
    }
    case 5: {  // LAMB
      float* m = m1_[t].data() + row * D;
      float* v = m2_[t].data() + row * D;
      std::vector<float> r(D);
      double wn = 0, rn = 0;
      for (int32_t c = 0; c < D; ++c) {
        m[c] = b1 * m[c] + (1 - b1) * g[c];
        v[c] = b2 * v[c] + (1 - b2) * g[c] * g[c];
        r[c] = (m[c] / bc1) / (std::sqrt(v[c] / bc2) + eps) + dwd * w0[c];
        wn += static_cast<double>(w0[c]) * w0[c];
        rn += static_cast<double>(r[c]) * r[c];
      }
      const float ratio =
          (wn > 0 && rn > 0) ? static_cast<float>(std::sqrt(wn) / std::sqrt(rn)) : 1.0f;
      for (int32_t c = 0; c < D; ++c) w[c] = w0[c] - lr * ratio * r[c];
      break;
    }
    default:
      throw std::invalid_argument("reference model: unknown optimizer type");
  }
  if (opt_.stochastic_rounding && IsFp8Storage(tables_[t].dtype)) {
    std::vector<uint32_t> bits(D);
    for (int32_t c = 0; c < D; ++c)
      bits[c] = optim::RoundingBits(seed_, step_, HashName(tables_[t].name), row, c);
    RoundRowToFp8(w, D, tables_[t].dtype, bits.data());
    return;
  }
  RoundRowToStorage(w, D, tables_[t].dtype);
}

}  // namespace shardrec::testing
