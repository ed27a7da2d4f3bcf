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
  // 32-bit integer lanes for the FP8 row codec (isa/fp8_rows_body.h): bit patterns of the
  // floats, masks of all ones where a comparison holds.
  using IReg = __m256i;
  using IMask = __m256i;
  static IReg AsInt(Reg v) { return _mm256_castps_si256(v); }
  static Reg AsFloat(IReg v) { return _mm256_castsi256_ps(v); }
  static IReg ISet1(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  static IReg IAnd(IReg a, IReg b) { return _mm256_and_si256(a, b); }
  static IReg IOr(IReg a, IReg b) { return _mm256_or_si256(a, b); }
  static IReg IAdd(IReg a, IReg b) { return _mm256_add_epi32(a, b); }
  static IReg ISub(IReg a, IReg b) { return _mm256_sub_epi32(a, b); }
  template <int n>
  static IReg Srl(IReg v) {
    return _mm256_srli_epi32(v, n);
  }
  template <int n>
  static IReg Sll(IReg v) {
    return _mm256_slli_epi32(v, n);
  }
  static IMask IGt(IReg a, IReg b) { return _mm256_cmpgt_epi32(a, b); }  // signed
  static IReg IMax(IReg a, IReg b) { return _mm256_max_epi32(a, b); }    // signed
  static IMask IEq(IReg a, IReg b) { return _mm256_cmpeq_epi32(a, b); }
  static IReg ISelect(IMask m, IReg a, IReg b) { return _mm256_blendv_epi8(b, a, m); }
  static bool Any(IMask m) { return _mm256_movemask_epi8(m) != 0; }
  static Reg CvtI32(IReg v) { return _mm256_cvtepi32_ps(v); }  // exact for the small counts used
  static IReg ILoad(const uint32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static void IStore(uint32_t* p, IReg v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  // kWidth bytes widened to lanes, and each lane's low byte stored (lanes within 0..255).
  static IReg LoadBytes(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static void StoreBytes(uint8_t* p, IReg v) {
    const __m256i w = _mm256_packs_epi32(v, v);  // per 128-bit half: its 4 lanes, twice
    const __m256i b = _mm256_packus_epi16(w, w);
    const int32_t lo = _mm_cvtsi128_si32(_mm256_castsi256_si128(b));
    const int32_t hi = _mm_cvtsi128_si32(_mm256_extracti128_si256(b, 1));
    __builtin_memcpy(p, &lo, 4);
    __builtin_memcpy(p + 4, &hi, 4);
  }
};

}  // namespace
}  // namespace shardrec::embedding::kernels::isa
