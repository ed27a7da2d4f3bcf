// ThreadPool: workers wait for a ParallelFor job, claim chunks from a shared counter, and the
// caller joins in; one job runs at a time.
//
// A job is open from the moment its parameters are published (under `mu`) until the caller has
// seen `active == 0` and closed it (fn = nullptr, under the same lock hold). A worker joins only an
// open job and copies its parameters while holding `mu`, so the caller never rewrites the
// parameters of a job a worker is still running: a worker that wakes late, after the job it was
// woken for has closed, goes back to waiting instead of claiming chunks of the next job with the
// previous job's chunk size.
#include "impl/core/thread_pool.h"

#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace shardrec {

struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv_work;
  std::condition_variable cv_done;
  std::mutex job_mu;  // serialises ParallelFor callers
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t begin = 0, end = 0, chunk = 1;
  std::atomic<int64_t> next{0};
  uint64_t generation = 0;
  int active = 0;
  bool stop = false;
  std::exception_ptr error;

  // Claims and runs chunks of the job whose parameters are passed in (a copy taken under `mu`).
  void RunChunks(const std::function<void(int64_t, int64_t)>& job_fn, int64_t job_end,
                 int64_t job_chunk) {
    for (;;) {
      int64_t b = next.fetch_add(job_chunk);
      if (b >= job_end) break;
      try {
        job_fn(b, std::min(job_end, b + job_chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        next.store(job_end);
      }
    }
  }

  void WorkerLoop() {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int64_t, int64_t)>* job_fn = nullptr;
      int64_t job_end = 0, job_chunk = 1;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv_work.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
        if (fn == nullptr) continue;  // woke after that job closed
        job_fn = fn;
        job_end = end;
        job_chunk = chunk;
        ++active;
      }
      RunChunks(*job_fn, job_end, job_chunk);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (--active == 0) cv_done.notify_all();
      }
    }
  }
};

int UsableCpus() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int num_threads) : impl_(new Impl) {
  if (num_threads <= 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < num_threads; ++i)
    impl_->workers.emplace_back([this] { impl_->WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv_work.notify_all();
  for (auto& t : impl_->workers) t.join();
}

int ThreadPool::num_threads() const { return static_cast<int>(impl_->workers.size()) + 1; }

void ThreadPool::ParallelFor(int64_t begin, int64_t end, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  grain = std::max<int64_t>(1, grain);
  int64_t n = end - begin;
  if (impl_->workers.empty() || n <= grain) {
    fn(begin, end);
    return;
  }
  std::lock_guard<std::mutex> job(impl_->job_mu);
  int64_t parts = std::min<int64_t>(n / grain, int64_t{num_threads()} * 4);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->fn = &fn;
    impl_->begin = begin;
    impl_->end = end;
    impl_->chunk = std::max<int64_t>(grain, (n + parts - 1) / parts);
    impl_->next.store(begin);
    impl_->error = nullptr;
    ++impl_->generation;
  }
  impl_->cv_work.notify_all();
  impl_->RunChunks(fn, end, impl_->chunk);
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv_done.wait(lock, [&] { return impl_->active == 0 && impl_->next.load() >= impl_->end; });
  impl_->fn = nullptr;
  if (impl_->error) std::rethrow_exception(impl_->error);
}

}  // namespace shardrec
