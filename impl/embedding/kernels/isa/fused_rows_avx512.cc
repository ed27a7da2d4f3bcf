// The fused backward's rows (isa/fused_rows.h) for AVX-512 F/BW/VL (built with
// -mavx512f -mavx512bw -mavx512vl, never -mfma).
#include "impl/embedding/kernels/isa/fused_rows.h"
#include "impl/embedding/kernels/isa/fused_rows_body.h"
#include "impl/embedding/kernels/isa/simd_avx512.h"

namespace shardrec::embedding::kernels::isa {

void FusedRowsAvx512(const FusedRowsArgs& args) { FusedRows<Avx512>(args); }
void Fp8RowAvx512(WeightType type, bool encode, float* values, int32_t cols, uint8_t* row) {
  Fp8Row<Avx512>(type, encode, values, cols, row);
}
void Fp8RowStochasticAvx512(WeightType type, const float* values, int32_t cols,
                            const uint32_t* bits, uint8_t* row) {
  Fp8RowStochastic<Avx512>(type, values, cols, bits, row);
}

}  // namespace shardrec::embedding::kernels::isa
