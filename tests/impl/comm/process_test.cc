// Ranks as processes: forked children meet the parent (rank 0) through a real unique id over
// loopback TCP; and a peer that dies mid-collective. Every fork happens before this process
// has any thread, and children leave with _exit.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include "impl/comm/factory.h"

namespace shardrec::comm {
namespace {

using std::chrono::milliseconds;

struct Child {
  pid_t pid;
  int fd;  // write end: the parent sends the unique id here
};

// Forks a child that reads the id from a pipe and runs body(id); exit code 0 means success.
Child ForkRank(int (*body)(const UniqueId&, int), int rank) {
  int p[2];
  if (pipe(p) != 0) return {-1, -1};
  pid_t pid = fork();
  if (pid == 0) {
    close(p[1]);
    UniqueId id;
    size_t got = 0;
    while (got < sizeof(id.bytes)) {
      ssize_t n = read(p[0], id.bytes + got, sizeof(id.bytes) - got);
      if (n <= 0) _exit(90);
      got += static_cast<size_t>(n);
    }
    _exit(body(id, rank));
  }
  close(p[0]);
  return {pid, p[1]};
}

void SendId(const Child& c, const UniqueId& id) {
  ASSERT_EQ(write(c.fd, id.bytes, sizeof(id.bytes)), static_cast<ssize_t>(sizeof(id.bytes)));
  close(c.fd);
}

int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status)
                           : 100 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

constexpr int kWorld = 3;

// The same collectives on every rank; returns 0 when every result is right.
int RunCollectives(Communicator& c) {
  const int r = c.Rank(), n = c.Size();
  std::vector<float> v(4096, static_cast<float>(r + 1));
  if (!c.AllReduce(v.data(), v.data(), v.size(), DType::kFloat32, ReduceOp::kSum).ok()) return 1;
  if (v[4095] != n * (n + 1) / 2.0f) return 2;
  std::vector<size_t> counts(n);
  for (int q = 0; q < n; ++q) counts[q] = static_cast<size_t>(q);
  std::vector<int32_t> mine(r, r), all(n * (n - 1) / 2);
  if (!c.AllGatherV(mine.data(), mine.size(), all.data(), counts, DType::kInt32).ok()) return 3;
  if (all.back() != n - 1) return 4;
  int64_t b = r == 1 ? 77 : 0;
  if (!c.Broadcast(&b, 1, DType::kInt64, 1).ok() || b != 77) return 5;
  if (!c.Barrier().ok()) return 6;
  return 0;
}

int ChildCollectives(const UniqueId& id, int rank) {
  CommOptions opts;
  opts.timeout = milliseconds(10000);
  std::unique_ptr<Communicator> c;
  if (!CreateCommunicatorFromUniqueId(id, kWorld, rank, opts, &c).ok()) return 10;
  return RunCollectives(*c);
}

TEST(CommProcess, ForkedRanksMeetThroughUniqueId) {
  std::vector<Child> children;
  for (int r = 1; r < kWorld; ++r) children.push_back(ForkRank(&ChildCollectives, r));
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  for (auto& c : children) SendId(c, id);
  CommOptions opts;
  opts.timeout = milliseconds(10000);
  std::unique_ptr<Communicator> comm;
  Status s = CreateCommunicatorFromUniqueId(id, kWorld, 0, opts, &comm);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(RunCollectives(*comm), 0);
  comm.reset();  // waits for the children to disconnect from the store
  for (auto& c : children) EXPECT_EQ(WaitExit(c.pid), 0);
}

int ChildDiesMidway(const UniqueId& id, int rank) {
  CommOptions opts;
  opts.timeout = milliseconds(10000);
  std::unique_ptr<Communicator> c;
  if (!CreateCommunicatorFromUniqueId(id, 2, rank, opts, &c).ok()) return 10;
  int32_t v = 1;
  if (!c->AllReduce(&v, &v, 1, DType::kInt32, ReduceOp::kSum).ok()) return 11;
  usleep(200 * 1000);  // the parent is now blocked in its second allreduce
  _exit(0);            // vanish without tearing anything down
}

TEST(CommProcess, PeerExitingMidCollectiveFailsTheSurvivor) {
  Child child = ForkRank(&ChildDiesMidway, 1);
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  SendId(child, id);
  CommOptions opts;
  opts.timeout = milliseconds(3000);
  std::unique_ptr<Communicator> comm;
  ASSERT_TRUE(CreateCommunicatorFromUniqueId(id, 2, 0, opts, &comm).ok());
  int32_t v = 1;
  ASSERT_TRUE(comm->AllReduce(&v, &v, 1, DType::kInt32, ReduceOp::kSum).ok());
  std::vector<float> big(1 << 18, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  Status s = comm->AllReduce(big.data(), big.data(), big.size(), DType::kFloat32, ReduceOp::kSum);
  EXPECT_TRUE(s.code() == Code::kRemote || s.code() == Code::kTimeout) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(4500));
  EXPECT_EQ(comm->Barrier().code(), Code::kInvalidUsage);
  EXPECT_EQ(WaitExit(child.pid), 0);
}

int ChildHangs(const UniqueId& id, int rank) {
  CommOptions opts;
  opts.timeout = milliseconds(10000);
  std::unique_ptr<Communicator> c;
  if (!CreateCommunicatorFromUniqueId(id, 2, rank, opts, &c).ok()) return 10;
  for (;;) pause();  // never joins a collective; the parent SIGKILLs it
}

TEST(CommProcess, PeerKilledWhileSurvivorWaits) {
  Child child = ForkRank(&ChildHangs, 1);
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  SendId(child, id);
  CommOptions opts;
  opts.timeout = milliseconds(2000);
  std::unique_ptr<Communicator> comm;
  ASSERT_TRUE(CreateCommunicatorFromUniqueId(id, 2, 0, opts, &comm).ok());
  // The kill happens from a signal-safe helper process so this process stays single-threaded
  // until the communicator exists; the SIGKILL lands while the allreduce below is blocked.
  pid_t killer = fork();
  if (killer == 0) {
    usleep(300 * 1000);
    kill(child.pid, SIGKILL);
    _exit(0);
  }
  int32_t v = 1;
  const auto start = std::chrono::steady_clock::now();
  Status s = comm->AllReduce(&v, &v, 1, DType::kInt32, ReduceOp::kSum);
  EXPECT_TRUE(s.code() == Code::kRemote || s.code() == Code::kTimeout) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3500));
  EXPECT_EQ(WaitExit(killer), 0);
  EXPECT_EQ(WaitExit(child.pid), 100 + SIGKILL);
}

}  // namespace
}  // namespace shardrec::comm
