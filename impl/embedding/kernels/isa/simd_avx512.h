// Internal: the AVX-512 level's vector type (F/BW/VL; included only by translation units built
// with -mavx512f -mavx512bw -mavx512vl and never -mfma): 16 floats per register, four column
// quads. Internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

// GCC 12's _mm512_cvtph_ps and masked loads start from an undefined vector they then overwrite,
// which -Wmaybe-uninitialized reports wherever they are inlined (a false positive in the header).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace shardrec::embedding::kernels::isa {
namespace {

struct Avx512 {
  using Reg = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kMaxRegs = 16;
  static constexpr int kMaxRegsWithTemps = 16;  // 32 registers: room for the temporaries
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Set1(float v) { return _mm512_set1_ps(v); }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg Sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg Div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg Sqrt(Reg a) { return _mm512_sqrt_ps(a); }
  static Reg LoadF32(const float* p) { return _mm512_loadu_ps(p); }
  static Reg LoadF16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Reg LoadBf16(const uint16_t* p) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static void Store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static __mmask16 FirstMask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  // The first n (< kWidth) elements; the others are zero / left alone.
  static Reg LoadFirst(const float* p, int n) { return _mm512_maskz_loadu_ps(FirstMask(n), p); }
  static void StoreFirst(float* p, Reg v, int n) { _mm512_mask_storeu_ps(p, FirstMask(n), v); }
  static Reg KeepFirst(Reg v, int n) { return _mm512_maskz_mov_ps(FirstMask(n), v); }
  // Element i of every column quad moved to the quad's first element (the others: any value).
  template <int i>
  static Reg QuadShift(Reg v) {
    return _mm512_permute_ps(v, i);
  }
  // The register's four quads combined in CombineLanes' order: quads 0, 1 += quads 2, 3, then
  // quad 0 += quad 1.
  // (The zero-masking form with every lane kept is the same instruction; GCC 12's plain form
  // merges into _mm512_undefined_ps, which it then reports as uninitialized where it inlines.)
  static float FoldQuads(Reg v) {
    const Reg t = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(0xFFFF, v, v, 0x0E));
    return _mm512_cvtss_f32(_mm512_add_ps(t, _mm512_maskz_shuffle_f32x4(0xFFFF, t, t, 0x01)));
  }
  // 32-bit integer lanes for the FP8 row codec (isa/fp8_rows_body.h): bit patterns of the
  // floats, comparisons as mask registers. (Zero-masking forms with every lane kept, as in
  // FoldQuads: GCC 12's plain forms start from an undefined vector it reports.)
  using IReg = __m512i;
  using IMask = __mmask16;
  static IReg AsInt(Reg v) { return _mm512_castps_si512(v); }
  static Reg AsFloat(IReg v) { return _mm512_castsi512_ps(v); }
  static IReg ISet1(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
  static IReg IAnd(IReg a, IReg b) { return _mm512_and_si512(a, b); }
  static IReg IOr(IReg a, IReg b) { return _mm512_or_si512(a, b); }
  static IReg IAdd(IReg a, IReg b) { return _mm512_add_epi32(a, b); }
  static IReg ISub(IReg a, IReg b) { return _mm512_sub_epi32(a, b); }
  template <int n>
  static IReg Srl(IReg v) {
    return _mm512_maskz_srli_epi32(0xFFFF, v, n);
  }
  template <int n>
  static IReg Sll(IReg v) {
    return _mm512_maskz_slli_epi32(0xFFFF, v, n);
  }
  static IMask IGt(IReg a, IReg b) { return _mm512_cmpgt_epi32_mask(a, b); }  // signed
  static IReg IMax(IReg a, IReg b) { return _mm512_max_epi32(a, b); }         // signed
  static IMask IEq(IReg a, IReg b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static IReg ISelect(IMask m, IReg a, IReg b) { return _mm512_mask_blend_epi32(m, b, a); }
  static bool Any(IMask m) { return m != 0; }
  static Reg CvtI32(IReg v) {
    return _mm512_maskz_cvtepi32_ps(0xFFFF, v);
  }  // exact for the small counts used
  static IReg ILoad(const uint32_t* p) { return _mm512_loadu_si512(p); }
  static void IStore(uint32_t* p, IReg v) { _mm512_storeu_si512(p, v); }
  // kWidth bytes widened to lanes, and each lane's low byte stored (lanes within 0..255).
  static IReg LoadBytes(const uint8_t* p) {
    return _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void StoreBytes(uint8_t* p, IReg v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_maskz_cvtepi32_epi8(0xFFFF, v));
  }
};

}  // namespace
}  // namespace shardrec::embedding::kernels::isa
