// Internal: the AVX2 level's vector type (AVX2 + F16C; included only by translation units built
// with -mavx2 -mf16c and never -mfma): 8 floats per register, two column quads. Internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace shardrec::embedding::kernels::isa {
namespace {

struct Avx2 {
  using Reg = __m256;
  static constexpr int kWidth = 8;
  static constexpr int kMaxRegs = 16;
  static constexpr int kMaxRegsWithTemps = 8;
  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Set1(float v) { return _mm256_set1_ps(v); }
  static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg Sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg Div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg Sqrt(Reg a) { return _mm256_sqrt_ps(a); }
  static Reg LoadF32(const float* p) { return _mm256_loadu_ps(p); }
  static Reg LoadF16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg LoadBf16(const uint16_t* p) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static void Store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static __m256i FirstMask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  // The first n (< kWidth) elements; the others are zero / left alone.
  static Reg LoadFirst(const float* p, int n) { return _mm256_maskload_ps(p, FirstMask(n)); }
  static void StoreFirst(float* p, Reg v, int n) { _mm256_maskstore_ps(p, FirstMask(n), v); }
  static Reg KeepFirst(Reg v, int n) { return _mm256_and_ps(v, _mm256_castsi256_ps(FirstMask(n))); }
  // Element i of every column quad moved to the quad's first element (the others: any value).
  template <int i>
  static Reg QuadShift(Reg v) {
    return _mm256_permute_ps(v, i);
  }
  // The register's two quads combined in CombineLanes' order: quad 0 += quad 1.
  static float FoldQuads(Reg v) {
    return _mm_cvtss_f32(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
  }
};

}  // namespace
}  // namespace shardrec::embedding::kernels::isa
