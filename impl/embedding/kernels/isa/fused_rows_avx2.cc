// The fused backward's rows (isa/fused_rows.h) for AVX2 + F16C (built with -mavx2
// -mf16c, never -mfma).
#include "impl/embedding/kernels/isa/fused_rows.h"
#include "impl/embedding/kernels/isa/fused_rows_body.h"
#include "impl/embedding/kernels/isa/simd_avx2.h"

namespace shardrec::embedding::kernels::isa {

void FusedRowsAvx2(const FusedRowsArgs& args) { FusedRows<Avx2>(args); }
void Fp8RowAvx2(WeightType type, bool encode, float* values, int32_t cols, uint8_t* row) {
  Fp8Row<Avx2>(type, encode, values, cols, row);
}
void Fp8RowStochasticAvx2(WeightType type, const float* values, int32_t cols, const uint32_t* bits,
                          uint8_t* row) {
  Fp8RowStochastic<Avx2>(type, values, cols, bits, row);
}

}  // namespace shardrec::embedding::kernels::isa
