// The fused backward's rows (isa/fused_rows.h) for every x86-64 CPU (SSE2; other
// architectures: one float per register).
#include "impl/embedding/kernels/isa/fused_rows.h"
#include "impl/embedding/kernels/isa/fused_rows_body.h"
#include "impl/embedding/kernels/isa/simd_sse.h"

namespace shardrec::embedding::kernels::isa {

void FusedRowsBaseline(const FusedRowsArgs& args) { FusedRows<Sse>(args); }

}  // namespace shardrec::embedding::kernels::isa
