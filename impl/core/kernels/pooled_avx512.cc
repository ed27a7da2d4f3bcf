// The pooled kernel with AVX-512 F/BW/VL (built with -mavx512f -mavx512bw -mavx512vl, never
// -mfma): 16 floats per register, 16 registers per tile (a 256-column row in one pass).
#include "impl/core/kernels/pooled.h"
#include "impl/core/kernels/pooled_body.h"
#include "impl/core/kernels/vec_avx512.h"

namespace shardrec::core::kernels {

void PooledAvx512(const PooledArgs& args) { Pooled<Avx512>(args); }

}  // namespace shardrec::core::kernels
