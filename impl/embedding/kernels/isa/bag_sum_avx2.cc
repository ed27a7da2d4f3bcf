// Bag sums with AVX2 + F16C (built with -mavx2 -mf16c, never -mfma: a fused multiply-add would
// round differently from the other levels): 8 floats per register; 16 registers per tile for
// unweighted fp32 rows (a 128-column row in one pass, every load folded into its add), 8 where
// a weight or a widened row needs registers of its own.
#include <immintrin.h>

#include "impl/embedding/kernels/isa/bag_sum.h"
#include "impl/embedding/kernels/isa/bag_sum_body.h"

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
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
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
};

}  // namespace

void BagSumAvx2(const BagSumArgs& args) { BagSum<Avx2>(args); }

}  // namespace shardrec::embedding::kernels::isa
