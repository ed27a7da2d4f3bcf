// Failures: a rank that never arrives (timeout), poisoning after an error, Abort, and a unique-id
// communicator among threads.
#include <gtest/gtest.h>

#include <thread>

#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

using std::chrono::milliseconds;
using testutil::Comms;
using testutil::MakeGroup;

TEST(CommFailure, MissingRankTimesOutThenPoisons) {
  Comms comms = MakeGroup(3, milliseconds(500));
  // Ranks 0 and 1 all-reduce; rank 2 never arrives.
  shardrec::testing::SpawnRanks(2, [&](int r) {
    Communicator& c = *comms[r];
    float v = 1.0f;
    const auto start = std::chrono::steady_clock::now();
    Status s = c.AllReduce(&v, &v, 1, DType::kFloat32, ReduceOp::kSum);
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
    EXPECT_GE(took, milliseconds(400));
    EXPECT_LT(took, milliseconds(3000));
    Status later = c.Barrier();
    EXPECT_EQ(later.code(), Code::kInvalidUsage);
    EXPECT_NE(later.message().find("Timeout"), std::string::npos) << later.message();
    EXPECT_EQ(c.AsyncError().code(), Code::kTimeout);
    std::unique_ptr<Communicator> sub;
    EXPECT_EQ(c.Split(0, 0, &sub).code(), Code::kInvalidUsage);
  });
  EXPECT_TRUE(comms[2]->AsyncError().ok());
}

TEST(CommFailure, PerCallTimeoutOverridesDefault) {
  Comms comms = MakeGroup(2, milliseconds(60000));
  const auto start = std::chrono::steady_clock::now();
  CallOptions opts;
  opts.timeout = milliseconds(300);
  Status s = comms[0]->Barrier(opts);  // rank 1 never joins
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
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
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_NE(s.message().find("abort"), std::string::npos) << s.message();
  comms[0]->Abort();  // idempotent
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
