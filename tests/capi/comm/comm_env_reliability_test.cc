// Reliability figures under env rendezvous (torchrun's variables, set by hand): rank 0's time to
// error when rank 1 (a forked process) is killed or stopped mid-collective, never joins, or when
// rank 0's own communicator is aborted from another thread, against the configured timeout.
// Every fork precedes this process's threads (each case joins its threads before the next).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "shardrec/comm.h"
#include "shardrec/common.h"
#include "tests/support/free_port.h"

#if defined(__SANITIZE_ADDRESS__)
#define SHARDREC_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHARDREC_TEST_UNDER_ASAN 1
#endif
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kTimeoutMs = 5000;

int64_t MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

using shardrec::testing::FreePort;

void SetRankEnv(int port, int rank) {
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
}

shardrec_comm_options_t Options() {
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = kTimeoutMs;
  o.store_grace_ms = 200;
  return o;
}

// Rank 1: joins (or not) and then waits to be signalled, never entering a collective.
pid_t ForkRank1(int port, bool join) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (join) {
      SetRankEnv(port, 1);
      const shardrec_comm_options_t o = Options();
      shardrec_comm_t* comm = nullptr;
      if (shardrec_comm_create_from_env(&comm, &o) != SHARDREC_OK) _exit(3);
    }
    for (;;) pause();
  }
  return pid;
}

void Reap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

struct Figure {
  shardrec_status_t status;
  int64_t ms;  // from the event (signal, abort, call start) to the call's return
};

// Rank 0 blocks in a barrier that rank 1 never enters; `event` runs 300 ms in, on another thread.
template <typename Event>
Figure BarrierWith(int port, Event event, bool measure_from_event) {
  SetRankEnv(port, 0);
  const shardrec_comm_options_t o = Options();
  shardrec_comm_t* comm = nullptr;
  EXPECT_EQ(shardrec_comm_create_from_env(&comm, &o), SHARDREC_OK) << shardrec_last_error();
  if (comm == nullptr) return {SHARDREC_ERROR, -1};
  Clock::time_point event_at{};
  const Clock::time_point start = Clock::now();
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    event_at = Clock::now();
    event(comm);
  });
  const shardrec_status_t st = shardrec_comm_barrier(comm);
  const Clock::time_point end = Clock::now();
  t.join();
  shardrec_comm_destroy(comm);
  return {st, MsBetween(measure_from_event ? event_at : start, end)};
}

TEST(CapiCommEnvReliability, KilledRankFailsTheSurvivorWellUnderTheTimeout) {
  const int port = FreePort();
  const pid_t child = ForkRank1(port, true);
  const Figure f = BarrierWith(
      port, [&](shardrec_comm_t*) { kill(child, SIGKILL); }, true);
  Reap(child);
  std::printf(
      "[reliability] env, rank killed (SIGKILL) mid-barrier: %s %lld ms after the kill "
      "(timeout %lld ms)\n",
      shardrec_status_string(f.status), static_cast<long long>(f.ms),
      static_cast<long long>(kTimeoutMs));
  EXPECT_NE(f.status, SHARDREC_OK);
  EXPECT_LT(f.ms, kTimeoutMs / 5);
}

TEST(CapiCommEnvReliability, StoppedRankFailsTheSurvivorAtTheTimeout) {
  const int port = FreePort();
  const pid_t child = ForkRank1(port, true);
  const Figure f = BarrierWith(
      port, [&](shardrec_comm_t*) { kill(child, SIGSTOP); }, false);
  Reap(child);
  std::printf(
      "[reliability] env, rank stopped (SIGSTOP) mid-barrier: %s %lld ms after the call "
      "began (timeout %lld ms)\n",
      shardrec_status_string(f.status), static_cast<long long>(f.ms),
      static_cast<long long>(kTimeoutMs));
  EXPECT_EQ(f.status, SHARDREC_ETIMEOUT);
  EXPECT_GE(f.ms, kTimeoutMs - 100);
  EXPECT_LT(f.ms, kTimeoutMs + 2000);
}

TEST(CapiCommEnvReliability, AbortFromAnotherThreadReturnsWithinASecond) {
  const int port = FreePort();
  const pid_t child = ForkRank1(port, true);
  const Figure f = BarrierWith(
      port, [](shardrec_comm_t* c) { EXPECT_EQ(shardrec_comm_abort(c), SHARDREC_OK); }, true);
  Reap(child);
  std::printf(
      "[reliability] env, abort from another thread: %s %lld ms after the abort "
      "(timeout %lld ms)\n",
      shardrec_status_string(f.status), static_cast<long long>(f.ms),
      static_cast<long long>(kTimeoutMs));
  EXPECT_EQ(f.status, SHARDREC_EABORTED);
  EXPECT_LE(f.ms, 1000);
}

TEST(CapiCommEnvReliability, RankThatNeverJoinsFailsCreationAtTheTimeout) {
  const int port = FreePort();
  const pid_t child = ForkRank1(port, false);
  SetRankEnv(port, 0);
  const shardrec_comm_options_t o = Options();
  shardrec_comm_t* comm = nullptr;
  const Clock::time_point start = Clock::now();
  const shardrec_status_t st = shardrec_comm_create_from_env(&comm, &o);
  const int64_t ms = MsBetween(start, Clock::now());
  Reap(child);
  std::printf("[reliability] env, rank never joins: create %s after %lld ms (timeout %lld ms)\n",
              shardrec_status_string(st), static_cast<long long>(ms),
              static_cast<long long>(kTimeoutMs));
  EXPECT_NE(st, SHARDREC_OK);
  EXPECT_EQ(comm, nullptr);
  EXPECT_GE(ms, kTimeoutMs - 100);
  EXPECT_LT(ms, kTimeoutMs + 2000);
}

// Rank 0 of a world of 400 whose other ranks never start: creation still fails at its timeout.
// Gloo closes a pair in one tick of its event loop (10 ms), and closing the 399 pairs one after
// the other (at the deadline, then again when the context was destroyed) returned 8 s late.
TEST(CapiCommEnvReliability, ManyMissingRanksFailCreationAtTheTimeout) {
  const int port = FreePort();
  SetRankEnv(port, 0);
  setenv("WORLD_SIZE", "400", 1);
  setenv("LOCAL_WORLD_SIZE", "400", 1);
  shardrec_comm_options_t o = Options();
  o.timeout_ms = 1000;
  shardrec_comm_t* comm = nullptr;
  const Clock::time_point start = Clock::now();
  const shardrec_status_t st = shardrec_comm_create_from_env(&comm, &o);
  const int64_t ms = MsBetween(start, Clock::now());
  std::printf(
      "[reliability] env, 399 ranks never join: create %s after %lld ms (timeout %lld ms)\n",
      shardrec_status_string(st), static_cast<long long>(ms), static_cast<long long>(o.timeout_ms));
  EXPECT_EQ(st, SHARDREC_ETIMEOUT) << shardrec_last_error();
  EXPECT_EQ(comm, nullptr);
  EXPECT_GE(ms, o.timeout_ms - 100);
  EXPECT_LT(ms, o.timeout_ms + 2000);
}

// A world too large for the process's open-file limit (a socket per peer): creation fails at once
// with EIO naming the limit. It used to report ETIMEOUT blaming a missing peer, ~10 ms per peer
// after the timeout (10 s for 1100 ranks under the usual limit of 1024).
TEST(CapiCommEnvReliability, AWorldPastTheOpenFileLimitFailsAtOnceNamingIt) {
#if defined(SHARDREC_TEST_UNDER_ASAN)
  // The case uses up every descriptor below the limit on purpose, and the sanitizers' runtime
  // needs some of its own meanwhile: under ASan+UBSan it then reported valid objects (a caught
  // exception, a new thread's state) as having an invalid vptr, and its symbolizer could not
  // start (EMFILE). The release build runs it.
  GTEST_SKIP() << "exhausts the descriptors the sanitizer runtime needs (run in release)";
#endif
  const int port = FreePort();
  SetRankEnv(port, 0);
  setenv("WORLD_SIZE", "600", 1);
  setenv("LOCAL_WORLD_SIZE", "600", 1);
  shardrec_comm_options_t o = Options();
  o.timeout_ms = 3000;
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 400;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  shardrec_comm_t* comm = nullptr;
  const Clock::time_point start = Clock::now();
  const shardrec_status_t st = shardrec_comm_create_from_env(&comm, &o);
  const int64_t ms = MsBetween(start, Clock::now());
  const std::string msg = shardrec_last_error();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  std::printf(
      "[reliability] env, world 600 at an open-file limit of 400: create %s after %lld ms\n",
      shardrec_status_string(st), static_cast<long long>(ms));
  EXPECT_EQ(st, SHARDREC_EIO) << msg;
  EXPECT_NE(msg.find("open-file limit is 400"), std::string::npos) << msg;
  EXPECT_EQ(comm, nullptr);
  EXPECT_LT(ms, o.timeout_ms);
}

}  // namespace
