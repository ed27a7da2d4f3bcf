// Internal: the AVX-512 level's vector type for the pooled kernel (included only by
// pooled_avx512.cc, built with -mavx512f -mavx512bw -mavx512vl and never -mfma): 16 floats per
// register, 32 registers (room for the temporaries). Internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

// GCC 12's _mm512_cvtph_ps starts from an undefined vector it then overwrites, which
// -Wmaybe-uninitialized reports wherever it is inlined (a false positive in the header).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace shardrec::core::kernels {
namespace {

struct Avx512 {
  using Reg = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kMaxRegs = 16;
  static constexpr int kMaxRegsWithTemps = 16;
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Set1(float v) { return _mm512_set1_ps(v); }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  // a x b + c rounded once for the folded int8/int4 sums (pooled.h fold_dequant): AVX-512 F has
  // the fused multiply-add (the level is built without -mfma, so nothing else is contracted).
  static constexpr bool kFusedMulAdd = true;
  static Reg MulAdd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg LoadF32(const float* p) { return _mm512_loadu_ps(p); }
  static Reg LoadF16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Reg LoadBf16(const uint16_t* p) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  // 16 one-byte codes, exactly as floats.
  static Reg LoadU8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // 16 FP8 codes decoded through the half conversion, as Avx2's LoadE5M2/LoadE4M3 do (vec_avx2.h
  // says why that is exact; E4M3 values x 2^-8); E4M3's NaN code reads as a NaN.
  static constexpr int kE4M3Shift = 8;
  static Reg LoadE5M2(const uint8_t* p, const float*) {
    const __m256i codes =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtph_ps(_mm256_slli_epi16(codes, 8));
  }
  static Reg LoadE4M3(const uint8_t* p, const float*) {
    const __m256i codes =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i half = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(codes, 8), 1),
                                          _mm256_set1_epi16(-16385));
    // The NaN code (half 0x3F80 or 0xBF80, 1.875) becomes the half NaN 0x7FFF before widening.
    const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(half, _mm256_set1_epi16(0x7FFF)),
                                                  _mm256_set1_epi16(0x3F80));
    return _mm512_cvtph_ps(_mm256_mask_mov_epi16(half, nan, _mm256_set1_epi16(0x7FFF)));
  }
  // int4 rows decode through a 16-entry table of code x scale + bias (LutU4).
  static constexpr bool kInt4Lut = true;
  static Reg Iota() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  // 16 four-bit codes from 8 bytes (the low nibble first) looked up in `lut`: each byte
  // zero-extended into a 64-bit lane and or-ed with itself shifted left by 28 puts its low nibble
  // at the bottom of the even 32-bit lane and its high nibble at the bottom of the odd one;
  // vpermps reads only those four bits of each index.
  static Reg LutU4(const uint8_t* p, Reg lut) {
    const __m512i t = _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm512_permutexvar_ps(_mm512_or_si512(t, _mm512_slli_epi64(t, 28)), lut);
  }
  // 32 four-bit codes from 16 bytes looked up in `lut`, split by column parity: *even gets the
  // low nibbles (columns 0, 2, ..., 30), *odd the high ones (1, 3, ..., 31). Each byte widened
  // into its own 32-bit lane serves both lookups (vpermps reads only an index's low four bits,
  // so the high nibble needs a shift and no mask): three shuffles for 32 values where LutU4
  // takes four, and two operations fewer; StoreSplit puts the columns back in order.
  static constexpr bool kInt4Split = true;
  static void LutU4Split(const uint8_t* p, Reg lut, Reg* even, Reg* odd) {
    const __m512i t = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *even = _mm512_permutexvar_ps(t, lut);
    *odd = _mm512_permutexvar_ps(_mm512_srli_epi32(t, 4), lut);
  }
  // 32 floats in column order from LutU4Split's halves.
  static void StoreSplit(float* p, Reg even, Reg odd) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi =
        _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    _mm512_storeu_ps(p, _mm512_permutex2var_ps(even, lo, odd));
    _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(even, hi, odd));
  }
  // 16 four-bit codes from 8 bytes, the low nibble first.
  static Reg LoadU4(const uint8_t* p) {
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(x, nibble);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), nibble);
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
  }
  static void Store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
};

}  // namespace
}  // namespace shardrec::core::kernels
