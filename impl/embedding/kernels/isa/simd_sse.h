// Internal: the baseline level's vector type for the per-instruction-set kernels: SSE2 (every
// x86-64 CPU), 4 floats per register, one column quad; other architectures use one float per
// "register" (plain loops their compiler may vectorise for its own baseline). Included by the
// baseline translation units only; internal linkage.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "impl/embedding/kernels/isa/scalar_half.h"

namespace shardrec::embedding::kernels::isa {
namespace {

#if defined(__x86_64__)
struct Sse {
  using Reg = __m128;
  static constexpr int kWidth = 4;
  static constexpr int kMaxRegs = 8;
  static constexpr int kMaxRegsWithTemps = 8;
  static Reg Zero() { return _mm_setzero_ps(); }
  static Reg Set1(float v) { return _mm_set1_ps(v); }
  static Reg Add(Reg a, Reg b) { return _mm_add_ps(a, b); }
  static Reg Sub(Reg a, Reg b) { return _mm_sub_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm_mul_ps(a, b); }
  static Reg Div(Reg a, Reg b) { return _mm_div_ps(a, b); }
  static Reg Sqrt(Reg a) { return _mm_sqrt_ps(a); }
  static Reg LoadF32(const float* p) { return _mm_loadu_ps(p); }
  static Reg LoadF16(const uint16_t* p) {
    return _mm_setr_ps(ScalarF16(p[0]), ScalarF16(p[1]), ScalarF16(p[2]), ScalarF16(p[3]));
  }
  static Reg LoadBf16(const uint16_t* p) {
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
  }
  static void Store(float* p, Reg v) { _mm_storeu_ps(p, v); }
  // The first n (< kWidth) elements; the others are zero / left alone.
  static Reg LoadFirst(const float* p, int n) {
    alignas(16) float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < n; ++i) t[i] = p[i];
    return _mm_load_ps(t);
  }
  static void StoreFirst(float* p, Reg v, int n) {
    alignas(16) float t[4];
    _mm_store_ps(t, v);
    for (int i = 0; i < n; ++i) p[i] = t[i];
  }
  static Reg KeepFirst(Reg v, int n) {
    const __m128i lane = _mm_setr_epi32(0, 1, 2, 3);
    return _mm_and_ps(v, _mm_castsi128_ps(_mm_cmplt_epi32(lane, _mm_set1_epi32(n))));
  }
  // Element i of every column quad moved to the quad's first element (the others: any value).
  template <int i>
  static Reg QuadShift(Reg v) {
    return _mm_shuffle_ps(v, v, i);
  }
  // The register's quads combined in CombineLanes' order; one quad here.
  static float FoldQuads(Reg v) { return _mm_cvtss_f32(v); }
  // 32-bit integer lanes for the FP8 row codec (isa/fp8_rows_body.h): bit patterns of the
  // floats, masks of all ones where a comparison holds.
  using IReg = __m128i;
  using IMask = __m128i;
  static IReg AsInt(Reg v) { return _mm_castps_si128(v); }
  static Reg AsFloat(IReg v) { return _mm_castsi128_ps(v); }
  static IReg ISet1(uint32_t v) { return _mm_set1_epi32(static_cast<int>(v)); }
  static IReg IAnd(IReg a, IReg b) { return _mm_and_si128(a, b); }
  static IReg IOr(IReg a, IReg b) { return _mm_or_si128(a, b); }
  static IReg IAdd(IReg a, IReg b) { return _mm_add_epi32(a, b); }
  static IReg ISub(IReg a, IReg b) { return _mm_sub_epi32(a, b); }
  template <int n>
  static IReg Srl(IReg v) {
    return _mm_srli_epi32(v, n);
  }
  template <int n>
  static IReg Sll(IReg v) {
    return _mm_slli_epi32(v, n);
  }
  static IMask IGt(IReg a, IReg b) { return _mm_cmpgt_epi32(a, b); }     // signed
  static IReg IMax(IReg a, IReg b) { return ISelect(IGt(a, b), a, b); }  // signed (SSE2)
  static IMask IEq(IReg a, IReg b) { return _mm_cmpeq_epi32(a, b); }
  static IReg ISelect(IMask m, IReg a, IReg b) {
    return _mm_or_si128(_mm_and_si128(m, a), _mm_andnot_si128(m, b));
  }
  static bool Any(IMask m) { return _mm_movemask_epi8(m) != 0; }
  static Reg CvtI32(IReg v) { return _mm_cvtepi32_ps(v); }  // exact for the small counts used
  static IReg ILoad(const uint32_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  static void IStore(uint32_t* p, IReg v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }
  // kWidth bytes widened to lanes, and each lane's low byte stored (lanes within 0..255).
  static IReg LoadBytes(const uint8_t* p) {
    int32_t w;
    __builtin_memcpy(&w, p, 4);
    const __m128i z = _mm_setzero_si128();
    return _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(w), z), z);
  }
  static void StoreBytes(uint8_t* p, IReg v) {
    const __m128i b = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
    const int32_t w = _mm_cvtsi128_si32(b);
    __builtin_memcpy(p, &w, 4);
  }
};
#else
struct Sse {
  using Reg = float;
  static constexpr int kWidth = 1;
  static constexpr int kMaxRegs = 8;
  static constexpr int kMaxRegsWithTemps = 8;
  static Reg Zero() { return 0.0f; }
  static Reg Set1(float v) { return v; }
  static Reg Add(Reg a, Reg b) { return a + b; }
  static Reg Sub(Reg a, Reg b) { return a - b; }
  static Reg Mul(Reg a, Reg b) { return a * b; }
  static Reg Div(Reg a, Reg b) { return a / b; }
  static Reg Sqrt(Reg a) { return __builtin_sqrtf(a); }
  static Reg LoadF32(const float* p) { return *p; }
  static Reg LoadF16(const uint16_t* p) { return ScalarF16(*p); }
  static Reg LoadBf16(const uint16_t* p) { return ScalarBf16(*p); }
  static void Store(float* p, Reg v) { *p = v; }
  static Reg LoadFirst(const float*, int) { return 0.0f; }
  static void StoreFirst(float*, Reg, int) {}
  static Reg KeepFirst(Reg v, int n) { return n > 0 ? v : 0.0f; }
  using IReg = uint32_t;
  using IMask = uint32_t;
  static IReg AsInt(Reg v) {
    uint32_t u;
    __builtin_memcpy(&u, &v, 4);
    return u;
  }
  static Reg AsFloat(IReg v) {
    float f;
    __builtin_memcpy(&f, &v, 4);
    return f;
  }
  static IReg ISet1(uint32_t v) { return v; }
  static IReg IAnd(IReg a, IReg b) { return a & b; }
  static IReg IOr(IReg a, IReg b) { return a | b; }
  static IReg IAdd(IReg a, IReg b) { return a + b; }
  static IReg ISub(IReg a, IReg b) { return a - b; }
  template <int n>
  static IReg Srl(IReg v) {
    return v >> n;
  }
  template <int n>
  static IReg Sll(IReg v) {
    return v << n;
  }
  static IMask IGt(IReg a, IReg b) {
    return static_cast<int32_t>(a) > static_cast<int32_t>(b) ? ~0u : 0u;
  }
  static IReg IMax(IReg a, IReg b) {
    return static_cast<int32_t>(a) > static_cast<int32_t>(b) ? a : b;
  }
  static IMask IEq(IReg a, IReg b) { return a == b ? ~0u : 0u; }
  static IReg ISelect(IMask m, IReg a, IReg b) { return (a & m) | (b & ~m); }
  static bool Any(IMask m) { return m != 0; }
  static Reg CvtI32(IReg v) { return static_cast<float>(static_cast<int32_t>(v)); }
  static IReg ILoad(const uint32_t* p) { return *p; }
  static void IStore(uint32_t* p, IReg v) { *p = v; }
  static IReg LoadBytes(const uint8_t* p) { return *p; }
  static void StoreBytes(uint8_t* p, IReg v) { *p = static_cast<uint8_t>(v); }
};
#endif

}  // namespace
}  // namespace shardrec::embedding::kernels::isa
