// The peer-process lookup of the shared-memory transport (shm/liveness.h): a running or stopped
// process is there, an exited one (a zombie, then reaped) or a pid now naming another process is
// gone, and what cannot be told (another pid namespace) is never called gone. A binary of its own:
// the children call into the library, so the process forks before any thread exists.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "impl/comm/shm/liveness.h"

namespace shardrec::comm::shm {
namespace {

// The child's identity, read by the child itself and sent through a pipe; then it pauses.
ProcessId ForkPausedChild(pid_t* pid) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  *pid = ::fork();
  if (*pid == 0) {
    const ProcessId me = SelfProcess();
    (void)!::write(fds[1], &me, sizeof(me));
    for (;;) ::pause();
  }
  ProcessId id;
  EXPECT_EQ(::read(fds[0], &id, sizeof(id)), static_cast<ssize_t>(sizeof(id)));
  ::close(fds[0]);
  ::close(fds[1]);
  return id;
}

TEST(CommShmLiveness, ThisProcessIsThere) {
  const ProcessId me = SelfProcess();
  EXPECT_EQ(me.pid, ::getpid());
  EXPECT_NE(me.start_ticks, 0u);
  EXPECT_FALSE(ProcessGone(me));
}

TEST(CommShmLiveness, StoppedIsThereKilledIsGoneBeforeAndAfterItIsReaped) {
  pid_t pid = 0;
  const ProcessId child = ForkPausedChild(&pid);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(child.pid, pid);
  EXPECT_FALSE(ProcessGone(child));
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(ProcessGone(child));  // a stopped peer is waited for until the timeout
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);
  EXPECT_TRUE(ProcessGone(child));  // a zombie: dead, not yet reaped
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  EXPECT_TRUE(ProcessGone(child));  // no such pid
}

TEST(CommShmLiveness, AnotherProcessUnderThePidOrUnknownIdentitiesAreNotConfused) {
  ProcessId me = SelfProcess();
  ProcessId reused = me;
  reused.start_ticks += 1;  // this pid, another start: the recorded process is gone
  EXPECT_TRUE(ProcessGone(reused));
  ProcessId elsewhere = me;
  elsewhere.pid_ns += 1;  // another pid namespace: cannot tell, so not gone
  EXPECT_FALSE(ProcessGone(elsewhere));
  EXPECT_FALSE(ProcessGone(ProcessId{}));  // nothing recorded
}

}  // namespace
}  // namespace shardrec::comm::shm
