// A grow-only block of pinned (page-locked) host memory from the CUDA plugin, for staging copies
// between host code and device buffers: the copy engines read and write pinned memory directly,
// and a copy out of pageable memory would first go through a driver bounce buffer. Reused from
// call to call, so a steady loop allocates once.
//
// Not thread-safe: one owner uses it at a time (a communicator's call, a handle under its
// exclusive-use guard). The owner must make sure no stream still copies into or out of the
// block before it grows or frees it.
#pragma once

#include <cstddef>

#include "impl/core/status.h"

namespace shardrec::core {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // At least `bytes` bytes at data() (contents not kept when it grows). Errors: those of
  // GetCudaRuntime (no plugin or GPU), and the plugin's allocation failure; the old block is
  // gone then (data() is null).
  Status Reserve(size_t bytes);

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void Release();

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace shardrec::core
