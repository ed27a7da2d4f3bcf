// MPI communicators used from several threads of each process at once: what comm.h promises for
// different communicators (splits included) must hold on MPI too, whose only blocking call is
// MPI_Comm_split.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "shardrec/comm.h"
#include "tests/capi/mpi/mpi_test_world.h"

namespace shardrec::testing {
namespace {

// Runs `body` on two threads (argument 0 and 1) and waits for both; a thread that has not
// returned after `limit` is a hang, which gtest cannot recover from: the rank reports it and
// exits, and mpirun ends the job.
template <typename Body>
void OnTwoThreadsOrDie(const char* what, std::chrono::seconds limit, Body body) {
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  auto run = [&](int id) {
    body(id);
    std::lock_guard<std::mutex> lock(mu);
    ++finished;
    cv.notify_all();
  };
  std::thread a(run, 0), b(run, 1);
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, limit, [&] { return finished == 2; })) {
    std::fprintf(stderr, "rank %d: %s did not finish within %lld s (a hang)\n", MpiRank(), what,
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  lock.unlock();
  a.join();
  b.join();
}

TEST_F(MpiTest, ThreadsSplittingTheirOwnCommunicatorsNeverWaitForEachOther) {
  // Two communicators, one thread each, each splitting its own in a loop, as two collections,
  // meshes or DDP bucketers created at the same time do. MPI_Comm_split waits until every member
  // has called it; while it held the plugin's process-wide lock, each process could sit in the
  // split of the communicator its peer had not reached yet, the peer's thread for that one
  // waiting for the lock: a hang in most runs of this test. Keys in reverse rank order take
  // MPI_Comm_split; in rank order (a private copy) the split is a duplicate (MPI_Comm_idup).
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 20000;
  shardrec_comm_t* comms[2] = {nullptr, nullptr};
  for (shardrec_comm_t*& c : comms)
    ASSERT_EQ(shardrec_comm_create_mpi(&c, 0, &o), SHARDREC_OK) << shardrec_last_error();
  constexpr int kSplits = 500;
  std::atomic<int> failed{0};
  OnTwoThreadsOrDie(
      // A hang never ends, so the limit only needs to exceed a slow run's time: 500 splits take
      // 3-4 s under ASan on 2 cores, but more than 15 s once 4 MPI processes share the cores
      // with other tests' (a fresh-clone CI beside other work, 2026-11-27).
      "two threads splitting two communicators", std::chrono::seconds(60), [&](int id) {
        for (int i = 0; i < kSplits && failed == 0; ++i) {
          const bool reverse = i % 2 == 0;
          shardrec_comm_t* s = nullptr;
          int32_t r = -1;
          if (shardrec_comm_split(&s, comms[id], 0, reverse ? -MpiRank() : MpiRank()) !=
                  SHARDREC_OK ||
              shardrec_comm_rank(&r, s) != SHARDREC_OK) {
            std::fprintf(stderr, "split %d on thread %d: %s\n", i, id, shardrec_last_error());
            ++failed;
          } else if (r != (reverse ? MpiSize() - 1 - MpiRank() : MpiRank())) {
            std::fprintf(stderr, "split %d on thread %d: rank %d\n", i, id, r);
            ++failed;
          }
          shardrec_comm_destroy(s);
        }
      });
  EXPECT_EQ(failed.load(), 0);
  for (shardrec_comm_t* c : comms) shardrec_comm_destroy(c);
}

}  // namespace
}  // namespace shardrec::testing
