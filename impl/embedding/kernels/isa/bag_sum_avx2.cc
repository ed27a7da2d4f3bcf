// Bag sums with AVX2 + F16C (built with -mavx2 -mf16c, never -mfma: a fused multiply-add would
// round differently from the other levels): 8 floats per register; 16 registers per tile for
// unweighted fp32 rows (a 128-column row in one pass, every load folded into its add), 8 where
// a weight or a widened row needs registers of its own.
#include "impl/embedding/kernels/isa/bag_sum.h"
#include "impl/embedding/kernels/isa/bag_sum_body.h"
#include "impl/embedding/kernels/isa/simd_avx2.h"

namespace shardrec::embedding::kernels::isa {

void BagSumAvx2(const BagSumArgs& args) { BagSum<Avx2>(args); }

}  // namespace shardrec::embedding::kernels::isa
