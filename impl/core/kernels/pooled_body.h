// Internal: the pooled kernel (pooled.h) written once over a vector type V, included by exactly
// one translation unit per instruction set. Everything here has internal linkage (an anonymous
// namespace), so no copy built for a wide instruction set can stand in for another level's.
//
// V provides: Reg, kWidth, kMaxRegs, kMaxRegsWithTemps, Zero(), Set1(float), Add(a, b), Mul(a, b),
// MulAdd(a, b, c) (a x b + c, rounded once where kFusedMulAdd),
// LoadF32(const float*), LoadF16(const uint16_t*), LoadBf16(const uint16_t*), LoadU8(codes),
// LoadU4(packed codes), LoadE4M3/LoadE5M2(codes, the kind's 256-entry table: exact decoded
// values, E4M3's times 2^-kE4M3Shift, any NaN for a NaN code), Store(float*, Reg); kInt4Lut
// (then Iota, LutU4) and kInt4Split (then LutU4Split, StoreSplit).
#pragma once

#include <cstdint>
#include <cstring>

#include "impl/core/fp8_table.h"
#include "impl/core/kernels/pooled.h"
#include "impl/core/kernels/scalar.h"
#include "impl/core/prefetch.h"

namespace shardrec::core::kernels {
namespace {

constexpr bool Quantized(RowFormat f) { return f == RowFormat::kInt8 || f == RowFormat::kInt4; }
constexpr bool Fp8(RowFormat f) { return f == RowFormat::kFp8E4M3 || f == RowFormat::kFp8E5M2; }

// Bytes before a row's values (a quantized row's fp32 scale and bias, an FP8 row's fp32 scale:
// row_format.h).
template <RowFormat kType>
constexpr int64_t HeaderBytes() {
  return Quantized(kType) ? 8 : Fp8(kType) ? 4 : 0;
}

// An FP8 format's decode table (fp8_table.h): value = table[code] x the row's scale.
template <RowFormat kType>
inline const float* Fp8Table() {
  return ::shardrec::kFp8Decode.v[kType == RowFormat::kFp8E4M3 ? 0 : 1];
}

// Bytes of `cols` values from the first value (int4: cols even, or a whole row rounded up).
template <RowFormat kType>
constexpr int64_t ValueBytes(int64_t cols) {
  return kType == RowFormat::kFp32                 ? cols * 4
         : kType == RowFormat::kInt8 || Fp8(kType) ? cols
         : kType == RowFormat::kInt4               ? (cols + 1) / 2
                                                   : cols * 2;
}

template <RowFormat kType>
inline int64_t RowStride(const PooledArgs& a) {
  return a.row_bytes > 0 ? a.row_bytes : a.stride * ValueBytes<kType>(1);
}

// A quantized row's scale and bias as loaded from its header (where V looks int4 codes up in a
// table: that table, code x scale + bias for the 16 codes, computed as LoadValues computes each
// value, so the same bits); unused for the float formats.
template <class V>
struct Dequant {
  typename V::Reg scale, bias;
};

template <class V, RowFormat kType>
inline Dequant<V> HeaderOf(const char* row) {
  if constexpr (Quantized(kType)) {
    float s, b;
    std::memcpy(&s, row, 4);
    std::memcpy(&b, row + 4, 4);
    if constexpr (kType == RowFormat::kInt4 && V::kInt4Lut)
      return {V::Add(V::Mul(V::Iota(), V::Set1(s)), V::Set1(b)), V::Zero()};
    return {V::Set1(s), V::Set1(b)};
  } else if constexpr (Fp8(kType)) {
    // A stored scale is a power of two up to 2^111 (fp8.h), so s x 2^kE4M3Shift is exact and
    // each decoded value x it is the value x s rounded once, as the scalar path computes it.
    float s;
    std::memcpy(&s, row, 4);
    if constexpr (kType == RowFormat::kFp8E4M3 && V::kE4M3Shift != 0)
      s *= static_cast<float>(1 << V::kE4M3Shift);
    return {V::Set1(s), V::Zero()};
  } else {
    (void)row;
    return {V::Zero(), V::Zero()};
  }
}

// kWidth values starting at `values` (the row's first value, advanced to a column that is a
// multiple of kWidth), decoded: widened, code x scale + bias (a multiply, then an add), or an FP8
// code's table entry x scale (one multiply).
template <class V, RowFormat kType>
inline typename V::Reg LoadValues(const char* values, const Dequant<V>& q) {
  if constexpr (kType == RowFormat::kFp32) {
    return V::LoadF32(reinterpret_cast<const float*>(values));
  } else if constexpr (kType == RowFormat::kFp16) {
    return V::LoadF16(reinterpret_cast<const uint16_t*>(values));
  } else if constexpr (kType == RowFormat::kBf16) {
    return V::LoadBf16(reinterpret_cast<const uint16_t*>(values));
  } else if constexpr (kType == RowFormat::kInt8) {
    return V::Add(V::Mul(V::LoadU8(reinterpret_cast<const uint8_t*>(values)), q.scale), q.bias);
  } else if constexpr (Fp8(kType)) {
    const auto* codes = reinterpret_cast<const uint8_t*>(values);
    return V::Mul(kType == RowFormat::kFp8E4M3 ? V::LoadE4M3(codes, Fp8Table<kType>())
                                               : V::LoadE5M2(codes, Fp8Table<kType>()),
                  q.scale);
  } else if constexpr (V::kInt4Lut) {
    return V::LutU4(reinterpret_cast<const uint8_t*>(values), q.scale);
  } else {
    return V::Add(V::Mul(V::LoadU4(reinterpret_cast<const uint8_t*>(values)), q.scale), q.bias);
  }
}

// Value `col` of a row (`row` at its header), decoded as LoadValues does.
template <RowFormat kType>
inline float LoadScalar(const char* row, int64_t col) {
  const char* v = row + HeaderBytes<kType>();
  if constexpr (kType == RowFormat::kFp32) {
    float f;
    std::memcpy(&f, v + 4 * col, 4);
    return f;
  } else if constexpr (kType == RowFormat::kFp16 || kType == RowFormat::kBf16) {
    uint16_t h;
    std::memcpy(&h, v + 2 * col, 2);
    return kType == RowFormat::kFp16 ? ScalarF16(h) : ScalarBf16(h);
  } else if constexpr (Fp8(kType)) {
    float s;
    std::memcpy(&s, row, 4);
    return Fp8Table<kType>()[static_cast<uint8_t>(v[col])] * s;
  } else {
    const auto byte = static_cast<uint8_t>(v[kType == RowFormat::kInt8 ? col : col / 2]);
    const uint8_t code = kType == RowFormat::kInt8 ? byte : (col % 2 == 0 ? byte & 0xf : byte >> 4);
    float s, b;
    std::memcpy(&s, row, 4);
    std::memcpy(&b, row + 4, 4);
    return static_cast<float>(code) * s + b;
  }
}

// The folded sums (pooled.h fold_dequant): acc + the kWidth codes at `values` x `ws`, the row's
// weight x scale (int4 where V looks codes up in a table: `ws` is that table, code x weight x
// scale for the 16 codes, each rounded once, and the lookup is added).
template <class V, RowFormat kType>
inline typename V::Reg FoldAdd(const char* values, typename V::Reg ws, typename V::Reg acc) {
  const auto* codes = reinterpret_cast<const uint8_t*>(values);
  if constexpr (kType == RowFormat::kInt8) {
    return V::MulAdd(V::LoadU8(codes), ws, acc);
  } else if constexpr (V::kInt4Lut) {
    return V::Add(acc, V::LutU4(codes, ws));
  } else {
    return V::MulAdd(V::LoadU4(codes), ws, acc);
  }
}

// Every cache line of a row's bytes, from the line its first byte is in (a quantized row need not
// start on a line).
template <int kHint>
inline void PrefetchRow(const char* p, int64_t bytes) {
  // One request every 64 bytes from the first, then one for the last byte unless the row is
  // line-aligned and a whole number of lines: a count fixed by the table, so no branch depends on
  // where a row starts (asking for exactly the lines touched, whose count varies with the row's
  // offset in its line, mispredicted about every other 40-byte int4 row: hot int4 lookups ran
  // 0.65x). A line asked for twice costs a load slot only.
  const char* last = p + bytes - 1;
  const bool whole_lines =
      ((reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(bytes)) & 63) == 0;
  for (int64_t k = 0; k < bytes; k += 64) {
    __builtin_prefetch(p + k, 0, kHint);
    asm volatile("");
  }
  if (!whole_lines) {
    __builtin_prefetch(last, 0, kHint);
    asm volatile("");
  }
}

// PrefetchRow for a row of kBytes bytes known at compile time (a whole row in one tile): the
// requests unrolled, no loop and no branch unless the row is a whole number of lines (then only
// the alignment of its start, the same for every row of a table, decides the last one).
template <int kHint, int64_t kBytes>
inline void PrefetchFixedRow(const char* p) {
#pragma GCC unroll 16
  for (int64_t k = 0; k < kBytes; k += 64) {
    __builtin_prefetch(p + k, 0, kHint);
    asm volatile("");
  }
  if (kBytes % 64 != 0 || (reinterpret_cast<uintptr_t>(p) & 63) != 0) {
    __builtin_prefetch(p + kBytes - 1, 0, kHint);
    asm volatile("");
  }
}

// A row's prefetch into the first-level cache (hint 3, prefetcht0) or, pooled.h prefetch_to_l2,
// the second only (hint 1, prefetcht2): kBytes > 0 a whole row of that size, else `bytes`.
template <int64_t kBytes>
inline void PrefetchRowTo(const char* p, int64_t bytes, bool to_l2) {
  if constexpr (kBytes > 0) {
    if (to_l2) {
      PrefetchFixedRow<1, kBytes>(p);
    } else {
      PrefetchFixedRow<3, kBytes>(p);
    }
  } else if (to_l2) {
    PrefetchRow<1>(p, bytes);
  } else {
    PrefetchRow<3>(p, bytes);
  }
}

// The largest row a prefetch may address: ids ahead of the bag being summed may not be checked
// yet (pooled.h stopped_at), and are clamped into the table.
inline uint64_t PrefetchMaxRow(const PooledArgs& a) {
  if (a.stopped_at == nullptr) return ~uint64_t{0};
  return a.check_rows > 0 ? static_cast<uint64_t>(a.check_rows - 1) : 0;
}

// Whether every id of [i0, i1) lies in [0, rows): neither x nor rows - 1 - x negative, or-ed
// sign bits (no branch per id; the ids are read here first, so the kernel reads them from L1).
inline bool IdsInRange(const int64_t* ids, int64_t i0, int64_t i1, int64_t rows) {
  const auto last = static_cast<uint64_t>(rows - 1);
  uint64_t signs = 0;
  for (int64_t i = i0; i < i1; ++i) {
    const auto x = static_cast<uint64_t>(ids[i]);
    signs |= x | (last - x);
  }
  return (signs >> 63) == 0;
}

// One int4 row's kRegs x kWidth values at `values` added into acc where V looks codes up in
// `lut` split by column parity (kInt4Split): acc[k], acc[k + 1] get the even and the odd columns
// of the 2 x kWidth from column k x kWidth, each looked-up value times w first if kWeighted;
// an odd kRegs' last register is summed in column order (LutU4). Every column adds the value
// LutU4 would give it, in the same order, so the sums are the same bits.
template <class V, int kRegs, bool kWeighted>
inline void AddSplit(const char* values, typename V::Reg lut, typename V::Reg w,
                     typename V::Reg* acc) {
  const auto* codes = reinterpret_cast<const uint8_t*>(values);
#pragma GCC unroll 8
  for (int k = 0; k + 1 < kRegs; k += 2) {
    typename V::Reg even, odd;
    V::LutU4Split(codes + k * V::kWidth / 2, lut, &even, &odd);
    if constexpr (kWeighted) {
      even = V::Mul(w, even);
      odd = V::Mul(w, odd);
    }
    acc[k] = V::Add(acc[k], even);
    acc[k + 1] = V::Add(acc[k + 1], odd);
  }
  if constexpr (kRegs % 2 != 0) {
    typename V::Reg v = V::LutU4(codes + (kRegs - 1) * V::kWidth / 2, lut);
    if constexpr (kWeighted) v = V::Mul(w, v);
    acc[kRegs - 1] = V::Add(acc[kRegs - 1], v);
  }
}

// kRegs vectors of columns [c0, c0 + kRegs * kWidth) of one bag, summed in registers and stored
// once. The first pass over a bag also prefetches the rows `distance` ids ahead (a loop of its own
// over the ids that have a row that far ahead, then one without). The tile's columns are
// addressed from a per-id pointer at column c0 with constant displacements, so the loop needs one
// address register however wide the tile is; the k loops are unrolled so the accumulators live in
// registers (not in a stack array copied to the output). kWhole: the tile is the whole row
// (c0 = 0, cols = kRegs x kWidth), so the row's header and size are compile-time constants (no
// per-id reload of them, no loop over the lines to prefetch). kFold (int8 and int4 only): the
// folded sums of pooled.h fold_dequant, the weight x bias terms summed in id order in one scalar
// that is added to every accumulator before the store.
template <class V, RowFormat kType, bool kWeighted, int kRegs, bool kFold = false,
          bool kWhole = false>
inline void SumTile(const PooledArgs& a, int64_t i0, int64_t i1, int64_t c0, float* o,
                    bool prefetch, int64_t id_end) {
  typename V::Reg acc[kRegs];
#pragma GCC unroll 16
  for (int k = 0; k < kRegs; ++k) acc[k] = V::Zero();
  const char* base = static_cast<const char*>(a.weights);
  constexpr int64_t kFixedBytes = HeaderBytes<kType>() + ValueBytes<kType>(kRegs * V::kWidth);
  const int64_t tile = kWhole ? HeaderBytes<kType>() : HeaderBytes<kType>() + ValueBytes<kType>(c0);
  const int64_t row_bytes = RowStride<kType>(a);
  const int64_t prefetch_bytes =
      kWhole ? kFixedBytes : HeaderBytes<kType>() + ValueBytes<kType>(a.cols);
  const int64_t* rows = a.rows;
  const int64_t ahead = prefetch ? a.prefetch_distance : 0;
  const uint64_t prefetch_max = PrefetchMaxRow(a);
  const bool to_l2 = a.prefetch_to_l2;
  // int4 where V splits codes by column parity: each pair of accumulators holds 2 x kWidth
  // columns as even and odd ones (AddSplit), put back in order by the stores.
  constexpr bool kSplit = kType == RowFormat::kInt4 && V::kInt4Split;
  float bias_sum = 0.0f;
  const auto add_row = [&](int64_t i) __attribute__((always_inline)) {
    const char* values = base + rows[i] * row_bytes + tile;
    // The pointer made opaque, so that each vector load addresses it with a constant
    // displacement: otherwise GCC reassociates row + (tile + k x width) into one loop-invariant
    // index register per vector, more than the loop has, and moves them from vector registers
    // into general ones on every id (a vmovq each on the ports the arithmetic needs).
    asm("" : "+r"(values));
    if constexpr (kFold) {
      float scale, bias;
      std::memcpy(&scale, values - tile, 4);
      std::memcpy(&bias, values - tile + 4, 4);
      if constexpr (kWeighted) {
        scale *= a.id_weights[i];
        bias *= a.id_weights[i];
      }
      bias_sum += bias;
      typename V::Reg ws = V::Set1(scale);
      if constexpr (kType == RowFormat::kInt4 && V::kInt4Lut) ws = V::Mul(V::Iota(), ws);
      if constexpr (kSplit) {
        AddSplit<V, kRegs, false>(values, ws, V::Zero(), acc);
        return;
      }
#pragma GCC unroll 16
      for (int k = 0; k < kRegs; ++k)
        acc[k] = FoldAdd<V, kType>(values + ValueBytes<kType>(k * V::kWidth), ws, acc[k]);
      return;
    }
    const Dequant<V> q = HeaderOf<V, kType>(values - tile);
    if constexpr (kSplit) {
      // The weight multiplies each looked-up value, as LoadValues' value is multiplied below.
      AddSplit<V, kRegs, kWeighted>(values, q.scale, V::Set1(kWeighted ? a.id_weights[i] : 0.0f),
                                    acc);
    } else if constexpr (kWeighted) {
      const typename V::Reg w = V::Set1(a.id_weights[i]);
#pragma GCC unroll 16
      for (int k = 0; k < kRegs; ++k)
        acc[k] = V::Add(
            acc[k], V::Mul(w, LoadValues<V, kType>(values + ValueBytes<kType>(k * V::kWidth), q)));
    } else {
#pragma GCC unroll 16
      for (int k = 0; k < kRegs; ++k)
        acc[k] = V::Add(acc[k], LoadValues<V, kType>(values + ValueBytes<kType>(k * V::kWidth), q));
    }
  };
  int64_t i = i0;
  if (ahead > 0) {
    const int64_t prefetch_end = i1 < id_end - ahead ? i1 : id_end - ahead;
    for (; i < prefetch_end; ++i) {
      const auto r = static_cast<uint64_t>(rows[i + ahead]);
      const char* p = base + static_cast<int64_t>(r < prefetch_max ? r : prefetch_max) * row_bytes;
      PrefetchRowTo<kWhole ? kFixedBytes : 0>(p, prefetch_bytes, to_l2);
      add_row(i);
    }
  }
  for (; i < i1; ++i) add_row(i);
  if constexpr (kFold) {
    const typename V::Reg bias = V::Set1(bias_sum);
#pragma GCC unroll 16
    for (int k = 0; k < kRegs; ++k) acc[k] = V::Add(acc[k], bias);
  }
  if constexpr (kSplit) {
#pragma GCC unroll 8
    for (int k = 0; k + 1 < kRegs; k += 2)
      V::StoreSplit(o + c0 + k * V::kWidth, acc[k], acc[k + 1]);
    if constexpr (kRegs % 2 != 0) V::Store(o + c0 + (kRegs - 1) * V::kWidth, acc[kRegs - 1]);
  } else {
#pragma GCC unroll 16
    for (int k = 0; k < kRegs; ++k) V::Store(o + c0 + k * V::kWidth, acc[k]);
  }
}

// Columns [c0, cols) one float accumulator each: past the last full vector (at most kWidth - 1
// of them), or every column where vectors do not apply (int4 at one lane per "register").
template <class V, RowFormat kType, bool kWeighted>
inline void SumTail(const PooledArgs& a, int64_t i0, int64_t i1, int64_t c0, float* o) {
  const char* base = static_cast<const char*>(a.weights);
  const int64_t row_bytes = RowStride<kType>(a);
  for (int64_t c = c0; c < a.cols; ++c) {
    float acc = 0.0f;
    for (int64_t i = i0; i < i1; ++i) {
      const float v = LoadScalar<kType>(base + a.rows[i] * row_bytes, c);
      acc = kWeighted ? acc + a.id_weights[i] * v : acc + v;
    }
    o[c] = acc;
  }
}

// Whether whole vectors apply: int4 needs an even width (a vector starts on a byte).
template <class V, RowFormat kType>
constexpr bool kVectors = kType != RowFormat::kInt4 || V::kWidth % 2 == 0;

// Ids ahead of the bag being summed whose cache lines PooledBags prefetches.
constexpr int64_t kIdsAhead = 256;

// kFold: the folded int8/int4 sums (pooled.h fold_dequant) in the whole vectors; the columns past
// them (SumTail) are summed exactly, which is within the same bound.
template <class V, RowFormat kType, bool kWeighted, bool kFold = false>
void PooledBags(const PooledArgs& a) {
  // Unweighted fp32 rows fold each load into its add; weighted or decoded rows need registers
  // for the weight, the loaded row (and a scale and a bias), so their tiles are narrower (no
  // spills).
  constexpr int kMax = kWeighted || kType != RowFormat::kFp32 ? V::kMaxRegsWithTemps : V::kMaxRegs;
  const int64_t width = static_cast<int64_t>(kMax) * V::kWidth;
  const int64_t id_end = a.prefetch_distance <= 0 ? 0 : a.offsets[a.bag_end];
  // The ids (and weights) a few hundred ahead are prefetched a line at a time: they are read once,
  // in order, and a request's ids outgrow the second-level cache at batch 2048.
  int64_t ids_prefetched = a.offsets[a.bag_begin] + kIdsAhead;
  for (int64_t b = a.bag_begin; b < a.bag_end; ++b) {
    float* o = a.out16 != nullptr ? a.row : a.out + a.io_offset + b * a.out_stride;
    const int64_t i0 = a.offsets[b], i1 = a.offsets[b + 1];
    if (id_end > 0) {
      for (; ids_prefetched < i1 + kIdsAhead && ids_prefetched < id_end; ids_prefetched += 8) {
        __builtin_prefetch(a.rows + ids_prefetched, 0, 3);
        if constexpr (kWeighted) __builtin_prefetch(a.id_weights + ids_prefetched, 0, 3);
      }
    }
    if (a.stopped_at != nullptr && !IdsInRange(a.rows, i0, i1, a.check_rows)) {
      *a.stopped_at = b;
      return;
    }
    int64_t c0 = 0;
    if constexpr (kVectors<V, kType>) {
      bool first = true;
      // Full tiles of kMax vectors, then one smaller tile, then the scalar tail.
      for (; c0 + width <= a.cols; c0 += width, first = false)
        SumTile<V, kType, kWeighted, kMax, kFold>(a, i0, i1, c0, o, first, id_end);
      const int64_t left = (a.cols - c0) / V::kWidth;
      switch (left) {
#define SHARDREC_SUM_CASE(n)                                                         \
  case n:                                                                            \
    if constexpr (n < kMax) {                                                        \
      if (c0 == 0 && a.cols == n * V::kWidth)                                        \
        SumTile<V, kType, kWeighted, n, kFold, true>(a, i0, i1, 0, o, true, id_end); \
      else                                                                           \
        SumTile<V, kType, kWeighted, n, kFold>(a, i0, i1, c0, o, first, id_end);     \
      first = false;                                                                 \
    }                                                                                \
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
    }
    if (c0 < a.cols) SumTail<V, kType, kWeighted>(a, i0, i1, c0, o);
    if (a.out16 != nullptr)
      a.encode(a.row, static_cast<size_t>(a.cols), a.out16 + a.io_offset + b * a.out_stride);
  }
  if (a.stopped_at != nullptr) *a.stopped_at = a.bag_end;
}

// Sequence runs: each id's row (times its weight) is its own output row.
template <class V, RowFormat kType>
void SequenceRows(const PooledArgs& a) {
  const char* base = static_cast<const char*>(a.weights);
  const int64_t row_bytes = RowStride<kType>(a);
  const int64_t prefetch_bytes = HeaderBytes<kType>() + ValueBytes<kType>(a.cols);
  for (int64_t i = a.bag_begin; i < a.bag_end; ++i) {
    if (a.prefetch_distance > 0 && i + a.prefetch_distance < a.bag_end)
      PrefetchRowTo<0>(base + a.rows[i + a.prefetch_distance] * row_bytes, prefetch_bytes,
                       a.prefetch_to_l2);
    const char* row = base + a.rows[i] * row_bytes;
    const Dequant<V> q = HeaderOf<V, kType>(row);
    const char* values = row + HeaderBytes<kType>();
    float* o = a.out16 != nullptr ? a.row : a.out + a.io_offset + i * a.out_stride;
    int64_t c = 0;
    if (a.id_weights != nullptr) {
      const typename V::Reg w = V::Set1(a.id_weights[i]);
      if constexpr (kVectors<V, kType>)
        for (; c + V::kWidth <= a.cols; c += V::kWidth)
          V::Store(o + c, V::Mul(w, LoadValues<V, kType>(values + ValueBytes<kType>(c), q)));
      for (; c < a.cols; ++c) o[c] = a.id_weights[i] * LoadScalar<kType>(row, c);
    } else {
      if constexpr (kVectors<V, kType>)
        for (; c + V::kWidth <= a.cols; c += V::kWidth)
          V::Store(o + c, LoadValues<V, kType>(values + ValueBytes<kType>(c), q));
      for (; c < a.cols; ++c) o[c] = LoadScalar<kType>(row, c);
    }
    if (a.out16 != nullptr)
      a.encode(a.row, static_cast<size_t>(a.cols), a.out16 + a.io_offset + i * a.out_stride);
  }
}

template <class V, RowFormat kType>
void Dispatch(const PooledArgs& a) {
  if (a.offsets == nullptr) {
    SequenceRows<V, kType>(a);
  } else if (Quantized(kType) && a.fold_dequant) {
    if constexpr (Quantized(kType)) {
      if (a.id_weights != nullptr) {
        PooledBags<V, kType, true, true>(a);
      } else {
        PooledBags<V, kType, false, true>(a);
      }
    }
  } else if (a.id_weights != nullptr) {
    PooledBags<V, kType, true>(a);
  } else {
    PooledBags<V, kType, false>(a);
  }
}

template <class V>
void Pooled(const PooledArgs& a) {
  switch (a.type) {
    case RowFormat::kFp16:
      Dispatch<V, RowFormat::kFp16>(a);
      break;
    case RowFormat::kBf16:
      Dispatch<V, RowFormat::kBf16>(a);
      break;
    case RowFormat::kInt8:
      Dispatch<V, RowFormat::kInt8>(a);
      break;
    case RowFormat::kInt4:
      Dispatch<V, RowFormat::kInt4>(a);
      break;
    case RowFormat::kFp8E4M3:
      Dispatch<V, RowFormat::kFp8E4M3>(a);
      break;
    case RowFormat::kFp8E5M2:
      Dispatch<V, RowFormat::kFp8E5M2>(a);
      break;
    default:
      Dispatch<V, RowFormat::kFp32>(a);
      break;
  }
}

}  // namespace
}  // namespace shardrec::core::kernels
