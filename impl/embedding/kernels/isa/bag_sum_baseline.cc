// Bag sums for every x86-64 CPU (SSE2): 4 floats per register, 8 registers per tile; fp16 rows
// widen element by element (no F16C at this level). Other architectures use the same code with
// one float per "register" (a plain loop the compiler may vectorise for its own baseline).
#include "impl/embedding/kernels/isa/bag_sum.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "impl/embedding/kernels/isa/bag_sum_body.h"

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
  static Reg Mul(Reg a, Reg b) { return _mm_mul_ps(a, b); }
  static Reg LoadF32(const float* p) { return _mm_loadu_ps(p); }
  static Reg LoadF16(const uint16_t* p) {
    return _mm_setr_ps(ScalarF16(p[0]), ScalarF16(p[1]), ScalarF16(p[2]), ScalarF16(p[3]));
  }
  static Reg LoadBf16(const uint16_t* p) {
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
  }
  static void Store(float* p, Reg v) { _mm_storeu_ps(p, v); }
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
  static Reg Mul(Reg a, Reg b) { return a * b; }
  static Reg LoadF32(const float* p) { return *p; }
  static Reg LoadF16(const uint16_t* p) { return ScalarF16(*p); }
  static Reg LoadBf16(const uint16_t* p) { return ScalarBf16(*p); }
  static void Store(float* p, Reg v) { *p = v; }
};
#endif

}  // namespace

void BagSumBaseline(const BagSumArgs& args) { BagSum<Sse>(args); }

}  // namespace shardrec::embedding::kernels::isa
