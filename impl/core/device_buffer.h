// A grow-only block of device memory from the CUDA plugin (CudaRuntime), owned by a GPU
// collection for its parameter arenas and per-step staging, and by the staged communicator. Reused
// from step to step, so a steady training loop allocates once. Not thread-safe: one collection step
// uses it at a time. Growing waits for the stream the owner queues its work on before the old block
// is freed; the owner destroys it only when no work is queued (every collection call ends with a
// wait).
#pragma once

#include <cstddef>

#include "impl/core/device.h"
#include "impl/core/status.h"

namespace shardrec::core {

// How long a GPU collection waits for its device work at a sync point before it reports
// kTimeout instead of hanging (a wedged device, a kernel that never finishes).
constexpr int64_t kDeviceWaitMs = 300000;

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least `bytes` bytes on CUDA device `device` (contents not kept when it grows; before the
  // old block is freed, `stream`, where work using it may be queued, is waited for). Errors:
  // those of GetCudaRuntime, kOutOfMemory naming the size when the device has not got it
  // (the old block is gone then: data() is null).
  Status Reserve(int device, size_t bytes, const char* what, Stream stream = nullptr);

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void Release();

  int device_ = 0;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace shardrec::core
