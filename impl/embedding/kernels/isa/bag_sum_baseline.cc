// Bag sums for every x86-64 CPU (SSE2): 4 floats per register, 8 registers per tile; fp16 rows
// widen element by element (no F16C at this level). Other architectures use the same code with
// one float per "register" (a plain loop the compiler may vectorise for its own baseline).
#include "impl/embedding/kernels/isa/bag_sum.h"
#include "impl/embedding/kernels/isa/bag_sum_body.h"
#include "impl/embedding/kernels/isa/simd_sse.h"

namespace shardrec::embedding::kernels::isa {

void BagSumBaseline(const BagSumArgs& args) { BagSum<Sse>(args); }

}  // namespace shardrec::embedding::kernels::isa
