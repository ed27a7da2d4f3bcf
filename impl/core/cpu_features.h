// What the host CPU can run, probed once with CPUID (x86-64) so kernels can pick an
// implementation at run time while the library itself stays built for baseline x86-64.
// Works the same under GCC and Clang (whose __builtin_cpu_supports name lists differ).
#pragma once

namespace shardrec {

struct CpuFeatures {
  bool avx = false;
  bool f16c = false;
  bool fma = false;
  bool avx2 = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
};

// Probed on first use (thread-safe); all false on other architectures.
const CpuFeatures& HostCpu();

}  // namespace shardrec
