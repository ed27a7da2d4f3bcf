// The fused backward's rows (isa/fused_rows.h) for every x86-64 CPU (SSE2; other
// architectures: one float per register).
#include "impl/embedding/kernels/isa/fused_rows.h"
#include "impl/embedding/kernels/isa/fused_rows_body.h"
#include "impl/embedding/kernels/isa/simd_sse.h"

namespace shardrec::embedding::kernels::isa {

void FusedRowsBaseline(const FusedRowsArgs& args) { FusedRows<Sse>(args); }
void Fp8RowBaseline(WeightType type, bool encode, float* values, int32_t cols, uint8_t* row) {
  Fp8Row<Sse>(type, encode, values, cols, row);
}
void Fp8RowStochasticBaseline(WeightType type, const float* values, int32_t cols,
                              const uint32_t* bits, uint8_t* row) {
  Fp8RowStochastic<Sse>(type, values, cols, bits, row);
}

}  // namespace shardrec::embedding::kernels::isa
