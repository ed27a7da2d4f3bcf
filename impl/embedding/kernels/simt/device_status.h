// How a kernel reports a failure without trapping: the first error code and the smallest
// position it was seen at go to a small status block in the kernel's memory, which the host reads
// at the step's one synchronisation point and turns into a Status. Host/device.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"

namespace shardrec::embedding::kernels::simt_body {

inline constexpr int32_t kStatusOk = 0;
inline constexpr int32_t kStatusRowOutOfRange = 1;  // a looked-up or updated row outside the shard
inline constexpr int32_t kStatusIdOutOfRange = 2;   // an input id outside its table (policy ERROR)

// All-zero bytes are the clear state (a block can be cleared with a memset): the smallest
// position is kept as its bitwise complement, the largest complement winning.
struct DeviceStatus {
  int32_t code = kStatusOk;
  int32_t pad = 0;
  unsigned long long inv_first = 0;  // ~(smallest position reported)
};

// The smallest position reported (meaningful when code != kStatusOk).
SHARDREC_HD uint64_t FirstPosition(const DeviceStatus& st) { return ~st.inv_first; }

SHARDREC_HD void ReportError(DeviceStatus* st, int32_t code, int64_t where) {
  const unsigned long long inv = ~static_cast<unsigned long long>(where);
#if defined(__CUDA_ARCH__)
  atomicCAS(&st->code, kStatusOk, code);
  atomicMax(&st->inv_first, inv);
#else
  // Host launches run their items on one thread.
  if (st->code == kStatusOk) st->code = code;
  if (inv > st->inv_first) st->inv_first = inv;
#endif
}

}  // namespace shardrec::embedding::kernels::simt_body
