// The pread fallback at run time: a child process where io_uring_setup fails (a seccomp filter
// answers EPERM, as container runtimes' default profiles do) opens a store that asks for io_uring,
// falls back to pread, and reads every record right. Forks: left out of the TSan stage.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include "tests/impl/store/store_test_util.h"

namespace shardrec::store {
namespace {

bool DenyIoUringSetup() {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])),
                            filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

int ChildReadsThroughPread(const StoreOptions& o) {
  if (!DenyIoUringSetup()) return 10;
  std::unique_ptr<LogStore> s;
  LogTuning t;
  t.try_io_uring = true;
  if (!OpenLogStore(o, t, &s).ok()) return 11;
  const std::vector<int64_t> keys = testing::Range(0, 2000);
  const std::vector<uint8_t> v = testing::Values(keys, 5, o.value_bytes);
  if (!s->Put(keys.data(), v.data(), keys.size()).ok() || !s->Flush().ok()) return 12;
  std::vector<uint8_t> out(v.size());
  std::unique_ptr<bool[]> found(new bool[keys.size()]);
  if (!s->Get(keys.data(), keys.size(), out.data(), found.get()).ok()) return 13;
  if (s->uses_io_uring()) return 14;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!found[i]) return 15;
  }
  return out == v ? 0 : 16;
}

TEST(StoreFallback, RefusedIoUringFallsBackToPread) {
  if (!BuiltWithIoUring()) GTEST_SKIP() << "built without liburing: pread is the only reader";
  const StoreOptions o = testing::Options("store_fallback", 300);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(ChildReadsThroughPread(o));
  int status = 0;
  ASSERT_EQ(pid, waitpid(pid, &status, 0));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no seccomp; 11-13: store calls failed; 14: still "
                                       "io_uring; 15-16: wrong records";
}

}  // namespace
}  // namespace shardrec::store
