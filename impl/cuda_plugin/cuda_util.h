// Host-side CUDA helpers for the plugin: error mapping and a current-device guard, both over a
// DeviceApi so tests can drive them with a double.
#pragma once

#include <string>

#include "impl/core/check.h"
#include "impl/core/status.h"
#include "impl/cuda_plugin/device_api.h"

namespace shardrec::cuda_plugin {

// Maps a CUDA runtime error to a Status that names the failed call. A missing driver or device
// is kNoDevice, an allocation failure kOutOfMemory, anything else kCuda.
inline Status CudaStatus(const DeviceApi& api, cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  // Reset the per-thread "last error" so an unrelated later call does not report it again
  // (sticky errors survive this, as they should).
  (void)api.GetLastError();
  const std::string text =
      StrCat(what, ": ", api.GetErrorName(err), " (", api.GetErrorString(err), ")");
  switch (err) {
    case cudaErrorMemoryAllocation:
      return Status::OutOfMemory(text);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return Status::NoDevice(text);
    default:
      return Status::Cuda(text);
  }
}

// Makes `device` current for the scope and gives the thread back its own device afterwards, so
// the library never changes a host thread's CUDA device behind its back. A thread that had no
// CUDA context keeps `device` current: restoring its nominal device 0 would create a context
// on GPU 0 in every rank process.
class DeviceGuard {
 public:
  explicit DeviceGuard(const DeviceApi& api) : api_(api) {}
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (restore_) (void)api_.SetDevice(previous_);
  }

  Status Set(int device) {
    const bool had_context = api_.ThreadHasContext();
    int previous = -1;
    if (api_.GetDevice(&previous) != cudaSuccess) {
      (void)api_.GetLastError();
      previous = -1;
    }
    if (had_context && previous == device) return Status::Ok();
    Status s = CudaStatus(api_, api_.SetDevice(device), StrCat("cudaSetDevice(", device, ")"));
    restore_ = s.ok() && had_context && previous >= 0 && previous != device;
    previous_ = previous;
    return s;
  }

 private:
  const DeviceApi& api_;
  int previous_ = -1;
  bool restore_ = false;
};

}  // namespace shardrec::cuda_plugin
