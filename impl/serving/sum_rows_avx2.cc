// The row summation built for AVX2 (compiled with -mavx2, never -mfma: a fused multiply-add
// would round differently from the baseline build).
#include "impl/serving/sum_rows.h"
#include "impl/serving/sum_rows_body.h"

namespace shardrec::serving {

void SumRowsAvx2(const float* const* x, const float* w, size_t n, int32_t dim, bool first,
                 float* out) {
  SumRowsBody(x, w, n, dim, first, out);
}

}  // namespace shardrec::serving
