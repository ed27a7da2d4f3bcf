// The pooled lookup's summation of gathered fp32 rows, built once per instruction set
// (sum_rows_baseline.cc: SSE2; sum_rows_avx2.cc: AVX2) and chosen at run time. Every build gives
// the same bits: each output element adds its terms in row order, one fp32 multiply and add at a
// time, nothing fused.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardrec::serving {

// out[c] (+)= sum over j < n, in order, of w[j] * x[j][c] (w null: x[j][c]) for c < dim; `first`
// starts every sum at 0, otherwise it continues from out[c].
using SumRowsFn = void (*)(const float* const* x, const float* w, size_t n, int32_t dim, bool first,
                           float* out);

void SumRowsBaseline(const float* const* x, const float* w, size_t n, int32_t dim, bool first,
                     float* out);
void SumRowsAvx2(const float* const* x, const float* w, size_t n, int32_t dim, bool first,
                 float* out);

// The widest build this host runs.
SumRowsFn HostSumRows();

}  // namespace shardrec::serving
