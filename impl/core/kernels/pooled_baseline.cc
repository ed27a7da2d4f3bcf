// The pooled kernel for every x86-64 CPU (SSE2): 4 floats per register, 8 registers per tile;
// fp16 rows widen element by element (no F16C at this level). Other architectures use the same
// code with one float per "register" (a plain loop the compiler may vectorise for its own
// baseline).
#include "impl/core/kernels/pooled.h"
#include "impl/core/kernels/pooled_body.h"
#include "impl/core/kernels/vec_sse.h"

namespace shardrec::core::kernels {

void PooledBaseline(const PooledArgs& args) { Pooled<Sse>(args); }

}  // namespace shardrec::core::kernels
