// A grow-only block of pinned (page-locked) host memory from the CUDA plugin, for staging copies
// between host code and device buffers: the copy engines read and write pinned memory directly,
// and a copy out of pageable memory would first go through a driver bounce buffer. Reused from
// call to call, so a steady loop allocates once.
//
// Not thread-safe: one owner uses it at a time (a communicator's call, a handle under its
// exclusive-use guard). The owner must make sure no stream still copies into or out of the
// block before it grows, releases or frees it.
#pragma once

#include <cstddef>

#include "impl/core/status.h"

namespace shardrec::core {

class CudaRuntime;

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // At least `bytes` bytes at data() (contents not kept when it grows). Errors: those of
  // GetCudaRuntime (no plugin or GPU), the plugin's allocation failure, and kOutOfMemory when the
  // plugin reports success without a block. On any error the old block is gone (released before
  // the new one is asked for, so the two never coexist): data() is null and bytes() 0.
  Status Reserve(size_t bytes);
  // The same with `cuda` instead of the process's runtime (one a test controls); `cuda` must
  // outlive the block.
  Status Reserve(size_t bytes, const CudaRuntime& cuda);
  // The device made current while a block is allocated (a GPU collection's: the block joins that
  // device's context, and a thread with no current device creates no context on device 0); -1
  // (the default) leaves the calling thread's current device. Takes effect at the next growth.
  void SetDevice(int device) { device_ = device; }
  // Frees the block through the runtime that gave it; afterwards data() is null and bytes() 0.
  // A failing free leaks the block rather than failing the caller (nothing to report it to).
  void Release();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  const CudaRuntime* cuda_ = nullptr;  // the runtime that gave data_
  int device_ = -1;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace shardrec::core
