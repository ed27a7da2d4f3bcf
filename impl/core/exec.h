// Execution context: where a kernel runs. Either the host (the calling thread, optionally helped
// by a thread pool) or a CUDA device and a stream. Every kernel takes one, so a CPU kernel and its
// CUDA twin share one signature and the caller picks the backend by the context it passes.
//
// The context does not own the pool or the stream: whoever built it keeps them alive while the
// context is in use (a collection owns its pool; the host program owns its streams).
#pragma once

#include <cstdint>
#include <functional>

#include "impl/core/device.h"
#include "impl/core/thread_pool.h"

namespace shardrec {

class ExecContext {
 public:
  // The calling thread alone.
  ExecContext() = default;
  // The calling thread plus `pool` (may be null: the calling thread alone).
  static ExecContext Host(ThreadPool* pool) {
    ExecContext c;
    c.pool_ = pool;
    return c;
  }
  // CUDA device `device`, work ordered on `stream` (nullptr is the default stream). A CUDA
  // context is only meaningful to code inside the CUDA plugin; host kernels reject it.
  static ExecContext Cuda(int32_t device, Stream stream) {
    ExecContext c;
    c.device_ = Device::Cuda(device);
    c.stream_ = stream;
    return c;
  }

  bool is_host() const { return device_.is_host(); }
  bool is_cuda() const { return device_.is_cuda(); }
  const Device& device() const { return device_; }
  ThreadPool* pool() const { return pool_; }
  Stream stream() const { return stream_; }
  // Host threads that take part in ParallelFor (1 without a pool).
  int num_threads() const { return pool_ != nullptr ? pool_->num_threads() : 1; }

  // Host only: fn(chunk_begin, chunk_end) over [begin, end) in chunks of at least `grain`, on the
  // pool when there is one, else inline. Returns when every chunk is done; the first exception
  // is rethrown here. Chunks are contiguous, so a kernel whose chunks are independent gives the
  // same result for every thread count.
  void ParallelFor(int64_t begin, int64_t end, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& fn) const {
    if (end <= begin) return;
    if (pool_ == nullptr) {
      fn(begin, end);
    } else {
      pool_->ParallelFor(begin, end, grain, fn);
    }
  }

 private:
  Device device_;
  ThreadPool* pool_ = nullptr;
  Stream stream_ = nullptr;
};

}  // namespace shardrec
