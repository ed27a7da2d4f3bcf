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

struct DeviceStatus {
  int32_t code = kStatusOk;
  int32_t pad = 0;
  unsigned long long first = ~0ull;  // smallest position reported
};

SHARDREC_HD void ReportError(DeviceStatus* st, int32_t code, int64_t where) {
#if defined(__CUDA_ARCH__)
  atomicCAS(&st->code, kStatusOk, code);
  atomicMin(&st->first, static_cast<unsigned long long>(where));
#else
  // Host launches run their items on one thread.
  if (st->code == kStatusOk) st->code = code;
  if (static_cast<unsigned long long>(where) < st->first)
    st->first = static_cast<unsigned long long>(where);
#endif
}

}  // namespace shardrec::embedding::kernels::simt_body
