// The pooled kernel with AVX2 + F16C (built with -mavx2 -mf16c, never -mfma: a fused
// multiply-add would round differently from the other levels): 8 floats per register; 16
// registers per tile for unweighted fp32 rows (a 128-column row in one pass, every load folded
// into its add), 8 where a weight, a widened row or a quantized row's scale and bias need
// registers of their own.
#include "impl/core/kernels/pooled.h"
#include "impl/core/kernels/pooled_body.h"
#include "impl/core/kernels/vec_avx2.h"

namespace shardrec::core::kernels {

void PooledAvx2(const PooledArgs& args) { Pooled<Avx2>(args); }

}  // namespace shardrec::core::kernels
