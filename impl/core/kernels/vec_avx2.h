// Internal: the AVX2 level's vector type for the pooled kernel (included only by pooled_avx2.cc,
// built with -mavx2 -mf16c and never -mfma): 8 floats per register. Internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace shardrec::core::kernels {
namespace {

struct Avx2 {
  using Reg = __m256;
  static constexpr int kWidth = 8;
  static constexpr int kMaxRegs = 16;
  static constexpr int kMaxRegsWithTemps = 8;
  static constexpr bool kInt4Lut = false;  // int4 codes are widened and scaled (LoadU4)
  static constexpr bool kInt4Split = false;
  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Set1(float v) { return _mm256_set1_ps(v); }
  static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  // a x b + c for the folded int8/int4 sums (pooled.h fold_dequant): a multiply and an add, as
  // this level is built without FMA (an AVX2 host need not have it).
  static constexpr bool kFusedMulAdd = false;
  static Reg MulAdd(Reg a, Reg b, Reg c) { return _mm256_add_ps(c, _mm256_mul_ps(a, b)); }
  static Reg LoadF32(const float* p) { return _mm256_loadu_ps(p); }
  static Reg LoadF16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg LoadBf16(const uint16_t* p) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  // 8 one-byte codes, exactly as floats.
  static Reg LoadU8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // 8 FP8 codes decoded through F16C (fp8_table.h's table holds the same values; unused here,
  // a gather from it is slower). An E5M2 code is the top byte of the IEEE half of its value; an
  // E4M3 code, its sign moved to bit 15 and the rest to bits 7-14, is the half of its value x 2^-8
  // (normal and subnormal alike): LoadE4M3 returns that (kE4M3Shift = 8), and the kernel scales
  // by the row's scale x 2^8, so each product is the same exact value rounded once. E4M3's NaN
  // code would read as 1.875: those lanes are set to a NaN (all ones).
  static constexpr int kE4M3Shift = 8;
  static Reg LoadE5M2(const uint8_t* p, const float*) {
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(), codes));
  }
  static Reg LoadE4M3(const uint8_t* p, const float*) {
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i half = _mm_and_si128(
        _mm_srai_epi16(_mm_unpacklo_epi8(_mm_setzero_si128(), codes), 1), _mm_set1_epi16(-16385));
    const __m256 v = _mm256_cvtph_ps(half);
    const __m256 nan = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v),
                                     _mm256_set1_ps(1.875f), _CMP_EQ_OQ);
    return _mm256_or_ps(v, nan);
  }
  // 8 four-bit codes from 4 bytes, the low nibble first.
  static Reg LoadU4(const uint8_t* p) {
    uint32_t packed;
    std::memcpy(&packed, p, 4);
    const __m128i x = _mm_cvtsi32_si128(static_cast<int>(packed));
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(x, nibble);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), nibble);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
  }
  static void Store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
};

}  // namespace
}  // namespace shardrec::core::kernels
