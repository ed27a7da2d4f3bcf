// Host <-> device copies of a GPU collection's parameter memory for the code that reads or writes
// it wholesale outside a step (checkpoints, table import, 2D replica sync), and the host staging
// those copies go through. Every copy runs on the device's default stream, where a GPU collection
// (v1) queues all its work, so it is ordered after the collection's kernels, and is waited for
// with the bound of core::kDeviceWaitMs (kTimeout instead of a hang on a wedged device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/core/device.h"
#include "impl/core/pinned_buffer.h"
#include "impl/core/status.h"

namespace shardrec::embedding {

// `bytes` bytes from device memory `src` on CUDA `device` into host memory `dst`, waited for.
// Errors: those of core::GetCudaRuntime, the copy's, kTimeout.
Status CopyToHost(const Device& device, void* dst, const void* src, size_t bytes);
// `bytes` bytes from host memory `src` into device memory `dst` on CUDA `device`, waited for.
Status CopyToDevice(const Device& device, void* dst, const void* src, size_t bytes);
// Sets `bytes` bytes of device memory `dst` to `value`, waited for.
Status FillDevice(const Device& device, void* dst, int value, size_t bytes);

// A grow-only host block for staging device data, reused from call to call so a steady loop
// (a sync every step) allocates once. Pinned through the CUDA plugin when it can be (the copies
// then run as direct DMA); pageable memory otherwise (no plugin, or pinning refused), which is
// only slower. Not thread-safe; contents are not kept when it grows.
class HostStaging {
 public:
  // At least `bytes` bytes at data(), for copies to and from `device`: a pinned block is
  // allocated with that device current (host_alloc_on), so it joins the device's context and a
  // thread with no current device creates no context on device 0; a host `device` leaves the
  // thread's current device. kOutOfMemory when neither pinned nor pageable memory of that size
  // can be had.
  Status Reserve(const Device& device, size_t bytes);
  uint8_t* data() { return pinned() ? static_cast<uint8_t*>(pinned_.data()) : pageable_.data(); }
  size_t bytes() const { return pinned() ? pinned_.bytes() : pageable_.size(); }
  bool pinned() const { return pinned_.data() != nullptr; }

 private:
  core::PinnedBuffer pinned_;  // empty whenever the pageable fallback is in use
  std::vector<uint8_t> pageable_;
};

}  // namespace shardrec::embedding
