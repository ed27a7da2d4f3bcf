// Failures: a rank that never arrives (timeout), poisoning after an error, Abort, and a unique-id
// communicator among threads.
#include <arpa/inet.h>
#include <gloo/transport/tcp/address.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "impl/comm/gloo/gloo_communicator.h"
#include "impl/comm/rendezvous/stores.h"
#include "tests/impl/comm/comm_test_util.h"
#include "tests/support/slowdown.h"

namespace shardrec::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testutil::Comms;
using testutil::MakeGroup;

TEST(CommFailure, MissingRankTimesOutThenPoisons) {
  Comms comms = MakeGroup(3, milliseconds(500));
  // Ranks 0 and 1 all-reduce; rank 2 never arrives. Both wait for it until their timeouts, which
  // fall at nearly the same moment: the first to time out closes its connections, so the other
  // may learn of the failure as its peer leaving (RemoteError) just before its own timeout. At
  // least one rank reports the timeout; each is poisoned by its own first error.
  Code codes[2] = {Code::kOk, Code::kOk};
  shardrec::testing::SpawnRanks(2, [&](int r) {
    Communicator& c = *comms[r];
    float v = 1.0f;
    const auto start = std::chrono::steady_clock::now();
    Status s = c.AllReduce(&v, &v, 1, DType::kFloat32, ReduceOp::kSum);
    const auto took = std::chrono::steady_clock::now() - start;
    codes[r] = s.code();
    EXPECT_TRUE(s.code() == Code::kTimeout || s.code() == Code::kRemote) << s.ToString();
    EXPECT_GE(took, milliseconds(400));
    EXPECT_LT(took, milliseconds(3000));
    Status later = c.Barrier();
    EXPECT_EQ(later.code(), Code::kInvalidUsage);
    const char* first = s.code() == Code::kTimeout ? "Timeout" : "RemoteError";
    EXPECT_NE(later.message().find(first), std::string::npos) << later.message();
    EXPECT_EQ(c.AsyncError().code(), s.code());
    std::unique_ptr<Communicator> sub;
    EXPECT_EQ(c.Split(0, 0, &sub).code(), Code::kInvalidUsage);
  });
  EXPECT_TRUE(codes[0] == Code::kTimeout || codes[1] == Code::kTimeout);
  EXPECT_TRUE(comms[2]->AsyncError().ok());
}

TEST(CommFailure, APeerThatNeverConnectsFailsCreationWithinTheTimeout) {
  // Rank 1 publishes its pair address (under the key gloo_mesh.cc reads, a port above any of
  // rank 0's, so rank 0 is the side that waits to be called) and never connects, as a peer that
  // left after publishing does. Gloo's own mesh connection waited five times the timeout here.
  auto store = std::make_shared<MemoryStore>();
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(65535);
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sockaddr_storage ss{};
  std::memcpy(&ss, &in, sizeof(in));
  const std::vector<char> address = gloo::transport::tcp::Address(ss, 0).bytes();
  ASSERT_TRUE(
      store->Set("g/gloo_mesh/1", std::vector<uint8_t>(address.begin(), address.end())).ok());
  GlooConfig config;
  config.store = store;
  config.prefix = "g";
  config.world = 2;
  config.rank = 0;
  config.timeout = milliseconds(400);
  const auto start = Clock::now();
  std::unique_ptr<Communicator> c;
  Status s = CreateGlooCommunicator(config, &c);
  const auto took = Clock::now() - start;
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("within 400 ms"), std::string::npos) << s.message();
  EXPECT_GE(took, milliseconds(390));
  EXPECT_LT(took, milliseconds(400 + static_cast<int64_t>(300 * shardrec::testing::kSlowdown)));
}

TEST(CommFailure, PerCallTimeoutOverridesDefault) {
  Comms comms = MakeGroup(2, milliseconds(60000));
  const auto start = std::chrono::steady_clock::now();
  CallOptions opts;
  opts.timeout = milliseconds(300);
  Status s = comms[0]->Barrier(opts);  // rank 1 never joins
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
  // Rank 1 is alive, only not calling: its host answers the probe, and the message says so
  // rather than blaming a cut link.
  EXPECT_NE(s.message().find("every peer's host answered a connection probe"), std::string::npos)
      << s.ToString();
  // Nor does it rule out a transfer that needs longer than the timeout on a slow link, which
  // the probe cannot tell from a stalled peer (multihost_slow_link: a gather through 1 Mbit/s).
  EXPECT_NE(s.message().find("need longer than the timeout (a slow or congested link"),
            std::string::npos)
      << s.ToString();
}

TEST(CommFailure, AbortPoisonsAndWakesPeers) {
  Comms comms = MakeGroup(2, milliseconds(3000));
  Status peer;
  std::thread waiter([&] {
    int32_t v = 1;
    peer = comms[1]->AllReduce(&v, &v, 1, DType::kInt32, ReduceOp::kSum);
  });
  std::this_thread::sleep_for(milliseconds(100));
  comms[0]->Abort();
  waiter.join();
  EXPECT_FALSE(peer.ok());
  EXPECT_TRUE(peer.code() == Code::kRemote || peer.code() == Code::kTimeout) << peer.ToString();
  int32_t v = 1;
  Status s = comms[0]->AllReduce(&v, &v, 1, DType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_NE(s.message().find("abort"), std::string::npos) << s.message();
  comms[0]->Abort();  // idempotent
}

// Calls blocked on the aborted rank (on the root and on a split, from two threads) return
// kAborted within a second although their timeout is 30 s; the peer blocked waiting for it (in
// another split of the same root) gets kRemote as promptly; later calls refuse with kAborted.
TEST(CommFailure, AbortFromAnotherThreadUnblocksRootAndSplitsWithinASecond) {
  Comms comms = MakeGroup(2, milliseconds(30000));
  std::unique_ptr<Communicator> sub[2], sub2[2];
  shardrec::testing::SpawnRanks(2, [&](int r) {
    ASSERT_TRUE(comms[r]->Split(0, r, &sub[r]).ok());
    ASSERT_TRUE(comms[r]->Split(0, r, &sub2[r]).ok());
  });
  // Each call waits for a partner call the other rank never makes.
  Status root0, sub0, peer;
  Clock::time_point end_root0, end_sub0, end_peer;
  std::thread a([&] {
    root0 = comms[0]->Barrier();
    end_root0 = Clock::now();
  });
  std::thread b([&] {
    float v = 1.0f;
    sub0 = sub[0]->AllReduce(&v, &v, 1, DType::kFloat32, ReduceOp::kSum);
    end_sub0 = Clock::now();
  });
  std::thread c([&] {
    peer = sub2[1]->Barrier();
    end_peer = Clock::now();
  });
  std::this_thread::sleep_for(milliseconds(300));
  const auto aborted_at = Clock::now();
  comms[0]->Abort();
  a.join();
  b.join();
  c.join();
  auto ms = [&](Clock::time_point t) {
    return std::chrono::duration_cast<milliseconds>(t - aborted_at).count();
  };
  std::printf("[abort] root %lld ms, split %lld ms, peer %lld ms after the abort (timeout 30 s)\n",
              static_cast<long long>(ms(end_root0)), static_cast<long long>(ms(end_sub0)),
              static_cast<long long>(ms(end_peer)));
  EXPECT_EQ(root0.code(), Code::kAborted) << root0.ToString();
  EXPECT_EQ(sub0.code(), Code::kAborted) << sub0.ToString();
  EXPECT_EQ(peer.code(), Code::kRemote) << peer.ToString();
  EXPECT_LE(ms(end_root0), 1000);
  EXPECT_LE(ms(end_sub0), 1000);
  EXPECT_LE(ms(end_peer), 1000);
  EXPECT_EQ(sub2[0]->Barrier().code(), Code::kAborted);
  EXPECT_EQ(sub[0]->AsyncError().code(), Code::kAborted);
  std::unique_ptr<Communicator> late;
  EXPECT_EQ(comms[0]->Split(0, 0, &late).code(), Code::kAborted);
}

// Ranks 1 and 2 enter a barrier while rank 0 stays away; aborting rank 0 must end both calls
// promptly, also on the rank that waits on rank 1 rather than on rank 0 (rank 1's failure closes
// its connections in turn).
TEST(CommFailure, AnAbortReachesEveryPeerOfTheCollective) {
  Comms comms = MakeGroup(3, milliseconds(30000));
  Status got[3];
  Clock::time_point ended[3];
  std::vector<std::thread> peers;
  for (int r = 1; r < 3; ++r) {
    peers.emplace_back([&, r] {
      got[r] = comms[r]->Barrier();
      ended[r] = Clock::now();
    });
  }
  std::this_thread::sleep_for(milliseconds(300));
  const auto aborted_at = Clock::now();
  comms[0]->Abort();
  for (auto& t : peers) t.join();
  for (int r = 1; r < 3; ++r) {
    const auto ms = std::chrono::duration_cast<milliseconds>(ended[r] - aborted_at).count();
    std::printf("[abort] peer rank %d of 3: %s %lld ms after the abort (timeout 30 s)\n", r,
                CodeName(got[r].code()), static_cast<long long>(ms));
    EXPECT_EQ(got[r].code(), Code::kRemote) << got[r].ToString();
    EXPECT_LE(ms, 1000);
  }
}

// A call the peer starts after the abort (an all-to-all, as an embedding step's) fails promptly.
TEST(CommFailure, AfterAnAbortThePeersNextCallFailsPromptly) {
  Comms comms = MakeGroup(2, milliseconds(30000));
  std::unique_ptr<Communicator> sub[2];
  shardrec::testing::SpawnRanks(2,
                                [&](int r) { ASSERT_TRUE(comms[r]->Split(0, r, &sub[r]).ok()); });
  std::vector<float> send(4, 1.0f), recv(4);
  const size_t counts[2] = {2, 2};
  std::thread blocked([&] {
    std::vector<float> r0(4);
    EXPECT_EQ(sub[0]->AllToAllV(send.data(), counts, r0.data(), counts, DType::kFloat32).code(),
              Code::kAborted);
  });
  std::this_thread::sleep_for(milliseconds(200));
  comms[0]->Abort();
  blocked.join();
  std::this_thread::sleep_for(milliseconds(50));
  const auto start = Clock::now();
  Status later = sub[1]->AllToAllV(send.data(), counts, recv.data(), counts, DType::kFloat32);
  EXPECT_EQ(later.code(), Code::kRemote) << later.ToString();
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
}

TEST(CommFailure, UniqueIdCommunicatorAcrossThreads) {
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  CommOptions opts;
  opts.timeout = milliseconds(10000);
  shardrec::testing::SpawnRanks(3, [&](int r) {
    std::unique_ptr<Communicator> c;
    Status s = CreateCommunicatorFromUniqueId(id, 3, r, opts, &c);
    ASSERT_TRUE(s.ok()) << s.ToString();
    int64_t v = r + 1;
    ASSERT_TRUE(c->AllReduce(&v, &v, 1, DType::kInt64, ReduceOp::kSum).ok());
    EXPECT_EQ(v, 6);
    std::unique_ptr<Communicator> sub;
    ASSERT_TRUE(c->Split(r == 0 ? 0 : 1, 0, &sub).ok());  // the split goes through the TCP store
    int64_t w = 1;
    ASSERT_TRUE(sub->AllReduce(&w, &w, 1, DType::kInt64, ReduceOp::kSum).ok());
    EXPECT_EQ(w, r == 0 ? 1 : 2);
  });
}

TEST(CommFailure, UniqueIdRankWithoutPeersTimesOut) {
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  CommOptions opts;
  opts.timeout = milliseconds(400);
  std::unique_ptr<Communicator> c;
  const auto start = std::chrono::steady_clock::now();
  Status s = CreateCommunicatorFromUniqueId(id, 2, 0, opts, &c);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(4000));
}

}  // namespace
}  // namespace shardrec::comm

namespace shardrec::comm {
namespace {

// Splits share the root's failure domain: a timeout on the parent makes the split fail at once
// with kInvalidUsage naming it, and a failure on a split does the same to the parent, instead
// of each waiting out its own full timeout against the same missing peer.
TEST(CommFailure, OneFailurePoisonsEveryCommunicatorSplitFromTheSameRoot) {
  Comms comms = MakeGroup(2, milliseconds(400));
  std::unique_ptr<Communicator> subs[2], grand[2];
  shardrec::testing::SpawnRanks(2, [&](int r) {
    ASSERT_TRUE(comms[r]->Split(0, r, &subs[r]).ok());
    ASSERT_TRUE(subs[r]->Split(0, r, &grand[r]).ok());
  });
  float v = 1.0f;
  Status first = comms[0]->AllReduce(&v, &v, 1, DType::kFloat32, ReduceOp::kSum);  // rank 1 away
  EXPECT_EQ(first.code(), Code::kTimeout) << first.ToString();
  for (Communicator* c : {subs[0].get(), grand[0].get()}) {
    const auto start = std::chrono::steady_clock::now();
    Status s = c->AllReduce(&v, &v, 1, DType::kFloat32, ReduceOp::kSum);
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(100));
    EXPECT_EQ(s.code(), Code::kInvalidUsage) << s.ToString();
    EXPECT_NE(s.message().find("did not complete within 400 ms"), std::string::npos) << s.message();
    EXPECT_EQ(c->AsyncError().code(), Code::kTimeout);
  }
  // Rank 1 saw no failure of its own: its communicators stay usable until they fail.
  EXPECT_TRUE(comms[1]->AsyncError().ok());
  // The other direction: a split fails first, the parent follows.
  Comms more = MakeGroup(2, milliseconds(300));
  std::unique_ptr<Communicator> child[2];
  shardrec::testing::SpawnRanks(2,
                                [&](int r) { ASSERT_TRUE(more[r]->Split(0, r, &child[r]).ok()); });
  EXPECT_EQ(child[0]->Barrier().code(), Code::kTimeout);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(more[0]->Barrier().code(), Code::kInvalidUsage);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(100));
}

// A rank whose first failure is on one communicator closes the connections of its whole tree,
// so a peer blocked waiting for it on another communicator (not on the rank it lost) fails at
// once, reading its note, instead of at its own timeout (the survivor of a killed host whose
// wait was on the other survivor).
TEST(CommFailure, AFailingRankWakesAPeerBlockedOnItInAnotherCommunicator) {
  Comms comms = MakeGroup(3, milliseconds(20000));
  // Ranks 0 and 2 in one split, rank 1 alone.
  std::unique_ptr<Communicator> subs[3];
  shardrec::testing::SpawnRanks(
      3, [&](int r) { ASSERT_TRUE(comms[r]->Split(r == 1 ? 1 : 0, r, &subs[r]).ok()); });
  Status peer;
  Clock::duration peer_took{};
  std::thread waiter([&] {
    // Rank 1 waits for rank 0's broadcast on the root; rank 0 never sends it.
    float v = 0.0f;
    const auto start = Clock::now();
    peer = comms[1]->Broadcast(&v, 1, DType::kFloat32, /*root=*/0);
    peer_took = Clock::now() - start;
  });
  // Rank 2 never calls: rank 0 times out on the split.
  CallOptions opts;
  opts.timeout = milliseconds(300);
  float v = 1.0f;
  Status first = subs[0]->AllReduce(&v, &v, 1, DType::kFloat32, ReduceOp::kSum, opts);
  EXPECT_EQ(first.code(), Code::kTimeout) << first.ToString();
  waiter.join();
  // 20 s without the interrupt; the split's 300 ms, its probe and the note's read with it.
  EXPECT_LT(peer_took, milliseconds(5000)) << peer.ToString();
  EXPECT_EQ(peer.code(), Code::kRemote) << peer.ToString();
  EXPECT_NE(peer.message().find("rank 0 had failed first"), std::string::npos) << peer.message();
  // Rank 0's root keeps its own failure's code, not the abort's.
  EXPECT_EQ(comms[0]->AsyncError().code(), Code::kTimeout);
  EXPECT_EQ(subs[0]->AsyncError().code(), Code::kTimeout);
}

}  // namespace
}  // namespace shardrec::comm
