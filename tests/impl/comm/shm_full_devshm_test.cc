// A /dev/shm too small for the segment (a container's default 64 MiB, full of other segments):
// rank 0 cannot reserve the segment's pages (segment.cc), so the group keeps Gloo and its
// collectives still give the right results, instead of a SIGBUS on the first touch of a page the
// tmpfs cannot supply. The test makes that /dev/shm for real: a child process enters a private
// mount namespace and mounts a 64 KiB tmpfs over /dev/shm (the host's is untouched). That needs
// root (CI runs as root) and unshare(2); the test is skipped, saying why, without them.
// A binary of its own: it forks before any thread exists.
#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "impl/comm/shm/shm_communicator.h"
#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

using testutil::Comms;
using testutil::MakeGroup;
using testutil::OnRanks;

constexpr int kSkip = 77;

// In the child: a private mount namespace with a 64 KiB /dev/shm. "" or why it cannot be made.
std::string PrivateSmallDevShm() {
  if (::geteuid() != 0) return "not root: mounting a private /dev/shm needs CAP_SYS_ADMIN";
  if (::unshare(CLONE_NEWNS) != 0)
    return std::string("unshare(CLONE_NEWNS) failed: ") + std::strerror(errno);
  // Nothing mounted below may propagate back to the host's namespace.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("making / private failed: ") + std::strerror(errno);
  if (::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64k,mode=1777") != 0)
    return std::string("mounting a tmpfs on /dev/shm failed: ") + std::strerror(errno);
  return "";
}

// In the child, /dev/shm now 64 KiB: groups of two and three ranks keep Gloo and compute right.
void GroupsKeepGlooWithCorrectResults() {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  ASSERT_LE(static_cast<size_t>(fs.f_blocks) * fs.f_frsize, size_t{64} << 10);
  for (int world : {2, 3}) {
    Comms comms = MakeGroup(world);
    ASSERT_EQ(comms.size(), static_cast<size_t>(world));
    for (auto& c : comms)
      EXPECT_STREQ(dynamic_cast<shm::ShmCommunicator&>(*c).transport(), "delegated");
    OnRanks(comms, [&](int r, Communicator& c) {
      std::vector<float> v(100000);  // larger than the whole /dev/shm
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r + 1) * 0.5f + i;
      ASSERT_TRUE(c.AllReduce(v.data(), v.data(), v.size(), DType::kFloat32, ReduceOp::kSum).ok());
      const float ranks = static_cast<float>(world * (world + 1) / 2) * 0.5f;
      for (size_t i = 0; i < v.size(); i += 997)
        ASSERT_EQ(v[i], ranks + static_cast<float>(world) * i) << i;
      const size_t n = static_cast<size_t>(world), each = 30000;
      std::vector<int32_t> send(n * each), recv(n * each, -1);
      for (size_t p = 0; p < n; ++p)
        for (size_t i = 0; i < each; ++i)
          send[p * each + i] = r * 1000000 + static_cast<int32_t>(p * each + i);
      const std::vector<size_t> counts(n, each);
      ASSERT_TRUE(c.AllToAllV(send.data(), counts, recv.data(), counts, DType::kInt32).ok());
      for (size_t p = 0; p < n; ++p)
        for (size_t i = 0; i < each; i += 101)
          ASSERT_EQ(recv[p * each + i], static_cast<int32_t>(p) * 1000000 +
                                            r * static_cast<int32_t>(each) +
                                            static_cast<int32_t>(i));
      ASSERT_TRUE(c.Barrier().ok());
    });
  }
}

TEST(CommShmFullDevShm, ASegmentThatCannotBeReservedKeepsTheGroupOnGloo) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    const std::string why = PrivateSmallDevShm();
    if (!why.empty()) {
      (void)!::write(pipe_fds[1], why.data(), why.size());
      ::_exit(kSkip);
    }
    GroupsKeepGlooWithCorrectResults();
    ::_exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  ::close(pipe_fds[1]);
  std::string why;
  char buf[256];
  for (ssize_t k; (k = ::read(pipe_fds[0], buf, sizeof(buf))) > 0;) why.append(buf, k);
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == kSkip) GTEST_SKIP() << why;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's failures are printed above";
}

}  // namespace
}  // namespace shardrec::comm
