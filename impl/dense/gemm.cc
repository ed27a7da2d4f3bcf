// The host BLAS (opened on first use, blas_loader.h) behind the Gemm seam. sgemm takes int
// dimensions, so shapes are checked to fit: a silently truncated dimension would compute on the
// wrong memory.
#include "impl/dense/gemm.h"

#include <cblas.h>

#include <limits>

#include "impl/core/check.h"
#include "impl/dense/blas_loader.h"

namespace shardrec::dense {

Status Gemm(const ExecContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, const float* a, const float* b, float beta, float* c) {
  if (!ctx.is_host()) {
    return Status::Unsupported("dense GEMM on ", ctx.device().ToString(),
                               " runs in the CUDA plugin, not on the host path");
  }
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (m < 0 || n < 0 || k < 0 || m > kMax || n > kMax || k > kMax) {
    return Status::InvalidArgument("GEMM shape ", m, "x", n, "x", k, " out of range");
  }
  if (m == 0 || n == 0) return Status::Ok();
  const BlasApi* blas = nullptr;
  SR_RETURN_IF_ERROR(LoadBlas(&blas));
  if (k == 0) {
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return Status::Ok();
  }
  const int lda = static_cast<int>(trans_a ? m : k);
  const int ldb = static_cast<int>(trans_b ? k : n);
  blas->sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, lda, b, ldb, beta, c, static_cast<int>(n));
  return Status::Ok();
}

Status SetBlasThreads(int n) {
  if (n < 1) return Status::InvalidArgument("BLAS thread count ", n, " must be >= 1");
  const BlasApi* blas = nullptr;
  SR_RETURN_IF_ERROR(LoadBlas(&blas));
  if (blas->set_threads == nullptr) {
    return Status::Unsupported("the BLAS library in use has no thread control");
  }
  blas->set_threads(n);
  return Status::Ok();
}

int BlasThreads() {
  const BlasApi* blas = nullptr;
  if (!LoadBlas(&blas).ok() || blas->get_threads == nullptr) return 1;
  return blas->get_threads();
}

}  // namespace shardrec::dense
