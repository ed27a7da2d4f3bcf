// Codec passes compiled for AVX2 + F16C (codec.cmake sets the flags of this file only). bf16, the
// quantized rows and the fallbacks are the vectorised loops of codec_body.h; fp16 uses the F16C
// conversions,
// which GCC does not derive from those loops (they ran at ~4 GB/s against ~17 GB/s for bf16).
// vcvtps2ph / vcvtph2ps round and widen as IEEE does, as half.h's FloatToHalf / HalfToFloat do;
// the lanes where half.h deliberately differs are patched: a finite value beyond 65504
// saturates, a NaN becomes sign | 0x7e00 when encoded and keeps its payload bits (no quiet bit
// set) when decoded. encoded_test compares every half and ~460k floats with the baseline.
#include <immintrin.h>

#include <cstring>

#include "impl/core/codec/codec.h"
#include "impl/core/fp8_table.h"
#include "impl/core/half.h"  // before the body, which is included inside a namespace

namespace shardrec::codec {

#include "impl/core/codec/codec_body.h"

namespace {

void ToHalfF16c(const float* src, size_t n, uint16_t* dst) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i largest = _mm256_set1_epi32(0x477fe000);  // 65504
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i sign_bit = _mm256_set1_epi32(0x8000);
  const __m256i saturated = _mm256_set1_epi32(0x7bff);
  const __m256i quiet_nan = _mm256_set1_epi32(0x7e00);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i ax = _mm256_and_si256(bits, abs_mask);  // non-negative: signed compares work
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 16), sign_bit);
    const __m256i beyond =
        _mm256_and_si256(_mm256_cmpgt_epi32(ax, largest), _mm256_cmpgt_epi32(inf, ax));
    const __m256i nan = _mm256_cmpgt_epi32(ax, inf);
    __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    h = _mm256_blendv_epi8(h, _mm256_or_si256(sign, saturated), beyond);
    h = _mm256_blendv_epi8(h, _mm256_or_si256(sign, quiet_nan), nan);
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = ToHalfSaturating(src[i]);
}

// Eight halves widened; NaN lanes keep their payload exactly (sign | 0x7f800000 | mant << 13).
inline __m256 Widen(const uint16_t* src) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m256i h32 = _mm256_cvtepu16_epi32(h);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x7fff)),
                                         _mm256_set1_epi32(0x7c00));
  const __m256i exact = _mm256_or_si256(
      _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16),
                      _mm256_set1_epi32(0x7f800000)),
      _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3ff)), 13));
  return _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(exact), _mm256_castsi256_ps(nan));
}

void FromHalfF16c(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, Widen(src + i));
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

void AddHalfF16c(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), Widen(src + i)));
  for (; i < n; ++i) dst[i] += HalfToFloat(src[i]);
}

// A stored fp16 row (serving): eight values at a time through Widen (unaligned loads read the
// bytes as they are), the tail as the baseline does.
void DecodeRowFp16F16c(const uint8_t* row, int32_t dim, float* out, uint8_t* scratch) {
  int32_t c = 0;
  for (; c + 8 <= dim; c += 8)
    _mm256_storeu_ps(out + c, Widen(reinterpret_cast<const uint16_t*>(row + 2 * c)));
  DecodeRowFp16(row + 2 * c, dim - c, out + c, scratch);
}

constexpr Passes kF16cPasses{ToHalfF16c,
                             ToBf16,
                             FromHalfF16c,
                             FromBf16,
                             AddHalfF16c,
                             AddBf16,
                             {nullptr, DecodeRowFp16F16c, DecodeRowBf16, DecodeRowInt8,
                              DecodeRowInt4, DecodeRowFp8<0>, DecodeRowFp8<1>}};

}  // namespace

const Passes& Avx2() { return kF16cPasses; }

}  // namespace shardrec::codec
