// RoundingRowBits per instruction-set level: one loop, compiled for AVX-512, AVX2 and baseline
// x86-64 through function target attributes (the library itself stays built for baseline), and
// chosen once from the host's CPUID. The compiler vectorizes the loop's 32-bit multiplies at the
// first two levels; at baseline it has no 32-bit vector multiply worth using.
#include "impl/optim/rounding_row.h"

#include "impl/core/cpu_features.h"
#include "impl/optim/rounding.h"

namespace shardrec::optim {
namespace {

using RowBitsFn = void (*)(uint64_t, int64_t, int32_t, uint32_t*);

#define SHARDREC_ROUNDING_ROW_LOOP \
  for (int32_t i = 0; i < n; ++i) bits[i] = RoundingColumnBits(row_key, first_col + i)

void RowBitsBaseline(uint64_t row_key, int64_t first_col, int32_t n, uint32_t* bits) {
  SHARDREC_ROUNDING_ROW_LOOP;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void RowBitsAvx2(uint64_t row_key, int64_t first_col, int32_t n,
                                                 uint32_t* bits) {
  SHARDREC_ROUNDING_ROW_LOOP;
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void RowBitsAvx512(uint64_t row_key,
                                                                        int64_t first_col,
                                                                        int32_t n, uint32_t* bits) {
  SHARDREC_ROUNDING_ROW_LOOP;
}
#endif

#undef SHARDREC_ROUNDING_ROW_LOOP

RowBitsFn HostRowBits() {
#if defined(__x86_64__)
  const CpuFeatures& f = HostCpu();
  if (f.avx512f && f.avx512bw && f.avx512vl) return &RowBitsAvx512;
  if (f.avx2) return &RowBitsAvx2;
#endif
  return &RowBitsBaseline;
}

}  // namespace

void RoundingRowBits(uint64_t row_key, int64_t first_col, int32_t n, uint32_t* bits) {
  static const RowBitsFn fn = HostRowBits();
  fn(row_key, first_col, n, bits);
}

}  // namespace shardrec::optim
