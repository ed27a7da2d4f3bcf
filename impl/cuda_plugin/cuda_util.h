// Host-side CUDA helpers for the plugin: error mapping, a current-device guard, the export macro.
#pragma once

#include <cuda_runtime_api.h>

#include "impl/core/check.h"
#include "impl/core/status.h"

// Marks an extern "C" entry point that the loader finds with dlsym; everything else in the
// plugin stays hidden (and the version script keeps only shardrec_cuda_*).
#define SHARDREC_CUDA_EXPORT extern "C" __attribute__((visibility("default")))

namespace shardrec::cuda_plugin {

// Maps a CUDA runtime error to a Status that names the failed call. A missing driver or device
// is kNoDevice, an allocation failure kOutOfMemory, anything else kCuda.
inline Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  // Reset the per-thread "last error" so an unrelated later call does not report it again
  // (sticky errors survive this, as they should).
  (void)cudaGetLastError();
  const std::string text =
      StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
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

// Makes `device` current for the scope and restores the caller's device afterwards, so the
// library never changes a host thread's CUDA device behind its back.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }

  Status Set(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ == device) return Status::Ok();
    Status s = CudaStatus(cudaSetDevice(device), StrCat("cudaSetDevice(", device, ")"));
    changed_ = s.ok() && previous_ >= 0;
    return s;
  }

 private:
  int previous_ = -1;
  bool changed_ = false;
};

}  // namespace shardrec::cuda_plugin
