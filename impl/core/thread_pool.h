// A fixed-size thread pool for data-parallel host kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace shardrec {

// The CPUs this process may run on: the count of its affinity mask (taskset, a container's
// cpuset), else std::thread::hardware_concurrency(); at least 1. (A CPU quota without a cpuset
// is not seen.)
int UsableCpus();

class ThreadPool {
 public:
  // num_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const;

  // Splits [begin, end) into contiguous chunks of at least `grain` items and runs
  // fn(chunk_begin, chunk_end) on the pool (the caller's thread takes part); returns when all
  // chunks are done. Exceptions from fn are rethrown in the caller (the first one). Calls from
  // several threads at once are serialised.
  void ParallelFor(int64_t begin, int64_t end, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardrec
