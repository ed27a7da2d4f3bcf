// Internal: the baseline level's vector type for the pooled kernel: SSE2 (every x86-64 CPU), 4
// floats per register; other architectures use one float per "register" (plain loops their
// compiler may vectorise for its own baseline). Included by pooled_baseline.cc only; internal
// linkage.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "impl/core/kernels/scalar.h"

namespace shardrec::core::kernels {
namespace {

#if defined(__x86_64__)
struct Sse {
  using Reg = __m128;
  static constexpr int kWidth = 4;
  static constexpr int kMaxRegs = 8;
  static constexpr int kMaxRegsWithTemps = 8;
  static constexpr bool kInt4Lut = false;  // int4 codes are widened and scaled (LoadU4)
  static constexpr bool kInt4Split = false;
  static Reg Zero() { return _mm_setzero_ps(); }
  static Reg Set1(float v) { return _mm_set1_ps(v); }
  static Reg Add(Reg a, Reg b) { return _mm_add_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm_mul_ps(a, b); }
  // a x b + c for the folded int8/int4 sums (pooled.h fold_dequant): a multiply and an add.
  static constexpr bool kFusedMulAdd = false;
  static Reg MulAdd(Reg a, Reg b, Reg c) { return _mm_add_ps(c, _mm_mul_ps(a, b)); }
  static Reg LoadF32(const float* p) { return _mm_loadu_ps(p); }
  static Reg LoadF16(const uint16_t* p) {
    return _mm_setr_ps(ScalarF16(p[0]), ScalarF16(p[1]), ScalarF16(p[2]), ScalarF16(p[3]));
  }
  static Reg LoadBf16(const uint16_t* p) {
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
  }
  // 4 bytes widened to 4 int32 lanes, as floats.
  static Reg Widen(__m128i bytes) {
    const __m128i zero = _mm_setzero_si128();
    return _mm_cvtepi32_ps(_mm_unpacklo_epi16(_mm_unpacklo_epi8(bytes, zero), zero));
  }
  // 4 one-byte codes, exactly as floats.
  static Reg LoadU8(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return Widen(_mm_cvtsi32_si128(static_cast<int>(v)));
  }
  // 4 FP8 codes looked up in their kind's 256-entry table (fp8_table.h), unscaled.
  static constexpr int kE4M3Shift = 0;
  static Reg LoadE4M3(const uint8_t* p, const float* table) {
    return _mm_setr_ps(table[p[0]], table[p[1]], table[p[2]], table[p[3]]);
  }
  static Reg LoadE5M2(const uint8_t* p, const float* table) { return LoadE4M3(p, table); }
  // 4 four-bit codes from 2 bytes, the low nibble first.
  static Reg LoadU4(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    const __m128i x = _mm_cvtsi32_si128(v);
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(x, nibble);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), nibble);
    return Widen(_mm_unpacklo_epi8(lo, hi));
  }
  static void Store(float* p, Reg v) { _mm_storeu_ps(p, v); }
};
#else
struct Sse {
  using Reg = float;
  static constexpr int kWidth = 1;
  static constexpr int kMaxRegs = 8;
  static constexpr int kMaxRegsWithTemps = 8;
  static constexpr bool kInt4Lut = false;  // int4 codes are widened and scaled (LoadU4)
  static constexpr bool kInt4Split = false;
  static Reg Zero() { return 0.0f; }
  static Reg Set1(float v) { return v; }
  static Reg Add(Reg a, Reg b) { return a + b; }
  static Reg Mul(Reg a, Reg b) { return a * b; }
  static constexpr bool kFusedMulAdd = false;
  static Reg MulAdd(Reg a, Reg b, Reg c) { return c + a * b; }  // rounded twice (no contraction)
  static Reg LoadF32(const float* p) { return *p; }
  static Reg LoadF16(const uint16_t* p) { return ScalarF16(*p); }
  static Reg LoadBf16(const uint16_t* p) { return ScalarBf16(*p); }
  static Reg LoadU8(const uint8_t* p) { return static_cast<float>(*p); }
  static constexpr int kE4M3Shift = 0;
  static Reg LoadE4M3(const uint8_t* p, const float* table) { return table[*p]; }
  static Reg LoadE5M2(const uint8_t* p, const float* table) { return table[*p]; }
  // Unused at one lane (the body reads int4 columns one by one), declared for the interface.
  static Reg LoadU4(const uint8_t* p) { return static_cast<float>(*p & 0xf); }
  static void Store(float* p, Reg v) { *p = v; }
};
#endif

}  // namespace
}  // namespace shardrec::core::kernels
