// The one GEMM seam of the dense side. Every dense layer calls Gemm and nothing else for its
// matrix products, so a CUDA twin (cuBLASLt inside the plugin) serves the same call and the CPU
// path is one place to measure against OpenBLAS.
#pragma once

#include <cstdint>

#include "impl/core/exec.h"
#include "impl/core/status.h"

namespace shardrec::dense {

// c[m, n] = alpha * op(a) * op(b) + beta * c, all row-major fp32. op(a) is a[m, k] or, with
// trans_a, the transpose of a[k, m]; likewise op(b) is b[k, n] or the transpose of b[n, k].
// Host contexts run OpenBLAS's sgemm (its own threads); a CUDA context is refused here (the
// plugin serves it). m, n or k may be 0.
Status Gemm(const ExecContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, const float* a, const float* b, float beta, float* c);

// OpenBLAS's thread count is process-wide. Several ranks that are threads of one process each
// calling a multi-threaded sgemm oversubscribe the cores (an 8x slowdown was measured with 4
// rank threads on 2 cores), so hosts in that situation set it to 1. n < 1 is refused.
Status SetBlasThreads(int n);
int BlasThreads();

}  // namespace shardrec::dense
