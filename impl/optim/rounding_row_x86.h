// Internal (rounding_row.cc): RoundingColumnBits for a whole register of consecutive columns
// that starts at a multiple of the register's width, in AVX-512 (16 lanes) or AVX2 (8 lanes)
// registers, with the same bits as the per-value definition and one vector multiply less a
// register than its straight vectorization (which spends 4: two finalisers, two multiplies each).
//
// Why that holds, for lanes i < L (L = 16 or 8) and base a multiple of L: base + i == base ^ i,
// so the first finaliser's h = lo ^ base ^ i has the high 16 bits of lo ^ base, and its first
// step h ^ (h >> 16) is s ^ i with the scalar s = (lo ^ base) ^ ((lo ^ base) >> 16). Its product
// with kFmix32Mul1 is then (s & ~(L - 1)) * kFmix32Mul1 (one scalar multiply, broadcast) plus
// ((s & (L - 1)) ^ i) * kFmix32Mul1, row s & (L - 1) of a constant table: the two are disjoint
// bits of s ^ i, so their products add modulo 2^32. The rest of both finalisers runs in the
// lanes as written in rounding.h. Integer operations only: every level writes the same bits.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#include "impl/optim/rounding.h"

namespace shardrec::optim::x86 {
namespace {  // one translation unit includes this file; nothing here is shared at link time

// t[j][i] = (j ^ i) * kFmix32Mul1: a register's low-lane products for each low part j of s.
template <int kLanes>
struct LowProducts {
  alignas(64) uint32_t t[kLanes][kLanes];
  constexpr LowProducts() : t() {
    for (int j = 0; j < kLanes; ++j)
      for (int i = 0; i < kLanes; ++i) t[j][i] = static_cast<uint32_t>(j ^ i) * kFmix32Mul1;
  }
};
constexpr LowProducts<16> kLowProducts16;
constexpr LowProducts<8> kLowProducts8;

// s of the comment above for the register of columns [base, base + kLanes).
constexpr uint32_t FirstStep(uint64_t row_key, uint32_t base) {
  const uint32_t x = static_cast<uint32_t>(row_key) ^ base;
  return x ^ (x >> 16);
}

#define SHARDREC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline

// h >> n in each lane, through the zero-masking form: the plain one's undefined merge operand
// draws GCC 12's -Wmaybe-uninitialized (the same vpsrld either way).
template <int n>
SHARDREC_AVX512 __m512i Srl(__m512i h) {
  return _mm512_maskz_srli_epi32(0xFFFF, h, n);
}

// The finalisers after the first one's first multiply (h), with the key's high half hi.
SHARDREC_AVX512 __m512i FinishBits(__m512i h, __m512i hi) {
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(kFmix32Mul1));
  const __m512i m2 = _mm512_set1_epi32(static_cast<int>(kFmix32Mul2));
  h = _mm512_xor_si512(h, Srl<13>(h));
  h = _mm512_mullo_epi32(h, m2);
  h = _mm512_xor_si512(h, Srl<16>(h));
  h = _mm512_add_epi32(h, hi);
  h = _mm512_xor_si512(h, Srl<16>(h));
  h = _mm512_mullo_epi32(h, m1);
  h = _mm512_xor_si512(h, Srl<13>(h));
  h = _mm512_mullo_epi32(h, m2);
  return _mm512_xor_si512(h, Srl<16>(h));
}

// bits[i] = RoundingColumnBits(row_key, first_col + i), i in [0, n): the columns before the
// first multiple of 16 one at a time, then aligned registers, the last one stored in part.
SHARDREC_AVX512 void AlignedRowBitsAvx512(uint64_t row_key, int64_t first_col, int32_t n,
                                          uint32_t* bits) {
  const int32_t head = static_cast<int32_t>((0u - static_cast<uint32_t>(first_col)) & 15u);
  int64_t i = 0;  // 64-bit: i passes n by up to a register's width
  for (; i < n && i < head; ++i) bits[i] = RoundingColumnBits(row_key, first_col + i);
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(row_key >> 32));
  for (; i < n; i += 16) {
    const uint32_t s = FirstStep(row_key, static_cast<uint32_t>(first_col + i));
    const __m512i h =
        _mm512_add_epi32(_mm512_load_si512(kLowProducts16.t[s & 15u]),
                         _mm512_set1_epi32(static_cast<int>((s & ~15u) * kFmix32Mul1)));
    const __m512i b = FinishBits(h, hi);
    if (n - i >= 16)
      _mm512_storeu_si512(bits + i, b);
    else
      _mm512_mask_storeu_epi32(bits + i, static_cast<__mmask16>((1u << (n - i)) - 1u), b);
  }
}

#undef SHARDREC_AVX512

#define SHARDREC_AVX2 __attribute__((target("avx2"), always_inline)) inline

SHARDREC_AVX2 __m256i FinishBits(__m256i h, __m256i hi) {
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kFmix32Mul1));
  const __m256i m2 = _mm256_set1_epi32(static_cast<int>(kFmix32Mul2));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  h = _mm256_mullo_epi32(h, m2);
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  h = _mm256_add_epi32(h, hi);
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  h = _mm256_mullo_epi32(h, m1);
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  h = _mm256_mullo_epi32(h, m2);
  return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}

// As AlignedRowBitsAvx512 with registers of 8 columns.
SHARDREC_AVX2 void AlignedRowBitsAvx2(uint64_t row_key, int64_t first_col, int32_t n,
                                      uint32_t* bits) {
  const int32_t head = static_cast<int32_t>((0u - static_cast<uint32_t>(first_col)) & 7u);
  int64_t i = 0;  // 64-bit: i passes n by up to a register's width
  for (; i < n && i < head; ++i) bits[i] = RoundingColumnBits(row_key, first_col + i);
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(row_key >> 32));
  for (; i < n; i += 8) {
    const uint32_t s = FirstStep(row_key, static_cast<uint32_t>(first_col + i));
    const __m256i h = _mm256_add_epi32(
        _mm256_load_si256(reinterpret_cast<const __m256i*>(kLowProducts8.t[s & 7u])),
        _mm256_set1_epi32(static_cast<int>((s & ~7u) * kFmix32Mul1)));
    const __m256i b = FinishBits(h, hi);
    if (n - i >= 8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits + i), b);
    } else {  // lanes below n - i: their mask's sign bit set
      const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      _mm256_maskstore_epi32(reinterpret_cast<int*>(bits + i), keep, b);
    }
  }
}

#undef SHARDREC_AVX2

}  // namespace
}  // namespace shardrec::optim::x86

#endif  // __x86_64__
