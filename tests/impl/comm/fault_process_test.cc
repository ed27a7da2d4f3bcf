// One multi-process test per failure kind: a rank killed, stopped (SIGSTOP), never joining, a
// stranger on the rendezvous port, and a rank claimed twice. Ranks are forked processes meeting
// through a real unique id over loopback TCP; each survivor reports the status it got and how
// long it took, checked against the configured timeout, and the figures are printed ("[fault]"
// lines, quoted in docs/reliability.md). Every fork of a rank happens before this process has
// any thread; later helper forks only sleep, signal and _exit.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/comm/rendezvous/socket_util.h"

namespace shardrec::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// What a rank observed: the status of the call that met the fault and of the call after it.
struct Outcome {
  int32_t code = 99;
  int64_t ms = -1;
  int32_t next_code = 99;
  int64_t next_ms = -1;
};

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count();
}

using Body = Outcome (*)(const UniqueId& id, int rank);

struct Child {
  pid_t pid = -1;
  int id_fd = -1;      // parent writes the unique id here
  int result_fd = -1;  // parent reads the child's Outcome here
};

Child ForkRank(Body body, int rank) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    UniqueId id;
    size_t got = 0;
    while (got < sizeof(id.bytes)) {
      ssize_t n = read(to_child[0], id.bytes + got, sizeof(id.bytes) - got);
      if (n <= 0) _exit(90);
      got += static_cast<size_t>(n);
    }
    Outcome o = body(id, rank);
    if (write(from_child[1], &o, sizeof(o)) != static_cast<ssize_t>(sizeof(o))) _exit(91);
    _exit(0);
  }
  close(to_child[0]);
  close(from_child[1]);
  return {pid, to_child[1], from_child[0]};
}

void SendId(Child* c, const UniqueId& id) {
  ASSERT_EQ(write(c->id_fd, id.bytes, sizeof(id.bytes)), static_cast<ssize_t>(sizeof(id.bytes)));
  close(c->id_fd);
  c->id_fd = -1;
}

Outcome Collect(Child* c) {
  Outcome o;
  size_t got = 0;
  auto* p = reinterpret_cast<char*>(&o);
  while (got < sizeof(o)) {
    ssize_t n = read(c->result_fd, p + got, sizeof(o) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(c->result_fd);
  int status = 0;
  waitpid(c->pid, &status, 0);
  return o;
}

// Signals `pid` after `delay_ms` from a helper process (async-signal-safe calls only).
pid_t SignalLater(pid_t pid, int sig, int delay_ms) {
  pid_t helper = fork();
  if (helper == 0) {
    usleep(static_cast<useconds_t>(delay_ms) * 1000);
    kill(pid, sig);
    _exit(0);
  }
  return helper;
}

void Report(const char* kind, int rank, const Outcome& o, int64_t timeout_ms) {
  std::string next;
  if (o.next_ms >= 0) {
    next = StrCat("; next call ", CodeName(static_cast<Code>(o.next_code)), " after ", o.next_ms,
                  " ms");
  }
  std::printf("[fault] %-12s rank %d: %s after %lld ms (timeout %lld ms)%s\n", kind, rank,
              CodeName(static_cast<Code>(o.code)), static_cast<long long>(o.ms),
              static_cast<long long>(timeout_ms), next.c_str());
}

constexpr int64_t kTimeoutMs = 1500;
constexpr int kInjectAfterMs = 300;  // the victim fails this long into the survivors' allreduce

CommOptions Options() {
  CommOptions o;
  o.timeout = milliseconds(kTimeoutMs);
  return o;
}

// A survivor of a peer failure (world 3): meets, then all-reduces while the victim is failed,
// then tries once more.
Outcome Survive(const UniqueId& id, int rank) {
  Outcome o;
  std::unique_ptr<Communicator> c;
  if (!CreateCommunicatorFromUniqueId(id, 3, rank, Options(), &c).ok()) return o;
  if (!c->Barrier().ok()) return o;
  std::vector<float> v(1024, 1.0f);
  auto start = Clock::now();
  o.code = static_cast<int32_t>(
      c->AllReduce(v.data(), v.data(), v.size(), DType::kFloat32, ReduceOp::kSum).code());
  o.ms = MsSince(start);
  start = Clock::now();
  o.next_code = static_cast<int32_t>(c->Barrier().code());
  o.next_ms = MsSince(start);
  return o;
}

// The victim meets the others, then never takes part again (it is killed or stopped).
Outcome Victim(const UniqueId& id, int rank) {
  std::unique_ptr<Communicator> c;
  if (CreateCommunicatorFromUniqueId(id, 3, rank, Options(), &c).ok() && c->Barrier().ok()) {
    for (;;) pause();
  }
  return {};
}

// The fault lands kInjectAfterMs into the allreduce; the reported time includes that delay.
void CheckPeerFailure(const char* kind, int sig, Code expected_alt) {
  Child survivor = ForkRank(&Survive, 1);
  Child victim = ForkRank(&Victim, 2);
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  SendId(&survivor, id);
  SendId(&victim, id);
  std::unique_ptr<Communicator> c;
  ASSERT_TRUE(CreateCommunicatorFromUniqueId(id, 3, 0, Options(), &c).ok());
  ASSERT_TRUE(c->Barrier().ok());
  pid_t helper = SignalLater(victim.pid, sig, kInjectAfterMs);
  Outcome mine;
  std::vector<float> v(1024, 1.0f);
  auto start = Clock::now();
  mine.code = static_cast<int32_t>(
      c->AllReduce(v.data(), v.data(), v.size(), DType::kFloat32, ReduceOp::kSum).code());
  mine.ms = MsSince(start);
  start = Clock::now();
  mine.next_code = static_cast<int32_t>(c->Barrier().code());
  mine.next_ms = MsSince(start);
  Outcome other = Collect(&survivor);
  waitpid(helper, nullptr, 0);
  if (sig != SIGKILL) kill(victim.pid, SIGKILL);
  waitpid(victim.pid, nullptr, 0);
  close(victim.result_fd);
  c.reset();
  for (const auto& [rank, o] : {std::pair{0, mine}, std::pair{1, other}}) {
    Report(kind, rank, o, kTimeoutMs);
    const Code code = static_cast<Code>(o.code);
    EXPECT_TRUE(code == Code::kTimeout || code == expected_alt)
        << kind << " rank " << rank << ": " << CodeName(code);
    // Never later than the timeout (plus scheduling slack on a loaded 2-core machine).
    EXPECT_LE(o.ms, kTimeoutMs + 750) << kind << " rank " << rank;
    EXPECT_EQ(static_cast<Code>(o.next_code), Code::kInvalidUsage) << kind << " rank " << rank;
    EXPECT_LT(o.next_ms, 100) << kind << " rank " << rank;
  }
}

TEST(CommFaults, KilledPeer) {
  // The kernel closes a killed process's sockets: survivors next to it see a reset at once,
  // the others time out waiting for them.
  CheckPeerFailure("killed", SIGKILL, Code::kRemote);
}

TEST(CommFaults, StoppedPeer) {
  // A stopped process keeps its connections open and silent: only the timeout can tell.
  CheckPeerFailure("stopped", SIGSTOP, Code::kTimeout);
}

Outcome CreateOnly(const UniqueId& id, int rank) {
  Outcome o;
  std::unique_ptr<Communicator> c;
  const auto start = Clock::now();
  o.code = static_cast<int32_t>(CreateCommunicatorFromUniqueId(id, 3, rank, Options(), &c).code());
  o.ms = MsSince(start);
  if (c) {
    const auto t = Clock::now();
    o.next_code = static_cast<int32_t>(c->Barrier().code());
    o.next_ms = MsSince(t);
  }
  return o;
}

TEST(CommFaults, RankNeverJoins) {
  Child survivor = ForkRank(&CreateOnly, 1);
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  SendId(&survivor, id);
  Outcome mine = CreateOnly(id, 0);  // rank 2 of 3 never comes
  Outcome other = Collect(&survivor);
  for (const auto& [rank, o] : {std::pair{0, mine}, std::pair{1, other}}) {
    Report("never-joined", rank, o, kTimeoutMs);
    EXPECT_EQ(static_cast<Code>(o.code), Code::kTimeout) << rank;
    EXPECT_GE(o.ms, kTimeoutMs - 100) << rank;
    EXPECT_LE(o.ms, kTimeoutMs + 750) << rank;
  }
}

// Opens connections to the store the way a port scanner or an attacker would: a huge length
// prefix, silence, a wrong nonce, garbage. Holds them until the parent closes `hold_fd`.
void Stranger(const net::Endpoint& store, int hold_fd) {
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    int fd = -1;
    if (!net::ConnectWithRetry(store, Clock::now() + milliseconds(2000), &fd).ok()) continue;
    const auto by = Clock::now() + milliseconds(500);
    if (i % 4 == 0) {
      const uint8_t len[4] = {0xff, 0xff, 0xff, 0x0f};  // a 256 MiB frame
      (void)net::SendAll(fd, len, 4, by);
    } else if (i % 4 == 1) {
      std::vector<uint8_t> hello = {1};
      net::PutBytes(&hello, "0123456789abcdef", 16);  // a wrong nonce
      (void)net::SendFrame(fd, hello, by);
    } else if (i % 4 == 2) {
      const char junk[] = "GET / HTTP/1.0\r\n\r\n";
      (void)net::SendAll(fd, junk, sizeof(junk) - 1, by);
    }  // else: connect and say nothing
    fds.push_back(fd);
  }
  char b;
  (void)read(hold_fd, &b, 1);  // until the parent is done
  for (int fd : fds) close(fd);
}

Outcome MeetDespiteStranger(const UniqueId& id, int rank) {
  Outcome o;
  std::unique_ptr<Communicator> c;
  const auto start = Clock::now();
  CommOptions opts = Options();
  o.code = static_cast<int32_t>(CreateCommunicatorFromUniqueId(id, 2, rank, opts, &c).code());
  o.ms = MsSince(start);
  if (c) {
    int64_t v = 1;
    const auto t = Clock::now();
    o.next_code =
        static_cast<int32_t>(c->AllReduce(&v, &v, 1, DType::kInt64, ReduceOp::kSum).code());
    o.next_ms = MsSince(t);
    if (v != 2) o.next_code = 98;
  }
  return o;
}

TEST(CommFaults, StrangerOnTheRendezvousPort) {
  Child rank1 = ForkRank(&MeetDespiteStranger, 1);
  int hold[2];
  ASSERT_EQ(pipe(hold), 0);
  int id_pipe[2];
  ASSERT_EQ(pipe(id_pipe), 0);
  pid_t stranger = fork();
  if (stranger == 0) {
    close(hold[1]);
    close(id_pipe[1]);
    UniqueId id;
    if (read(id_pipe[0], id.bytes, sizeof(id.bytes)) != static_cast<ssize_t>(sizeof(id.bytes)))
      _exit(90);
    net::Endpoint store;
    Nonce nonce;
    if (!DecodeUniqueId(id, &store, &nonce).ok()) _exit(91);  // only the address is used
    Stranger(store, hold[0]);
    _exit(0);
  }
  close(hold[0]);
  close(id_pipe[0]);
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  ASSERT_EQ(write(id_pipe[1], id.bytes, sizeof(id.bytes)), static_cast<ssize_t>(sizeof(id.bytes)));
  close(id_pipe[1]);
  usleep(200 * 1000);  // the stranger's connections are open before the ranks arrive
  SendId(&rank1, id);
  Outcome mine;
  {
    std::unique_ptr<Communicator> c;
    auto start = Clock::now();
    mine.code =
        static_cast<int32_t>(CreateCommunicatorFromUniqueId(id, 2, 0, Options(), &c).code());
    mine.ms = MsSince(start);
    ASSERT_TRUE(c != nullptr);
    int64_t v = 1;
    start = Clock::now();
    mine.next_code =
        static_cast<int32_t>(c->AllReduce(&v, &v, 1, DType::kInt64, ReduceOp::kSum).code());
    mine.next_ms = MsSince(start);
    Outcome other = Collect(&rank1);
    Report("stranger", 0, mine, kTimeoutMs);
    Report("stranger", 1, other, kTimeoutMs);
    for (const Outcome& o : {mine, other}) {
      EXPECT_EQ(static_cast<Code>(o.code), Code::kOk);
      EXPECT_LT(o.ms, kTimeoutMs);
      EXPECT_EQ(static_cast<Code>(o.next_code), Code::kOk);
    }
    start = Clock::now();
    c.reset();  // rank 0 hosts the store: the stranger's open connections must not hold it up
    const int64_t destroy_ms = MsSince(start);
    std::printf(
        "[fault] stranger  rank 0: destroy took %lld ms with the stranger still connected\n",
        static_cast<long long>(destroy_ms));
    EXPECT_LT(destroy_ms, 1000);
  }
  close(hold[1]);
  int status = 0;
  waitpid(stranger, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

Outcome ClaimRankOne(const UniqueId& id, int rank) {
  Outcome o;
  std::unique_ptr<Communicator> c;
  const auto start = Clock::now();
  o.code = static_cast<int32_t>(CreateCommunicatorFromUniqueId(id, 2, rank, Options(), &c).code());
  o.ms = MsSince(start);
  return o;
}

TEST(CommFaults, DuplicateRank) {
  Child first = ForkRank(&ClaimRankOne, 1);
  Child second = ForkRank(&ClaimRankOne, 1);
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  SendId(&first, id);
  usleep(100 * 1000);
  SendId(&second, id);
  usleep(100 * 1000);
  std::unique_ptr<Communicator> c;
  const auto start = Clock::now();
  Status s = CreateCommunicatorFromUniqueId(id, 2, 0, Options(), &c);
  Outcome mine;
  mine.code = static_cast<int32_t>(s.code());
  mine.ms = MsSince(start);
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.ToString();
  const Outcome a = Collect(&first), b = Collect(&second);
  Report("duplicate", 0, mine, kTimeoutMs);
  Report("duplicate", 1, a, kTimeoutMs);
  Report("duplicate", 1, b, kTimeoutMs);
  for (const Outcome& o : {mine, a, b}) {
    EXPECT_EQ(static_cast<Code>(o.code), Code::kInvalidUsage);
    EXPECT_LT(o.ms, kTimeoutMs);  // refused, never left to time out
  }
}

}  // namespace
}  // namespace shardrec::comm
