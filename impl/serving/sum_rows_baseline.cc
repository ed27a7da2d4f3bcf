// The row summation for every x86-64 (SSE2), and the choice of the widest build the host runs.
#include <cstdlib>
#include <cstring>

#include "impl/core/cpu_features.h"
#include "impl/serving/sum_rows.h"
#include "impl/serving/sum_rows_body.h"

namespace shardrec::serving {

void SumRowsBaseline(const float* const* x, const float* w, size_t n, int32_t dim, bool first,
                     float* out) {
  SumRowsBody(x, w, n, dim, first, out);
}

SumRowsFn HostSumRows() {
#if SHARDREC_SERVING_X86_LEVELS
  // SHARDREC_CPU_LEVEL=baseline caps it, as it caps the training kernels (tests, benchmarks).
  const char* cap = std::getenv("SHARDREC_CPU_LEVEL");
  if (HostCpu().avx2 && (cap == nullptr || std::strcmp(cap, "baseline") != 0)) return &SumRowsAvx2;
#endif
  return &SumRowsBaseline;
}

}  // namespace shardrec::serving
