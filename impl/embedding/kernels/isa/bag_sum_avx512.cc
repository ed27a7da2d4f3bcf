// Bag sums with AVX-512 F/BW/VL (built with -mavx512f -mavx512bw -mavx512vl, never -mfma): 16
// floats per register, 16 registers per tile (a 256-column row in one pass).
#include <immintrin.h>

// GCC 12's _mm512_cvtph_ps starts from an undefined vector it then overwrites, which
// -Wmaybe-uninitialized reports wherever it is inlined (a false positive in the header).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "impl/embedding/kernels/isa/bag_sum.h"
#include "impl/embedding/kernels/isa/bag_sum_body.h"

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
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
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
};

}  // namespace

void BagSumAvx512(const BagSumArgs& args) { BagSum<Avx512>(args); }

}  // namespace shardrec::embedding::kernels::isa
