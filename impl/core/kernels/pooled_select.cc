// The choice of the pooled kernel's level for this host (pooled.h HostPooled).
#include <cstdlib>
#include <cstring>

#include "impl/core/cpu_features.h"
#include "impl/core/kernels/pooled.h"

namespace shardrec::core::kernels {

PooledFn HostPooled() {
  static const PooledFn fn = []() -> PooledFn {
#if SHARDREC_HAVE_X86_KERNEL_LEVELS
    const CpuFeatures& f = HostCpu();
    const char* cap = std::getenv("SHARDREC_CPU_LEVEL");
    const bool baseline = cap != nullptr && std::strcmp(cap, "baseline") == 0;
    const bool avx2 = cap != nullptr && std::strcmp(cap, "avx2") == 0;
    if (!baseline && !avx2 && f.avx512f && f.avx512bw && f.avx512vl) return &PooledAvx512;
    if (!baseline && f.avx2 && f.f16c) return &PooledAvx2;
#endif
    return &PooledBaseline;
  }();
  return fn;
}

}  // namespace shardrec::core::kernels
