// Re-creating the communicator from the environment on the same port, as launch.md's "Going on
// after an abort or a failure" says: two forked ranks (torchrun's variables, set by hand) create,
// run a barrier, fail or not, destroy and create again, with no pause between rounds. Rank 1
// used to reach rank 0's previous store while rank 0 was still leaving it, read the previous
// round's addresses and fail, leaving rank 0 to wait out its timeout, within a round or three.
// Both ranks are children, so the test process itself never starts a thread before a fork.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
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

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 20;
constexpr int64_t kTimeoutMs = 5000;

using shardrec::testing::FreePort;

enum class Ending {
  kDestroy,        // destroy after a good barrier
  kAbort,          // one rank aborts (rank 0 in even rounds, rank 1 in odd), both destroy
  kAbortNewToken,  // as kAbort, with a new SHARDREC_RENDEZVOUS_TOKEN every round
};

// One rank's rounds; the first failure is written to `report` and becomes the exit status.
int RunRank(int port, int rank, Ending ending, int report) {
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = kTimeoutMs;
  auto fail = [&](int round, const char* what, shardrec_status_t st) {
    const std::string line = "rank " + std::to_string(rank) + " round " + std::to_string(round) +
                             " " + what + ": " + shardrec_status_string(st) + " " +
                             shardrec_last_error();
    (void)!write(report, line.data(), line.size());
    return 1;
  };
  for (int round = 0; round < kRounds; ++round) {
    if (ending == Ending::kAbortNewToken)
      setenv("SHARDREC_RENDEZVOUS_TOKEN", ("round-" + std::to_string(round)).c_str(), 1);
    shardrec_comm_t* comm = nullptr;
    shardrec_status_t st = shardrec_comm_create_from_env(&comm, &o);
    if (st != SHARDREC_OK) return fail(round, "create", st);
    st = shardrec_comm_barrier(comm);
    if (st != SHARDREC_OK) return fail(round, "barrier", st);
    if (ending != Ending::kDestroy) {
      if (rank == round % 2) shardrec_comm_abort(comm);
      (void)shardrec_comm_barrier(comm);  // fails on both ranks: the failure to recover from
    }
    shardrec_comm_destroy(comm);
  }
  return 0;
}

struct Child {
  pid_t pid;
  int report;  // read end
};

Child ForkRank(int port, int rank, Ending ending) {
  int fds[2];
  if (pipe(fds) != 0) return {-1, -1};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    _exit(RunRank(port, rank, ending, fds[1]));
  }
  close(fds[1]);
  return {pid, fds[0]};
}

// Waits for the child (killing it after `limit`) and returns its report, empty when it passed.
std::string Finish(const Child& c, Clock::time_point limit) {
  int status = 0;
  while (waitpid(c.pid, &status, WNOHANG) == 0) {
    if (Clock::now() > limit) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      close(c.report);
      return "killed: still running at the test's limit";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string text;
  char buf[512];
  for (ssize_t n; (n = read(c.report, buf, sizeof(buf))) > 0;) text.append(buf, n);
  close(c.report);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return text.empty() ? "exited with status " + std::to_string(status) : text;
}

void ExpectEveryRoundWorks(Ending ending, const char* name) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const Clock::time_point start = Clock::now();
  const Child r0 = ForkRank(port, 0, ending);
  const Child r1 = ForkRank(port, 1, ending);
  ASSERT_GT(r0.pid, 0);
  ASSERT_GT(r1.pid, 0);
  const Clock::time_point limit = start + std::chrono::seconds(40);
  const std::string e0 = Finish(r0, limit);
  const std::string e1 = Finish(r1, limit);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  std::printf("[recreate] %s: %d rounds in %lld ms\n", name, kRounds,
              static_cast<long long>(ms.count()));
  EXPECT_EQ(e0, "");
  EXPECT_EQ(e1, "");
}

TEST(CapiCommEnvRecreate, DestroyAndCreateAgainEveryRound) {
  ExpectEveryRoundWorks(Ending::kDestroy, "destroy");
}

TEST(CapiCommEnvRecreate, AbortDestroyAndCreateAgainEveryRound) {
  ExpectEveryRoundWorks(Ending::kAbort, "abort");
}

// A new token per attempt: the previous store refuses the new session's nonce, which, on a
// launcher's port, is waited out like the previous store itself.
TEST(CapiCommEnvRecreate, AbortAndCreateWithANewTokenEveryRound) {
  ExpectEveryRoundWorks(Ending::kAbortNewToken, "abort, new token");
}

// A rank killed and restarted alone by its launcher (a pod restarted in place), while rank 0,
// having seen the failure, still holds the failed session's store: the new process used to
// join that store (its dead predecessor's claim was free), read the failed session's addresses
// and fail, and the survivors then waited out their timeout for it in the next session. It now
// leaves a store whose session was formed before it started and waits for rank 0's next one.
enum class Role { kSurvivor, kDies, kRestarted };

int RunRestartRole(int port, Role role, int report) {
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", role == Role::kSurvivor ? "0" : "1", 1);
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = kTimeoutMs;
  auto fail = [&](const char* what, shardrec_status_t st) {
    const std::string line =
        std::string(what) + ": " + shardrec_status_string(st) + " " + shardrec_last_error();
    (void)!write(report, line.data(), line.size());
    return 1;
  };
  shardrec_comm_t* comm = nullptr;
  shardrec_status_t st = shardrec_comm_create_from_env(&comm, &o);
  if (st != SHARDREC_OK) return fail("create", st);
  st = shardrec_comm_barrier(comm);
  if (st != SHARDREC_OK) return fail("barrier", st);
  if (role == Role::kDies) _exit(0);  // no destroy: as a killed process leaves
  if (role == Role::kRestarted) {
    shardrec_comm_destroy(comm);
    return 0;
  }
  if (shardrec_comm_barrier(comm) == SHARDREC_OK) return fail("barrier with a dead peer", 0);
  // The restarted rank starts meanwhile, while this rank's failed session's store is still up.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  shardrec_comm_destroy(comm);
  st = shardrec_comm_create_from_env(&comm, &o);
  if (st != SHARDREC_OK) return fail("create again", st);
  st = shardrec_comm_barrier(comm);
  shardrec_comm_destroy(comm);
  return st == SHARDREC_OK ? 0 : fail("barrier of the next session", st);
}

Child ForkRole(int port, Role role) {
  int fds[2];
  if (pipe(fds) != 0) return {-1, -1};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    _exit(RunRestartRole(port, role, fds[1]));
  }
  close(fds[1]);
  return {pid, fds[0]};
}

TEST(CapiCommEnvRecreate, ARankRestartedAloneJoinsTheNextSession) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const Clock::time_point start = Clock::now();
  const Child survivor = ForkRole(port, Role::kSurvivor);
  const Child dies = ForkRole(port, Role::kDies);
  ASSERT_GT(survivor.pid, 0);
  ASSERT_GT(dies.pid, 0);
  const Clock::time_point limit = start + std::chrono::seconds(30);
  EXPECT_EQ(Finish(dies, limit), "");
  const Child restarted = ForkRole(port, Role::kRestarted);  // at once, as a launcher does
  ASSERT_GT(restarted.pid, 0);
  EXPECT_EQ(Finish(restarted, limit), "");
  EXPECT_EQ(Finish(survivor, limit), "");
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  std::printf("[recreate] rank 1 restarted alone: %lld ms\n", static_cast<long long>(ms.count()));
  EXPECT_LT(ms.count(), kTimeoutMs) << "a rank waited out its timeout";
}

}  // namespace
