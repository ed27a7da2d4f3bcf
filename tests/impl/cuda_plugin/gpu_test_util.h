// Helpers for the GPU tests: skip without a device, and device buffers filled from and read
// back into host vectors through the plugin's CudaRuntime.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "impl/core/cuda_plugin.h"

namespace shardrec::testing {

#ifdef SHARDREC_TEST_PLUGIN_PATH
// Run by hand (outside ctest), the binary still finds the plugin it was built with; an
// explicit SHARDREC_CUDA_PLUGIN wins.
inline const int kDefaultPluginPath = [] {
  setenv("SHARDREC_CUDA_PLUGIN", SHARDREC_TEST_PLUGIN_PATH, 0);
  return 0;
}();
#endif

// The runtime, or nullptr when this machine has no usable CUDA device.
inline const core::CudaRuntime* GpuRuntime() {
  const core::CudaRuntime* rt = nullptr;
  if (!core::GetCudaRuntime(&rt).ok() || rt->DeviceCount() <= 0) return nullptr;
  return rt;
}

// Why there is no GPU, for the skip message.
inline std::string NoGpuReason() {
  const core::CudaRuntime* rt = nullptr;
  return core::GetCudaRuntime(&rt).ToString();
}

#define SR_SKIP_WITHOUT_GPU()                                                   \
  do {                                                                          \
    if (::shardrec::testing::GpuRuntime() == nullptr) {                         \
      GTEST_SKIP() << "no CUDA device: " << ::shardrec::testing::NoGpuReason(); \
    }                                                                           \
  } while (0)

inline constexpr int64_t kStreamWaitMs = 60000;

template <typename T>
class DeviceVector {
 public:
  DeviceVector(int device, size_t n) : device_(device), n_(n) {
    ThrowIfError(GpuRuntime()->Malloc(device, n * sizeof(T) + 1, &ptr_));
  }
  DeviceVector(int device, const std::vector<T>& host) : DeviceVector(device, host.size()) {
    Upload(host);
  }
  ~DeviceVector() { (void)GpuRuntime()->Free(device_, ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  T* data() { return static_cast<T*>(ptr_); }
  size_t size() const { return n_; }

  void Upload(const std::vector<T>& host) {
    ThrowIfError(GpuRuntime()->MemcpyAsync(device_, ptr_, host.data(), host.size() * sizeof(T),
                                           core::CopyKind::kHostToDevice, nullptr));
    ThrowIfError(GpuRuntime()->StreamWait(device_, nullptr, kStreamWaitMs));
  }
  // Waits for the default stream (where the tests run their collectives), then copies back.
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    ThrowIfError(GpuRuntime()->MemcpyAsync(device_, host.data(), ptr_, n_ * sizeof(T),
                                           core::CopyKind::kDeviceToHost, nullptr));
    ThrowIfError(GpuRuntime()->StreamWait(device_, nullptr, kStreamWaitMs));
    return host;
  }

 private:
  int device_;
  size_t n_;
  void* ptr_ = nullptr;
};

}  // namespace shardrec::testing
