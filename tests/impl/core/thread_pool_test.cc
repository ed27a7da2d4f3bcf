// ThreadPool: every index of a job runs exactly once, back-to-back jobs with different chunk
// sizes do not bleed into each other (a worker waking late must not claim chunks of the next job),
// exceptions reach the caller and the pool stays usable after one.
#include "impl/core/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace shardrec {
namespace {

// Runs one job over [begin, end) and checks each index was visited once and nothing outside it.
void ExpectEachIndexOnce(ThreadPool& pool, int64_t begin, int64_t end, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(end + 8));
  for (auto& h : hits) h.store(0);
  pool.ParallelFor(begin, end, grain, [&](int64_t b, int64_t e) {
    ASSERT_LE(begin, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, end);
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < static_cast<int64_t>(hits.size()); ++i) {
    int want = (i >= begin && i < end) ? 1 : 0;
    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), want)
        << "index " << i << " of job [" << begin << ", " << end << ") grain " << grain;
  }
}

TEST(CoreThreadPool, EachIndexRunsOnceForManySizes) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000})
      for (int64_t grain : {1, 3, 16, 5000}) ExpectEachIndexOnce(pool, 5, 5 + n, grain);
  }
}

// Thousands of short jobs in a row whose chunk sizes alternate: the shape in which a worker woken
// for one job but scheduled only after it closed could run the next job with a stale chunk size.
TEST(CoreThreadPool, BackToBackJobsWithChangingChunksDoNotOverlap) {
  ThreadPool pool(4);
  for (int round = 0; round < 3000; ++round) {
    int64_t n = 8 + round % 61;
    int64_t grain = 1 + round % 5;
    ExpectEachIndexOnce(pool, round % 3, round % 3 + n, grain);
  }
}

TEST(CoreThreadPool, ExceptionReachesTheCallerAndThePoolStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.ParallelFor(0, 100, 1,
                                [](int64_t b, int64_t) {
                                  if (b >= 50) throw std::runtime_error("chunk failed");
                                }),
               std::runtime_error);
  ExpectEachIndexOnce(pool, 0, 100, 1);
}

TEST(CoreThreadPool, CallersOnSeveralThreadsAreSerialised) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int j = 0; j < 200; ++j)
        pool.ParallelFor(0, 50, 2, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), int64_t{4} * 200 * 50);
}

// UsableCpus counts the CPUs the calling thread may run on, so a process restricted by taskset or
// a container's cpuset is not taken for the whole machine.
TEST(CoreThreadPool, UsableCpusFollowsTheAffinityMask) {
  const int all = UsableCpus();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  int pinned = -1;
  std::thread t([&] {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return;
    int first = 0;
    while (!CPU_ISSET(first, &mask)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) return;
    pinned = UsableCpus();
  });
  t.join();
  EXPECT_EQ(pinned, 1);
  EXPECT_EQ(UsableCpus(), all);  // the other thread's mask was its own
}

}  // namespace
}  // namespace shardrec
