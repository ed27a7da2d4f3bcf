// Internal: the fused backward of isa/fused_rows.h written once over a vector type I (the
// level's simd_*.h), included by exactly one translation unit per instruction set. Everything
// here has internal linkage (an anonymous namespace), and the update rules are instantiated only
// with this file's own types (Vec, Scalar), so no copy built for a wide instruction set can
// stand in for the baseline one at link time. Library calls are avoided for the same reason.
//
// I provides what isa/bag_sum_body.h's V does, plus Sub, Div, Sqrt, LoadFirst(p, n),
// StoreFirst(p, v, n), KeepFirst(v, n) for n < kWidth, and, with kWidth >= 4, QuadShift<i> and
// FoldQuads for the row statistics' lane order.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "impl/core/prefetch.h"
#include "impl/embedding/kernels/isa/fp8_rows_body.h"
#include "impl/embedding/kernels/isa/fused_rows.h"
#include "impl/embedding/kernels/isa/scalar_half.h"
#include "impl/optim/dispatch.h"
#include "impl/optim/optimizer.h"
#include "impl/optim/update_rules.h"

namespace shardrec::embedding::kernels::isa {
namespace {

// A register of floats for the update rules: each lane takes exactly the scalar rule's IEEE
// operations.
template <class I>
struct Vec {
  typename I::Reg v;
  Vec() = default;
  Vec(float f) : v(I::Set1(f)) {}  // NOLINT: the rules mix float scalars into vector terms
  static Vec Of(typename I::Reg r) {
    Vec x;
    x.v = r;
    return x;
  }
};

template <class I>
Vec<I> operator+(Vec<I> a, Vec<I> b) {
  return Vec<I>::Of(I::Add(a.v, b.v));
}
template <class I>
Vec<I> operator-(Vec<I> a, Vec<I> b) {
  return Vec<I>::Of(I::Sub(a.v, b.v));
}
template <class I>
Vec<I> operator*(Vec<I> a, Vec<I> b) {
  return Vec<I>::Of(I::Mul(a.v, b.v));
}
template <class I>
Vec<I> operator/(Vec<I> a, Vec<I> b) {
  return Vec<I>::Of(I::Div(a.v, b.v));
}
#define SHARDREC_VEC_SCALAR_OP(op)        \
  template <class I>                      \
  Vec<I> operator op(Vec<I> a, float b) { \
    return a op Vec<I>(b);                \
  }                                       \
  template <class I>                      \
  Vec<I> operator op(float a, Vec<I> b) { \
    return Vec<I>(a) op b;                \
  }
SHARDREC_VEC_SCALAR_OP(+)
SHARDREC_VEC_SCALAR_OP(-)
SHARDREC_VEC_SCALAR_OP(*)
SHARDREC_VEC_SCALAR_OP(/)
#undef SHARDREC_VEC_SCALAR_OP
template <class I>
Vec<I> RuleSqrt(Vec<I> a) {
  return Vec<I>::Of(I::Sqrt(a.v));
}

// A per-row scalar for the rules (row states, multipliers, LAMB's ratio). No conversion back to
// float, so the rules never reach the library's float instantiations from here.
struct Scalar {
  float v;
  Scalar(float f) : v(f) {}  // NOLINT: as Vec
};
inline Scalar operator+(Scalar a, Scalar b) { return Scalar(a.v + b.v); }
inline Scalar operator-(Scalar a, Scalar b) { return Scalar(a.v - b.v); }
inline Scalar operator*(Scalar a, Scalar b) { return Scalar(a.v * b.v); }
inline Scalar operator/(Scalar a, Scalar b) { return Scalar(a.v / b.v); }
inline bool operator>(Scalar a, Scalar b) { return a.v > b.v; }
inline Scalar RuleSqrt(Scalar a) { return Scalar(__builtin_sqrtf(a.v)); }

// One row of cols floats seen as registers: full ones, then (n < kWidth) a partial one.
template <class I>
struct RowIo {
  int32_t cols;
  int64_t Regs() const { return (cols + I::kWidth - 1) / I::kWidth; }
  int Valid(int64_t j) const {
    const int64_t left = cols - j * I::kWidth;
    return left >= I::kWidth ? I::kWidth : static_cast<int>(left);
  }
  Vec<I> Load(const float* p, int64_t j) const {
    const int n = Valid(j);
    return Vec<I>::Of(n == I::kWidth ? I::LoadF32(p + j * I::kWidth)
                                     : I::LoadFirst(p + j * I::kWidth, n));
  }
  void Store(float* p, int64_t j, Vec<I> v) const {
    const int n = Valid(j);
    if (n == I::kWidth)
      I::Store(p + j * I::kWidth, v.v);
    else
      I::StoreFirst(p + j * I::kWidth, v.v, n);
  }
  // v with the elements past the row's end zeroed (they must add nothing to a row sum).
  Vec<I> Clip(Vec<I> v, int64_t j) const {
    const int n = Valid(j);
    return n == I::kWidth ? v : Vec<I>::Of(I::KeepFirst(v.v, n));
  }
};

// A row sum in the shared lane order, fed one register of terms at a time in column order.
// Lane l (column quads l, l + 32, ...) sits at the first element of quad l % Q of register
// (l / Q) % R (Q quads per register, R = 32 / Q registers: one block of 128 columns); each
// register's terms are added quad element by quad element, so every lane adds its terms in
// column order from +0, and Finish runs CombineLanes' tree over the registers and then inside
// the first one. Elements other than the quads' first hold partial sums nobody reads.
template <class I>
struct LaneSum {
  static constexpr int kQuads = I::kWidth / 4;
  static constexpr int kRegs = 32 / kQuads;
  typename I::Reg acc[kRegs];
  // Each register zeroed by its own store: written as a loop, GCC turns the stores into a
  // `rep stos` of 512 bytes, whose start-up cost showed in every row's update.
  LaneSum() { ZeroAll(std::make_integer_sequence<int, kRegs>{}); }
  template <int... r>
  void ZeroAll(std::integer_sequence<int, r...>) {
    ((acc[r] = I::Zero()), ...);
  }
  // The terms of register j of the row (columns j * kWidth on), past-the-end ones zero.
  void Add(int64_t j, Vec<I> t) {
    typename I::Reg& a = acc[j % kRegs];
    a = I::Add(a, t.v);
    a = I::Add(a, I::template QuadShift<1>(t.v));
    a = I::Add(a, I::template QuadShift<2>(t.v));
    a = I::Add(a, I::template QuadShift<3>(t.v));
  }
  float Finish() {
    for (int off = kRegs / 2; off >= 1; off /= 2)
      for (int r = 0; r < off; ++r) acc[r] = I::Add(acc[r], acc[r + off]);
    return I::FoldQuads(acc[0]);
  }
};

// The same sum for a level without vectors (one float per register, column j): 32 scalar lanes.
template <class I>
struct ScalarLaneSum {
  float acc[32] = {};
  void Add(int64_t j, Vec<I> t) {
    const int l = static_cast<int>((j >> 2) & 31);
    acc[l] = acc[l] + t.v;
  }
  float Finish() {
    for (int off = 16; off >= 1; off /= 2)
      for (int l = 0; l < off; ++l) acc[l] = acc[l] + acc[l + off];
    return acc[0];
  }
};

// The lane sum of a level.
template <class I>
using Lanes = std::conditional_t<(I::kWidth >= 4), LaneSum<I>, ScalarLaneSum<I>>;

// Sums over the row of term(j) (a register of terms, past-the-end elements zero).
template <class I, class Term>
float RowSum(const RowIo<I>& io, Term&& term) {
  Lanes<I> s;
  for (int64_t j = 0; j < io.Regs(); ++j) s.Add(j, term(j));
  return s.Finish();
}

// g = the row's gradient: the contributions of keys [k0, k1), first assigned, then added, in
// registers kMax at a time. The first tile also prefetches the gradient rows grads_ahead keys on.
template <class I>
void SumRow(const FusedRowsArgs& a, int64_t k0, int64_t k1, float* g) {
  constexpr int kMax = I::kMaxRegsWithTemps;
  const int64_t cols = a.cols;
  const int64_t row_bytes = cols * 4;
  for (int64_t c0 = 0; c0 < cols; c0 += int64_t{kMax} * I::kWidth) {
    const int64_t left = cols - c0;
    const int64_t span = left < int64_t{kMax} * I::kWidth ? left : int64_t{kMax} * I::kWidth;
    const int regs = static_cast<int>((span + I::kWidth - 1) / I::kWidth);
    const int last = static_cast<int>(span - int64_t{regs - 1} * I::kWidth);  // in the last reg
    typename I::Reg acc[kMax];
    for (int64_t k = k0; k < k1; ++k) {
      if (c0 == 0 && k + a.grads_ahead < a.num_keys)
        core::PrefetchSpan(a.grad_rows[a.keys[k + a.grads_ahead] & a.index_mask], row_bytes);
      const int64_t i = static_cast<int64_t>(a.keys[k] & a.index_mask);
      const typename I::Reg f =
          I::Set1(a.id_weights != nullptr ? a.scale * a.id_weights[i] : a.scale);
      const float* src = a.grad_rows[i] + c0;
      for (int r = 0; r < regs; ++r) {
        const typename I::Reg x = r + 1 < regs || last == I::kWidth
                                      ? I::LoadF32(src + r * I::kWidth)
                                      : I::LoadFirst(src + r * I::kWidth, last);
        acc[r] = k == k0 ? I::Mul(f, x) : I::Add(acc[r], I::Mul(f, x));
      }
    }
    for (int r = 0; r < regs; ++r) {
      if (r + 1 < regs || last == I::kWidth)
        I::Store(g + c0 + r * I::kWidth, acc[r]);
      else
        I::StoreFirst(g + c0 + r * I::kWidth, acc[r], last);
    }
  }
}

// Register j of an element-wise state of rule R (kElementState<R, i>) at `base`, loaded into
// *reg, or null when state i is not element-wise (the rule then never reads it).
template <class I, class R, int i>
Vec<I>* LoadState(const RowIo<I>& io, const float* base, int64_t j, Vec<I>* reg) {
  if constexpr (optim::kElementState<R, i>) {
    *reg = io.Load(base, j);
    return reg;
  }
  return nullptr;
}
template <class I, class R, int i>
void StoreState(const RowIo<I>& io, float* base, int64_t j, const Vec<I>& reg) {
  if constexpr (optim::kElementState<R, i>) io.Store(base, j, reg);
}

// Phase 1 of the optimizer's rule R on one fp32 row w (cols floats) with gradient g; m1 / m2
// point at the row's states (a row-wise one: its single value): the row statistics of this row's
// columns into stats (R::kNumStats of them; LAMB advances m and v here), as optim::PartialRowStats.
template <class I, class R>
void RowPhase1(const FusedRowsArgs& a, const float* w, const float* g, float* m1, float* m2,
               float* stats) {
  using V = Vec<I>;
  if constexpr (R::kNumStats > 0) {
    const RowIo<I> io{a.cols};
    const optim::RuleScalars& s = a.rules;
    const int64_t regs = io.Regs();
    Lanes<I> l0, l1;
    for (int64_t j = 0; j < regs; ++j) {
      const V wj = io.Load(w, j);
      V m = V::Of(I::Zero()), v = m;  // loaded where the rule reads them
      V* pm = nullptr;
      V* pv = nullptr;
      if constexpr (R::kStatsAdvanceStates) {
        pm = LoadState<I, R, 0>(io, m1, j, &m);
        pv = LoadState<I, R, 1>(io, m2, j, &v);
      }
      const optim::RowTerms<V> t = R::Terms(wj, io.Load(g, j), pm, pv, s);
      if constexpr (R::kStatsAdvanceStates) {
        StoreState<I, R, 0>(io, m1, j, m);
        StoreState<I, R, 1>(io, m2, j, v);
      }
      l0.Add(j, io.Clip(t.t0, j));
      if constexpr (R::kNumStats > 1) l1.Add(j, io.Clip(t.t1, j));
    }
    stats[0] = l0.Finish();
    if constexpr (R::kNumStats > 1) stats[1] = l1.Finish();
  }
}

// Phase 2: the update of every element of the row, given the row statistics summed over the
// whole row (unread when the optimizer has none), as optim::Apply. The row's scalars are taken in
// Scalar, then broadcast.
template <class I, class R>
void RowPhase2(const FusedRowsArgs& a, float* w, const float* g, float* m1, float* m2,
               const float* stats) {
  using V = Vec<I>;
  const RowIo<I> io{a.cols};
  const optim::RuleScalars& s = a.rules;
  const int64_t regs = io.Regs();
  Scalar row_state(0.0f);
  if constexpr (R::kRowState >= 0) {
    float* at = R::kRowState == 0 ? m1 : m2;
    row_state = R::RowState(Scalar(*at), Scalar(stats[0]), a.full_dim, s);
    *at = row_state.v;
  }
  const Scalar st0(R::kNumStats > 0 ? stats[0] : 0.0f);
  const Scalar st1(R::kNumStats > 1 ? stats[1] : 0.0f);
  const optim::RowCoefs<Scalar> ks = R::Coefs(row_state, st0, st1, s);
  const optim::RowCoefs<V> k{V(ks.c0.v), V(ks.c1.v)};
  for (int64_t j = 0; j < regs; ++j) {
    V m = V::Of(I::Zero()), v = m;
    V* pm = LoadState<I, R, 0>(io, m1, j, &m);
    V* pv = LoadState<I, R, 1>(io, m2, j, &v);
    io.Store(w, j, R::Update(io.Load(w, j), io.Load(g, j), pm, pv, k, s));
    if constexpr (R::kUpdateWritesStates) {
      StoreState<I, R, 0>(io, m1, j, m);
      StoreState<I, R, 1>(io, m2, j, v);
    }
  }
}

// Where row `row`'s state of `base` sits (a row-wise state: its single value), or null.
inline float* StateOf(const FusedRowsArgs& a, float* base, bool row_wise, int64_t row) {
  return base == nullptr ? nullptr
         : row_wise      ? base + row * a.row_state_stride
                         : base + row * a.cols;
}

// The weight row and states of `row` fetched for the update a few rows on.
inline void PrefetchRowAndStates(const FusedRowsArgs& a, int64_t row, int64_t elem) {
  core::PrefetchLinesForWrite(static_cast<const char*>(a.weights) + row * a.stride * elem,
                              a.cols * elem);
  if (a.m1 != nullptr)
    core::PrefetchLinesForWrite(StateOf(a, a.m1, a.m1_row_wise, row),
                                a.m1_row_wise ? 4 : a.cols * 4);
  if (a.m2 != nullptr)
    core::PrefetchLinesForWrite(StateOf(a, a.m2, a.m2_row_wise, row),
                                a.m2_row_wise ? 4 : a.cols * 4);
}

// A 16-bit row widened into out (exactly: every fp16 and bf16 value is an fp32 value).
template <class I, WeightType kType>
void WidenRow(const uint16_t* src, int32_t cols, float* out) {
  int64_t c = 0;
  for (; c + I::kWidth <= cols; c += I::kWidth)
    I::Store(out + c, kType == WeightType::kFp16 ? I::LoadF16(src + c) : I::LoadBf16(src + c));
  for (; c < cols; ++c)
    out[c] = kType == WeightType::kFp16 ? ScalarF16(src[c]) : ScalarBf16(src[c]);
}

template <WeightType kType>
constexpr bool kFp8 = kType == WeightType::kFp8E4M3 || kType == WeightType::kFp8E5M2;
template <WeightType kType>
constexpr Fp8Kind kFp8KindOf = kType == WeightType::kFp8E5M2 ? Fp8Kind::kE5M2 : Fp8Kind::kE4M3;

// PrefetchRowAndStates, and for an FP8 row also the line of its last code: the row (its scale,
// then cols codes) is rarely line-aligned, as its stride is cols + 4 bytes, so the cols bytes from
// its start miss its end, which the decoder then waited for.
template <WeightType kType>
void PrefetchRow(const FusedRowsArgs& a, int64_t row, int64_t elem) {
  PrefetchRowAndStates(a, row, elem);
  if constexpr (kFp8<kType>)
    core::PrefetchLinesForWrite(
        static_cast<const char*>(a.weights) + row * a.stride + kFp8HeaderBytes + a.cols - 1, 1);
}

template <class I, WeightType kType, class R>
void Rows(const FusedRowsArgs& a) {
  // Bytes of one unit of a.stride: an FP8 row's stride is in bytes (its scale, then the codes).
  const int64_t elem = kType == WeightType::kFp32 ? 4 : kFp8<kType> ? 1 : 2;
  const int64_t scratch = (int64_t{a.cols} + 15) / 16 * 16;
  float* g_buf = a.scratch;
  float* w_buf = a.scratch + scratch;
  char* weights = static_cast<char*>(a.weights);
  const float* hot = a.hot_grads;
  const bool grouped = a.mode != FusedRowsMode::kApply;
  // The weight rows and states are read only when the optimizer runs on the row.
  const bool touches_rows = a.mode != FusedRowsMode::kAggregate || a.stats != nullptr;
  float stats_buf[2] = {0.0f, 0.0f};
  uint32_t bits_buf[kFp8<kType> ? kFp8BitsChunk : 1];
  for (int64_t u = a.u_begin; touches_rows && u < a.u_end && u < a.u_begin + a.rows_ahead; ++u)
    PrefetchRow<kType>(a, a.unique_rows[u], elem);
  for (int64_t u = a.u_begin; u < a.u_end; ++u) {
    if (touches_rows && u + a.rows_ahead < a.u_end)
      PrefetchRow<kType>(a, a.unique_rows[u + a.rows_ahead], elem);
    const int64_t row = a.unique_rows[u];
    // The row's gradient: summed here, taken from the caller's hot rows, or given (kApply).
    const float* g = a.grads_out != nullptr ? a.grads_out + u * a.cols : g_buf;
    if (!grouped) {
      g = a.grads + u * a.cols;
    } else if (a.segments[u + 1] - a.segments[u] > a.hot_ids) {
      if (a.grads_out != nullptr) {
        for (int32_t c = 0; c < a.cols; ++c) a.grads_out[u * a.cols + c] = hot[c];
      } else {
        g = hot;
      }
      hot += a.cols;
    } else if (a.segments[u + 1] - a.segments[u] == 1 && a.grads_out == nullptr &&
               a.id_weights == nullptr && a.scale == 1.0f) {
      // A row of one unscaled id (most rows of a large table): its gradient is read where it
      // lies. SumRow's 1 * x is x, and the rules only compute with g, so the bits are the same.
      const int64_t k = a.segments[u];
      if (k + a.grads_ahead < a.num_keys)
        core::PrefetchSpan(a.grad_rows[a.keys[k + a.grads_ahead] & a.index_mask],
                           int64_t{a.cols} * 4);
      g = a.grad_rows[a.keys[k] & a.index_mask];
    } else {
      SumRow<I>(a, a.segments[u], a.segments[u + 1],
                a.grads_out != nullptr ? a.grads_out + u * a.cols : g_buf);
    }
    if (!touches_rows) continue;
    float* m1 = StateOf(a, a.m1, a.m1_row_wise, row);
    float* m2 = StateOf(a, a.m2, a.m2_row_wise, row);
    float* w = reinterpret_cast<float*>(weights + row * a.stride * elem);
    if constexpr (kFp8<kType>) {
      DecodeFp8RowVec<I, kFp8KindOf<kType>>(
          reinterpret_cast<const uint8_t*>(weights) + row * a.stride, a.cols, w_buf);
      w = w_buf;
    } else if constexpr (kType != WeightType::kFp32) {
      WidenRow<I, kType>(reinterpret_cast<const uint16_t*>(weights) + row * a.stride, a.cols,
                         w_buf);
      w = w_buf;
    }
    switch (a.mode) {
      case FusedRowsMode::kFused:
        RowPhase1<I, R>(a, w, g, m1, m2, stats_buf);
        RowPhase2<I, R>(a, w, g, m1, m2, stats_buf);
        break;
      case FusedRowsMode::kAggregate:
        RowPhase1<I, R>(a, w, g, m1, m2, a.stats + u * a.num_stats);
        continue;  // the weights stay as they are
      case FusedRowsMode::kApply:
        if (a.stats == nullptr) RowPhase1<I, R>(a, w, g, m1, m2, stats_buf);  // whole rows
        RowPhase2<I, R>(a, w, g, m1, m2,
                        a.stats != nullptr ? a.stats + u * a.num_stats : stats_buf);
        break;
    }
    // An FP8 row is re-encoded here, in registers (optim's StoreRow would encode it with
    // scalar code at several times the cost), to nearest or with the caller's random bits;
    // 16-bit rows go to the caller's rounding, which may be stochastic.
    if constexpr (kFp8<kType>) {
      uint8_t* dst = reinterpret_cast<uint8_t*>(weights) + row * a.stride;
      if (a.row_bits == nullptr) {
        EncodeFp8RowVec<I, kFp8KindOf<kType>>(w_buf, a.cols, dst);
      } else {
        EncodeFp8RowVecStochastic<I, kFp8KindOf<kType>>(
            w_buf, a.cols, dst, [&](int32_t c0, int32_t n) -> const uint32_t* {
              a.row_bits(a.store_ctx, row, c0, n, bits_buf);
              return bits_buf;
            });
      }
    } else if constexpr (kType != WeightType::kFp32) {
      a.store_row(a.store_ctx, row, w_buf);
    }
  }
}

// The rows of one weight type, the optimizer's rule chosen once per call (optim::AllRules).
template <class I, WeightType kType>
void RowsOf(const FusedRowsArgs& a) {
  optim::DispatchOptimizer(static_cast<optim::OptimizerType>(a.optimizer),
                           [&](auto rule) { Rows<I, kType, decltype(rule)>(a); });
}

template <class I>
void FusedRows(const FusedRowsArgs& a) {
  switch (a.type) {
    case WeightType::kFp16:
      RowsOf<I, WeightType::kFp16>(a);
      break;
    case WeightType::kBf16:
      RowsOf<I, WeightType::kBf16>(a);
      break;
    case WeightType::kFp8E4M3:
      RowsOf<I, WeightType::kFp8E4M3>(a);
      break;
    case WeightType::kFp8E5M2:
      RowsOf<I, WeightType::kFp8E5M2>(a);
      break;
    default:
      RowsOf<I, WeightType::kFp32>(a);
      break;
  }
}

template <class I>
void Fp8Row(WeightType type, bool encode, float* values, int32_t cols, uint8_t* row) {
  if (type == WeightType::kFp8E5M2) {
    if (encode)
      EncodeFp8RowVec<I, Fp8Kind::kE5M2>(values, cols, row);
    else
      DecodeFp8RowVec<I, Fp8Kind::kE5M2>(row, cols, values);
  } else if (encode) {
    EncodeFp8RowVec<I, Fp8Kind::kE4M3>(values, cols, row);
  } else {
    DecodeFp8RowVec<I, Fp8Kind::kE4M3>(row, cols, values);
  }
}

template <class I>
void Fp8RowStochastic(WeightType type, const float* values, int32_t cols, const uint32_t* bits,
                      uint8_t* row) {
  const auto bits_at = [bits](int32_t c0, int32_t) { return bits + c0; };
  if (type == WeightType::kFp8E5M2)
    EncodeFp8RowVecStochastic<I, Fp8Kind::kE5M2>(values, cols, row, bits_at);
  else
    EncodeFp8RowVecStochastic<I, Fp8Kind::kE4M3>(values, cols, row, bits_at);
}

}  // namespace
}  // namespace shardrec::embedding::kernels::isa
