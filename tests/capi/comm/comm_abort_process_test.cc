// Abort and destroy across processes, through the C API: ranks are forked processes meeting
// through a real unique id over loopback TCP. An abort from another thread unblocks rank 0's
// blocked call within a second and its destroy does not wait for the peer; without an abort,
// rank 0's destroy waits only the store grace for a rank that never leaves, not the timeout. Ranks
// forked after the id was made (in a process whose store threads run) meet and leave cleanly. Each
// fork but the last case's happens before this process starts a thread (gtest runs the cases one at
// a time and every thread of a case is joined before the next begins).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "shardrec/comm.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count();
}

// What the forked rank 1 observed.
struct Outcome {
  int32_t create = 99;
  int32_t call = 99;
  int64_t call_ms = -1;
};

struct Child {
  pid_t pid = -1;
  int id_fd = -1;
  int result_fd = -1;
};

using Body = Outcome (*)(const shardrec_unique_id_t& id);

Child ForkRank1(Body body) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    shardrec_unique_id_t id;
    size_t got = 0;
    while (got < sizeof(id)) {
      const ssize_t n = read(to_child[0], reinterpret_cast<char*>(&id) + got, sizeof(id) - got);
      if (n <= 0) _exit(90);
      got += static_cast<size_t>(n);
    }
    const Outcome o = body(id);
    if (write(from_child[1], &o, sizeof(o)) != static_cast<ssize_t>(sizeof(o))) _exit(91);
    // Stays connected (holding its store connection) until the parent kills it.
    for (;;) pause();
  }
  close(to_child[0]);
  close(from_child[1]);
  return {pid, to_child[1], from_child[0]};
}

void SendId(Child* c, const shardrec_unique_id_t& id) {
  ASSERT_EQ(write(c->id_fd, &id, sizeof(id)), static_cast<ssize_t>(sizeof(id)));
  close(c->id_fd);
}

// Reads rank 1's outcome; the child stays alive (and connected) until Reap.
Outcome Collect(Child* c) {
  Outcome o;
  size_t got = 0;
  while (got < sizeof(o)) {
    const ssize_t n = read(c->result_fd, reinterpret_cast<char*>(&o) + got, sizeof(o) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(c->result_fd);
  return o;
}

void Reap(Child* c) {
  kill(c->pid, SIGKILL);
  waitpid(c->pid, nullptr, 0);
}

shardrec_comm_options_t Options(int64_t grace_ms) {
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 30000;
  o.store_grace_ms = grace_ms;
  return o;
}

// Rank 1 meets rank 0, waits until rank 0 has been aborted, then calls a barrier: its
// connection to rank 0 is gone, so the barrier fails at once instead of at the timeout.
Outcome BarrierAfterTheAbort(const shardrec_unique_id_t& id) {
  Outcome o;
  shardrec_comm_t* comm = nullptr;
  const shardrec_comm_options_t opts = Options(0);
  o.create = shardrec_comm_create(&comm, &id, 2, 1, &opts);
  if (o.create != SHARDREC_OK) return o;
  std::this_thread::sleep_for(milliseconds(1500));
  const auto start = Clock::now();
  o.call = shardrec_comm_barrier(comm);
  o.call_ms = MsSince(start);
  return o;  // the handle stays open: rank 0's destroy must not wait for it
}

TEST(CapiCommAbortProcess, AbortUnblocksRankZeroAndItsDestroyDoesNotWait) {
  Child child = ForkRank1(&BarrierAfterTheAbort);
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK) << shardrec_last_error();
  SendId(&child, id);
  shardrec_comm_t* comm = nullptr;
  const shardrec_comm_options_t opts = Options(20000);  // a long grace the abort must skip
  ASSERT_EQ(shardrec_comm_create(&comm, &id, 2, 0, &opts), SHARDREC_OK) << shardrec_last_error();
  shardrec_comm_t* sub = nullptr;
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_EQ(shardrec_comm_abort(comm), SHARDREC_OK);
  });
  // Rank 1 is asleep: this barrier blocks until the abort.
  const auto start = Clock::now();
  const shardrec_status_t rc = shardrec_comm_barrier(comm);
  const int64_t blocked_ms = MsSince(start);
  aborter.join();
  EXPECT_EQ(rc, SHARDREC_EABORTED) << shardrec_last_error();
  EXPECT_EQ(shardrec_comm_split(&sub, comm, 0, 0), SHARDREC_EABORTED);
  const auto destroy_start = Clock::now();
  shardrec_comm_destroy(comm);
  const int64_t destroy_ms = MsSince(destroy_start);
  const Outcome peer = Collect(&child);
  Reap(&child);
  std::printf(
      "[abort] process rank 0: barrier returned %lld ms after its start (abort at 300 ms), "
      "destroy %lld ms; rank 1's next barrier %s after %lld ms (timeout 30 s)\n",
      static_cast<long long>(blocked_ms), static_cast<long long>(destroy_ms),
      shardrec_status_string(peer.call), static_cast<long long>(peer.call_ms));
  EXPECT_LE(blocked_ms, 300 + 1000);
  EXPECT_LE(destroy_ms, 1000);
  EXPECT_EQ(peer.create, SHARDREC_OK);
  EXPECT_EQ(peer.call, SHARDREC_EREMOTE);
  EXPECT_LE(peer.call_ms, 1000);
}

// Rank 1 meets rank 0 and then never destroys its communicator (a task that failed without
// closing its handles).
Outcome MeetAndStay(const shardrec_unique_id_t& id) {
  Outcome o;
  shardrec_comm_t* comm = nullptr;
  const shardrec_comm_options_t opts = Options(0);
  o.create = shardrec_comm_create(&comm, &id, 2, 1, &opts);
  if (o.create == SHARDREC_OK) o.call = shardrec_comm_barrier(comm);
  return o;
}

TEST(CapiCommAbortProcess, DestroyWaitsTheGraceNotTheTimeoutForARankThatNeverLeaves) {
  Child child = ForkRank1(&MeetAndStay);
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK) << shardrec_last_error();
  SendId(&child, id);
  shardrec_comm_t* comm = nullptr;
  const shardrec_comm_options_t opts = Options(500);
  ASSERT_EQ(shardrec_comm_create(&comm, &id, 2, 0, &opts), SHARDREC_OK) << shardrec_last_error();
  EXPECT_EQ(shardrec_comm_barrier(comm), SHARDREC_OK) << shardrec_last_error();
  const Outcome peer = Collect(&child);  // rank 1 stays alive and connected
  EXPECT_EQ(peer.call, SHARDREC_OK);
  const auto start = Clock::now();
  shardrec_comm_destroy(comm);
  const int64_t destroy_ms = MsSince(start);
  Reap(&child);
  std::printf(
      "[abort] rank 0's destroy with a rank that never left: %lld ms (grace 500 ms, "
      "timeout 30 s)\n",
      static_cast<long long>(destroy_ms));
  EXPECT_GE(destroy_ms, 400);
  EXPECT_LE(destroy_ms, 500 + 1000);
}

// A parent makes the id and forks both ranks (a common launcher shape). Rank 0's child inherits
// the parent's record of the store but not its threads: it used to take ownership of them and
// end the child (SIGABRT from joining a thread that does not exist there) at its destroy. It is
// now one more client of the parent's store; both ranks meet, destroy and exit cleanly.
TEST(CapiCommAbortProcess, RanksForkedAfterTheIdWasMadeMeetAndLeaveCleanly) {
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK) << shardrec_last_error();
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    ASSERT_GE(pids[rank], 0);
    if (pids[rank] == 0) {
      shardrec_comm_t* comm = nullptr;
      const shardrec_comm_options_t opts = Options(500);
      if (shardrec_comm_create(&comm, &id, 2, rank, &opts) != SHARDREC_OK) _exit(10);
      if (shardrec_comm_barrier(comm) != SHARDREC_OK) _exit(11);
      shardrec_comm_destroy(comm);
      _exit(0);
    }
  }
  for (int rank = 0; rank < 2; ++rank) {
    int status = 0;
    ASSERT_EQ(waitpid(pids[rank], &status, 0), pids[rank]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << ": " << (WIFSIGNALED(status) ? "signal " : "exit ")
        << (WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
}

}  // namespace
