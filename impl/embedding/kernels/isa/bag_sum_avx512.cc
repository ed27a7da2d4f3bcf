// Bag sums with AVX-512 F/BW/VL (built with -mavx512f -mavx512bw -mavx512vl, never -mfma): 16
// floats per register, 16 registers per tile (a 256-column row in one pass).
#include "impl/embedding/kernels/isa/bag_sum.h"
#include "impl/embedding/kernels/isa/bag_sum_body.h"
#include "impl/embedding/kernels/isa/simd_avx512.h"

namespace shardrec::embedding::kernels::isa {

void BagSumAvx512(const BagSumArgs& args) { BagSum<Avx512>(args); }

}  // namespace shardrec::embedding::kernels::isa
