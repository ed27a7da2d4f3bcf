// CPUID probe of the host CPU's vector extensions, including the OS support (XCR0) that AVX and
// AVX-512 registers need before any instruction may use them.
#include "impl/core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cstdint>

namespace shardrec {

namespace {

CpuFeatures Probe() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  const bool osxsave = (c >> 27) & 1;
  uint64_t xcr0 = 0;
  if (osxsave) {
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  const bool ymm_enabled = (xcr0 & 0x6) == 0x6;    // XMM and YMM state
  const bool zmm_enabled = (xcr0 & 0xe6) == 0xe6;  // plus opmask and ZMM state
  f.avx = ((c >> 28) & 1) && ymm_enabled;
  f.f16c = f.avx && ((c >> 29) & 1);
  f.fma = f.avx && ((c >> 12) & 1);
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) != 0) {
    f.avx2 = f.avx && ((b >> 5) & 1);
    f.avx512f = zmm_enabled && ((b >> 16) & 1);
    f.avx512bw = f.avx512f && ((b >> 30) & 1);
    f.avx512vl = f.avx512f && ((b >> 31) & 1);
  }
#endif
  return f;
}

}  // namespace

const CpuFeatures& HostCpu() {
  static const CpuFeatures features = Probe();
  return features;
}

}  // namespace shardrec
