// The shared-memory transport (impl/comm/shm): local groups are ranks of one host, so the factory
// gives them a segment; these tests check the bytes it moves, its framing of large and empty
// messages, its failure paths (abort, absent peer, disagreeing counts) and that it leaves
// nothing in /dev/shm.
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "impl/comm/shm/shm_communicator.h"
#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

using testutil::Comms;
using testutil::MakeGroup;
using testutil::OnRanks;

const char* Transport(Communicator& c) {
  auto* s = dynamic_cast<shm::ShmCommunicator*>(&c);
  return s == nullptr ? "none" : s->transport();
}

// The element rank `from` sends rank `to` at index i of round `round`.
int32_t Value(int from, int to, size_t i, int round) {
  return static_cast<int32_t>(from * 1000003 + to * 10007 + static_cast<int>(i) * 7 + round);
}

// Counts from `from` to `to` in round `round`: uneven, with zeros, and some messages several
// chunks long (a chunk is 256 KiB = 65536 int32 for groups up to four ranks).
size_t Count(int from, int to, int round) {
  const int k = (from * 3 + to * 5 + round) % 7;
  if (k == 0) return 0;
  if (k == 1) return 1;
  if (k == 2 && round % 4 == 0) return 65536 * 3 + 17;  // crosses chunks and the ring's end
  return static_cast<size_t>(k * 13 + round);
}

// One all-to-all round on `c`, checked element by element.
void AllToAllRound(Communicator& c, int round) {
  const int n = c.Size(), r = c.Rank();
  std::vector<size_t> sc(n), rc(n);
  for (int p = 0; p < n; ++p) {
    sc[p] = Count(r, p, round);
    rc[p] = Count(p, r, round);
  }
  std::vector<int32_t> send(std::accumulate(sc.begin(), sc.end(), size_t{0}));
  std::vector<int32_t> recv(std::accumulate(rc.begin(), rc.end(), size_t{0}), -1);
  size_t o = 0;
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < sc[p]; ++i) send[o++] = Value(r, p, i, round);
  Status s = c.AllToAllV(send.data(), sc, recv.data(), rc, DType::kInt32);
  ASSERT_TRUE(s.ok()) << s.ToString();
  o = 0;
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < rc[p]; ++i, ++o)
      ASSERT_EQ(recv[o], Value(p, r, i, round)) << "from " << p << " element " << i;
}

TEST(CommShm, LocalGroupUsesSharedMemoryAndKeepsTheBackendName) {
  for (int world : {2, 3}) {
    Comms comms = MakeGroup(world);
    ASSERT_EQ(comms.size(), static_cast<size_t>(world));
    for (auto& c : comms) {
      EXPECT_STREQ(Transport(*c), "shm");
      EXPECT_STREQ(c->backend(), "gloo");
    }
  }
  Comms one = MakeGroup(1);
  EXPECT_STREQ(Transport(*one[0]), "none");  // a single rank has nobody to share with
}

TEST(CommShm, AllToAllVUnevenZeroAndMultiChunkMessagesOverManyRounds) {
  for (int world : {2, 3, 5}) {  // five ranks use the smaller chunks
    Comms comms = MakeGroup(world);
    OnRanks(comms, [&](int, Communicator& c) {
      for (int round = 0; round < 40; ++round) AllToAllRound(c, round);
    });
  }
}

TEST(CommShm, AllToAllVAllZeroCountsWithNullBuffers) {
  Comms comms = MakeGroup(2);
  OnRanks(comms, [&](int, Communicator& c) {
    const std::vector<size_t> zero(2, 0);
    for (int i = 0; i < 3; ++i) {
      Status s = c.AllToAllV(nullptr, zero, nullptr, zero, DType::kFloat32);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  });
}

TEST(CommShm, AllGatherVInterleavedWithBarriers) {
  Comms comms = MakeGroup(3);
  OnRanks(comms, [&](int r, Communicator& c) {
    for (int round = 0; round < 10; ++round) {
      std::vector<size_t> counts = {0, 70000, static_cast<size_t>(round)};  // 70000 > one chunk
      std::vector<float> mine(counts[r]);
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(r * 100000 + i);
      std::vector<float> all(counts[0] + counts[1] + counts[2], -1.f);
      Status s = c.AllGatherV(mine.data(), mine.size(), all.data(), counts, DType::kFloat32);
      ASSERT_TRUE(s.ok()) << s.ToString();
      size_t o = 0;
      for (int p = 0; p < 3; ++p)
        for (size_t i = 0; i < counts[p]; ++i, ++o)
          ASSERT_EQ(all[o], static_cast<float>(p * 100000 + i));
      ASSERT_TRUE(c.Barrier().ok());
    }
  });
}

// Delegated collectives and shared-memory ones interleave in one order on every rank.
TEST(CommShm, DelegatedAndSharedCollectivesInterleave) {
  Comms comms = MakeGroup(2);
  OnRanks(comms, [&](int r, Communicator& c) {
    for (int round = 0; round < 20; ++round) {
      int64_t v = r + round;
      ASSERT_TRUE(c.AllReduce(&v, &v, 1, DType::kInt64, ReduceOp::kSum).ok());
      ASSERT_EQ(v, 1 + 2 * round);
      AllToAllRound(c, round);
      int32_t b = r == 1 ? round : -1;
      ASSERT_TRUE(c.Broadcast(&b, 1, DType::kInt32, 1).ok());
      ASSERT_EQ(b, round);
    }
  });
}

// Each rank drives two communicators from two threads at once (the pipelined input exchange
// does this): each keeps its own order and its own mailboxes.
TEST(CommShm, TwoThreadsEachWithItsOwnCommunicator) {
  Comms comms = MakeGroup(2);
  std::vector<std::unique_ptr<Communicator>> second(2);
  OnRanks(comms, [&](int r, Communicator& c) {
    ASSERT_TRUE(c.Split(0, r, &second[static_cast<size_t>(r)]).ok());
  });
  for (auto& c : second) EXPECT_STREQ(Transport(*c), "shm");
  OnRanks(comms, [&](int r, Communicator& c) {
    std::thread other([&] {
      for (int round = 0; round < 30; ++round)
        AllToAllRound(*second[static_cast<size_t>(r)], round + 7);
    });
    for (int round = 0; round < 30; ++round) AllToAllRound(c, round);
    other.join();
  });
}

TEST(CommShm, SplitChildrenOfAFourRankGroupGetTheirOwnSegment) {
  Comms comms = MakeGroup(4);
  std::vector<std::unique_ptr<Communicator>> rows(4);
  OnRanks(comms, [&](int r, Communicator& c) {
    ASSERT_TRUE(c.Split(r / 2, r, &rows[static_cast<size_t>(r)]).ok());
    Communicator& row = *rows[static_cast<size_t>(r)];
    ASSERT_EQ(row.Size(), 2);
    EXPECT_STREQ(Transport(row), "shm");
    for (int round = 0; round < 5; ++round) {
      AllToAllRound(row, round);
      AllToAllRound(c, round);
    }
  });
}

TEST(CommShm, OptOutByEnvironmentDelegatesToTheBackend) {
  ::setenv("SHARDREC_SHM", "0", 1);
  Comms comms = MakeGroup(2);
  ::unsetenv("SHARDREC_SHM");
  for (auto& c : comms) EXPECT_STREQ(Transport(*c), "delegated");
  OnRanks(comms, [&](int, Communicator& c) {
    for (int round = 0; round < 4; ++round) AllToAllRound(c, round);
  });
}

TEST(CommShm, NothingIsLeftInDevShm) {
  Comms comms = MakeGroup(3);
  const std::string prefix = "shardrec-" + std::to_string(::getpid()) + "-";
  DIR* d = ::opendir("/dev/shm");
  ASSERT_NE(d, nullptr);
  int left = 0;
  while (dirent* e = ::readdir(d))
    left += std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
  ::closedir(d);
  EXPECT_EQ(left, 0);
  EXPECT_STREQ(Transport(*comms[0]), "shm");
}

TEST(CommShm, AnAbsentPeerGivesTheTimeoutErrorAndPoisons) {
  Comms comms = MakeGroup(2);
  std::vector<int32_t> send(10, 1), recv(10);
  const std::vector<size_t> counts = {5, 5};
  CallOptions opts;
  opts.timeout = std::chrono::milliseconds(200);
  Status s = comms[0]->AllToAllV(send.data(), counts, recv.data(), counts, DType::kInt32, opts);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.ToString().find("rank 1"), std::string::npos) << s.ToString();
  Status later = comms[0]->Barrier();
  EXPECT_EQ(later.code(), Code::kInvalidUsage) << later.ToString();
}

TEST(CommShm, AbortWakesAWaitingCollectiveAndTellsThePeer) {
  // A timeout far beyond the test's own: only the abort can end the wait.
  Comms comms = MakeGroup(2, std::chrono::milliseconds(600000));
  std::vector<int32_t> send(10, 1), recv(10);
  const std::vector<size_t> counts = {5, 5};
  std::atomic<bool> entered{false};
  Status waited;
  std::thread waiter([&] {
    entered = true;
    waited = comms[0]->AllToAllV(send.data(), counts, recv.data(), counts, DType::kInt32);
  });
  while (!entered) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[0]->Abort();
  waiter.join();
  EXPECT_EQ(waited.code(), Code::kAborted) << waited.ToString();
  // Rank 0 posted its message before the abort, so the peer's matching call may still complete;
  // its next one has nothing to meet.
  Status peer = comms[1]->AllToAllV(send.data(), counts, recv.data(), counts, DType::kInt32);
  if (peer.ok())
    peer = comms[1]->AllToAllV(send.data(), counts, recv.data(), counts, DType::kInt32);
  // The peer learns of it from the segment (kRemote) or, first, from Gloo's closed connection
  // (then its call is refused as poisoned): either way at once, not at its ten-minute timeout.
  EXPECT_TRUE(peer.code() == Code::kRemote || peer.code() == Code::kInvalidUsage)
      << peer.ToString();
}

TEST(CommShm, DisagreeingCountsFailWithoutHanging) {
  Comms comms = MakeGroup(2, std::chrono::milliseconds(5000));
  std::vector<Status> got(2);
  OnRanks(comms, [&](int r, Communicator& c) {
    std::vector<int32_t> send(20, 1), recv(20);
    // Rank 0 sends rank 1 four elements; rank 1 expects six.
    const std::vector<size_t> sc = r == 0 ? std::vector<size_t>{3, 4} : std::vector<size_t>{5, 3};
    const std::vector<size_t> rc = r == 0 ? std::vector<size_t>{3, 5} : std::vector<size_t>{6, 3};
    got[static_cast<size_t>(r)] = c.AllToAllV(send.data(), sc, recv.data(), rc, DType::kInt32);
  });
  EXPECT_EQ(got[1].code(), Code::kRemote) << got[1].ToString();
  EXPECT_NE(got[1].ToString().find("disagree"), std::string::npos) << got[1].ToString();
  // Rank 0 got what it expected from rank 1: it may finish; it must not hang (the test ends).
  EXPECT_TRUE(got[0].ok() || IsExchangeFailure(got[0])) << got[0].ToString();
}

}  // namespace
}  // namespace shardrec::comm
