// Internal: the bag summation written once over a vector type V, included by exactly one
// translation unit per instruction set. Everything here has internal linkage (an anonymous
// namespace), so no copy built for a wide instruction set can stand in for another level's.
//
// V provides: Reg, kWidth, kMaxRegs, kMaxRegsWithTemps, Zero(), Set1(float), Add(a, b), Mul(a, b),
// LoadF32(const float*), LoadF16(const uint16_t*), LoadBf16(const uint16_t*), Store(float*, Reg).
#pragma once

#include <cstdint>

#include "impl/core/prefetch.h"
#include "impl/embedding/kernels/isa/bag_sum.h"
#include "impl/embedding/kernels/isa/scalar_half.h"

namespace shardrec::embedding::kernels::isa {
namespace {

template <class V, WeightType kType>
inline typename V::Reg LoadRow(const void* row, int64_t col) {
  if constexpr (kType == WeightType::kFp32) {
    return V::LoadF32(static_cast<const float*>(row) + col);
  } else if constexpr (kType == WeightType::kFp16) {
    return V::LoadF16(static_cast<const uint16_t*>(row) + col);
  } else {
    return V::LoadBf16(static_cast<const uint16_t*>(row) + col);
  }
}

template <WeightType kType>
inline float LoadScalar(const void* row, int64_t col) {
  if constexpr (kType == WeightType::kFp32) {
    return static_cast<const float*>(row)[col];
  } else if constexpr (kType == WeightType::kFp16) {
    return ScalarF16(static_cast<const uint16_t*>(row)[col]);
  } else {
    return ScalarBf16(static_cast<const uint16_t*>(row)[col]);
  }
}

template <WeightType kType>
constexpr int64_t ElementBytes() {
  return kType == WeightType::kFp32 ? 4 : 2;
}

// kRegs vectors of columns [c0, c0 + kRegs * kWidth) of one bag, summed in registers and stored
// once. The first pass over a bag also prefetches the rows `distance` ids ahead. The tile's
// columns are addressed from a per-id pointer at column c0 with constant displacements, so the
// loop needs one address register however wide the tile is; the k loops are unrolled so the
// accumulators live in registers (not in a stack array copied to the output).
template <class V, WeightType kType, bool kWeighted, int kRegs>
inline void SumTile(const BagSumArgs& a, int64_t i0, int64_t i1, int64_t c0, float* o,
                    bool prefetch, int64_t id_end) {
  typename V::Reg acc[kRegs];
#pragma GCC unroll 16
  for (int k = 0; k < kRegs; ++k) acc[k] = V::Zero();
  const char* base = static_cast<const char*>(a.weights);
  const char* tile = base + c0 * ElementBytes<kType>();
  const int64_t row_bytes = a.stride * ElementBytes<kType>();
  const int64_t prefetch_bytes = static_cast<int64_t>(a.cols) * ElementBytes<kType>();
  const int64_t* rows = a.rows;
  const int64_t ahead = prefetch ? a.prefetch_distance : 0;
  const int64_t prefetch_end = ahead > 0 ? id_end - ahead : i0;
  for (int64_t i = i0; i < i1; ++i) {
    if (i < prefetch_end) core::PrefetchLines(base + rows[i + ahead] * row_bytes, prefetch_bytes);
    const void* row = tile + rows[i] * row_bytes;
    if constexpr (kWeighted) {
      const typename V::Reg w = V::Set1(a.id_weights[i]);
#pragma GCC unroll 16
      for (int k = 0; k < kRegs; ++k)
        acc[k] = V::Add(acc[k], V::Mul(w, LoadRow<V, kType>(row, k * V::kWidth)));
    } else {
#pragma GCC unroll 16
      for (int k = 0; k < kRegs; ++k)
        acc[k] = V::Add(acc[k], LoadRow<V, kType>(row, k * V::kWidth));
    }
  }
#pragma GCC unroll 16
  for (int k = 0; k < kRegs; ++k) V::Store(o + c0 + k * V::kWidth, acc[k]);
}

// Columns past the last full vector, one float accumulator each (at most kWidth - 1 of them).
template <class V, WeightType kType, bool kWeighted>
inline void SumTail(const BagSumArgs& a, int64_t i0, int64_t i1, int64_t c0, float* o) {
  float acc[V::kWidth];
  const int64_t n = a.cols - c0;
  for (int64_t c = 0; c < n; ++c) acc[c] = 0.0f;
  const char* base = static_cast<const char*>(a.weights);
  const int64_t row_bytes = a.stride * ElementBytes<kType>();
  for (int64_t i = i0; i < i1; ++i) {
    const void* row = base + a.rows[i] * row_bytes;
    const float w = kWeighted ? a.id_weights[i] : 1.0f;
    for (int64_t c = 0; c < n; ++c) {
      const float v = LoadScalar<kType>(row, c0 + c);
      acc[c] = kWeighted ? acc[c] + w * v : acc[c] + v;
    }
  }
  for (int64_t c = 0; c < n; ++c) o[c0 + c] = acc[c];
}

template <class V, WeightType kType, bool kWeighted>
void PooledBags(const BagSumArgs& a) {
  // Unweighted fp32 rows fold each load into its add; weighted or widened rows need a register
  // for the weight and one for the loaded row, so their tiles are narrower (no spills).
  constexpr int kMax = kWeighted || kType != WeightType::kFp32 ? V::kMaxRegsWithTemps : V::kMaxRegs;
  const int64_t width = static_cast<int64_t>(kMax) * V::kWidth;
  const int64_t id_end = a.prefetch_distance > 0 ? a.offsets[a.bag_end] : 0;
  for (int64_t b = a.bag_begin; b < a.bag_end; ++b) {
    float* o = a.out16 != nullptr ? a.row : a.out + a.io_offset + b * a.out_stride;
    const int64_t i0 = a.offsets[b], i1 = a.offsets[b + 1];
    int64_t c0 = 0;
    bool first = true;
    // Full tiles of kMax vectors, then one smaller tile, then the scalar tail.
    for (; c0 + width <= a.cols; c0 += width, first = false)
      SumTile<V, kType, kWeighted, kMax>(a, i0, i1, c0, o, first, id_end);
    const int64_t left = (a.cols - c0) / V::kWidth;
    switch (left) {
#define SHARDREC_SUM_CASE(n)                                            \
  case n:                                                               \
    if constexpr (n < kMax) {                                           \
      SumTile<V, kType, kWeighted, n>(a, i0, i1, c0, o, first, id_end); \
      first = false;                                                    \
    }                                                                   \
    break;
      SHARDREC_SUM_CASE(1)
      SHARDREC_SUM_CASE(2)
      SHARDREC_SUM_CASE(3)
      SHARDREC_SUM_CASE(4)
      SHARDREC_SUM_CASE(5)
      SHARDREC_SUM_CASE(6)
      SHARDREC_SUM_CASE(7)
      SHARDREC_SUM_CASE(8)
      SHARDREC_SUM_CASE(9)
      SHARDREC_SUM_CASE(10)
      SHARDREC_SUM_CASE(11)
      SHARDREC_SUM_CASE(12)
      SHARDREC_SUM_CASE(13)
      SHARDREC_SUM_CASE(14)
      SHARDREC_SUM_CASE(15)
#undef SHARDREC_SUM_CASE
      default:
        break;
    }
    c0 += left * V::kWidth;
    if (c0 < a.cols) SumTail<V, kType, kWeighted>(a, i0, i1, c0, o);
    if (a.out16 != nullptr)
      a.encode(a.row, static_cast<size_t>(a.cols), a.out16 + a.io_offset + b * a.out_stride);
  }
}

// Sequence runs: each id's row (times its weight) is its own output row.
template <class V, WeightType kType>
void SequenceRows(const BagSumArgs& a) {
  const char* base = static_cast<const char*>(a.weights);
  const int64_t row_bytes = a.stride * ElementBytes<kType>();
  const int64_t prefetch_bytes = static_cast<int64_t>(a.cols) * ElementBytes<kType>();
  for (int64_t i = a.bag_begin; i < a.bag_end; ++i) {
    if (a.prefetch_distance > 0 && i + a.prefetch_distance < a.bag_end)
      core::PrefetchLines(base + a.rows[i + a.prefetch_distance] * row_bytes, prefetch_bytes);
    const void* row = base + a.rows[i] * row_bytes;
    float* o = a.out16 != nullptr ? a.row : a.out + a.io_offset + i * a.out_stride;
    int64_t c = 0;
    if (a.id_weights != nullptr) {
      const typename V::Reg w = V::Set1(a.id_weights[i]);
      for (; c + V::kWidth <= a.cols; c += V::kWidth)
        V::Store(o + c, V::Mul(w, LoadRow<V, kType>(row, c)));
      for (; c < a.cols; ++c) o[c] = a.id_weights[i] * LoadScalar<kType>(row, c);
    } else {
      for (; c + V::kWidth <= a.cols; c += V::kWidth) V::Store(o + c, LoadRow<V, kType>(row, c));
      for (; c < a.cols; ++c) o[c] = LoadScalar<kType>(row, c);
    }
    if (a.out16 != nullptr)
      a.encode(a.row, static_cast<size_t>(a.cols), a.out16 + a.io_offset + i * a.out_stride);
  }
}

template <class V, WeightType kType>
void Dispatch(const BagSumArgs& a) {
  if (a.offsets == nullptr) {
    SequenceRows<V, kType>(a);
  } else if (a.id_weights != nullptr) {
    PooledBags<V, kType, true>(a);
  } else {
    PooledBags<V, kType, false>(a);
  }
}

template <class V>
void BagSum(const BagSumArgs& a) {
  switch (a.type) {
    case WeightType::kFp16:
      Dispatch<V, WeightType::kFp16>(a);
      break;
    case WeightType::kBf16:
      Dispatch<V, WeightType::kBf16>(a);
      break;
    default:
      Dispatch<V, WeightType::kFp32>(a);
      break;
  }
}

}  // namespace
}  // namespace shardrec::embedding::kernels::isa
