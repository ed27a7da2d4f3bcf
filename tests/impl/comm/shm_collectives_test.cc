// The small collectives over shared memory (AllReduce, ReduceScatterV, Broadcast, Barrier): every
// dtype and op against a reduction in rank order computed here, bit for bit, identical on every
// rank; at world 2 (and for ReduceScatterV at any world) bit-identical to the wrapped Gloo's own
// result; in place and out of place, one chunk and many, both all-reduce algorithms (one exchange
// and reduce-then-gather). Then their failure paths, as the shared-memory all-to-all's: an absent
// peer gives kTimeout naming it, an abort wakes a waiting call and tells the peer.
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "impl/comm/reduce.h"
#include "impl/comm/shm/shm_communicator.h"
#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

using testutil::Comms;
using testutil::MakeGroup;
using testutil::OnRanks;

Communicator& Gloo(Communicator& c) { return dynamic_cast<shm::ShmCommunicator&>(c).inner(); }

// Rank r's input bytes: varied values of the dtype (fractions for the floats, so that the order
// of a float sum shows in the last bits; negative and positive integers).
std::vector<uint8_t> Input(DType dtype, size_t count, int r) {
  const size_t e = DTypeSize(dtype);
  std::vector<uint8_t> out(count * e);
  for (size_t i = 0; i < count; ++i) {
    const double v =
        (static_cast<double>((i * 7919 + static_cast<size_t>(r) * 104729) % 2001) - 1000.0) /
        (dtype == DType::kInt32 || dtype == DType::kInt64 || dtype == DType::kUInt8 ? 1.0
                                                                                    : 3.7 + r);
    uint8_t* p = out.data() + i * e;
    switch (dtype) {
      case DType::kFloat32: {
        const auto f = static_cast<float>(v);
        std::memcpy(p, &f, e);
        break;
      }
      case DType::kFloat64:
        std::memcpy(p, &v, e);
        break;
      case DType::kInt32: {
        const auto x = static_cast<int32_t>(v);
        std::memcpy(p, &x, e);
        break;
      }
      case DType::kInt64: {
        const auto x = static_cast<int64_t>(v) * 1000003;
        std::memcpy(p, &x, e);
        break;
      }
      case DType::kUInt8:
        *p = static_cast<uint8_t>(static_cast<int64_t>(v) & 0x3f);
        break;
      case DType::kFloat16:
      case DType::kBFloat16: {
        // Any bit pattern of a finite half: a sign, a small exponent range, any mantissa.
        const auto x = static_cast<uint16_t>((i * 2654435761u + static_cast<size_t>(r) * 40503u) &
                                             (dtype == DType::kFloat16 ? 0xbbff : 0xc0ff));
        std::memcpy(p, &x, e);
        break;
      }
      default:
        break;
    }
  }
  return out;
}

// The all-reduce of every rank's Input, folded in rank order as the transport documents.
std::vector<uint8_t> RankOrderFold(DType dtype, ReduceOp op, size_t count, int world) {
  ReduceFn fn = nullptr;
  EXPECT_TRUE(GetReduceFn(dtype, op, &fn).ok());
  std::vector<uint8_t> acc = Input(dtype, count, 0);
  for (int r = 1; r < world; ++r) {
    const std::vector<uint8_t> x = Input(dtype, count, r);
    if (count > 0) fn(acc.data(), acc.data(), x.data(), count);
  }
  if (op == ReduceOp::kAvg && count > 0) DivideBy(acc.data(), count, dtype, world);
  return acc;
}

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64,
                             DType::kInt32,   DType::kInt64,   DType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

TEST(CommShmCollectives, AllReduceEveryDTypeAndOpIsTheRankOrderFoldOnEveryRank) {
  for (int world : {2, 3, 5}) {
    Comms comms = MakeGroup(world);
    ASSERT_STREQ(dynamic_cast<shm::ShmCommunicator&>(*comms[0]).transport(), "shm");
    // 3 and 1000 take one exchange; 70001 elements are more than 64 KiB in every dtype but uint8
    // (then reduce-then-gather above two ranks) and several chunks.
    for (size_t count : {size_t{0}, size_t{3}, size_t{1000}, size_t{70001}}) {
      for (DType dtype : kDTypes) {
        for (ReduceOp op : kOps) {
          const std::vector<uint8_t> want = RankOrderFold(dtype, op, count, world);
          OnRanks(comms, [&](int r, Communicator& c) {
            std::vector<uint8_t> in = Input(dtype, count, r), out(in.size(), 0xee);
            const bool in_place = (count + static_cast<size_t>(r)) % 2 == 0;
            void* recv = in_place ? in.data() : out.data();
            const Status s = c.AllReduce(in.data(), recv, count, dtype, op);
            ASSERT_TRUE(s.ok()) << s.ToString();
            if (want.empty()) return;  // no memcmp of (possibly null) empty buffers
            ASSERT_EQ(std::memcmp(recv, want.data(), want.size()), 0)
                << "world " << world << " count " << count << " dtype " << static_cast<int>(dtype)
                << " op " << ReduceOpName(op) << " rank " << r;
          });
        }
      }
    }
  }
}

// At world 2 each element is one operation: the transport's sum is Gloo's, bit for bit.
TEST(CommShmCollectives, AllReduceSumAtWorldTwoIsBitIdenticalToGloo) {
  Comms comms = MakeGroup(2);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    for (size_t count : {size_t{5}, size_t{300000}}) {  // 300000 fp32: several rings' worth
      OnRanks(comms, [&](int r, Communicator& c) {
        const std::vector<uint8_t> in = Input(dtype, count, r);
        std::vector<uint8_t> shm(in.size()), gloo(in.size());
        ASSERT_TRUE(c.AllReduce(in.data(), shm.data(), count, dtype, ReduceOp::kSum).ok());
        ASSERT_TRUE(Gloo(c).AllReduce(in.data(), gloo.data(), count, dtype, ReduceOp::kSum).ok());
        ASSERT_EQ(std::memcmp(shm.data(), gloo.data(), in.size()), 0)
            << "dtype " << static_cast<int>(dtype) << " count " << count;
      });
    }
  }
}

// Gloo's ReduceScatterV also folds in rank order: identical at every world.
TEST(CommShmCollectives, ReduceScatterVIsBitIdenticalToGloo) {
  for (int world : {2, 3, 4}) {
    Comms comms = MakeGroup(world);
    const std::vector<size_t> counts = [&] {
      std::vector<size_t> v;
      for (int p = 0; p < world; ++p) v.push_back(p == 1 ? 0 : 40000 + static_cast<size_t>(p));
      return v;
    }();
    size_t total = 0;
    for (size_t c : counts) total += c;
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
      for (ReduceOp op : kOps) {
        OnRanks(comms, [&](int r, Communicator& c) {
          const std::vector<uint8_t> in = Input(dtype, total, r);
          const size_t bytes = counts[static_cast<size_t>(r)] * DTypeSize(dtype);
          std::vector<uint8_t> shm(bytes, 1), gloo(bytes, 2);
          ASSERT_TRUE(c.ReduceScatterV(in.data(), shm.data(), counts, dtype, op).ok());
          ASSERT_TRUE(Gloo(c).ReduceScatterV(in.data(), gloo.data(), counts, dtype, op).ok());
          ASSERT_EQ(shm, gloo) << "world " << world << " op " << ReduceOpName(op);
        });
      }
    }
  }
}

TEST(CommShmCollectives, BroadcastFromEveryRootSmallAndManyChunks) {
  for (int world : {2, 3}) {
    Comms comms = MakeGroup(world);
    for (int root = 0; root < world; ++root) {
      for (size_t count : {size_t{1}, size_t{700000}}) {
        OnRanks(comms, [&](int r, Communicator& c) {
          std::vector<int32_t> buf(count, -1);
          if (r == root)
            for (size_t i = 0; i < count; ++i) buf[i] = root * 7 + static_cast<int32_t>(i);
          ASSERT_TRUE(c.Broadcast(buf.data(), count, DType::kInt32, root).ok());
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(buf[i], root * 7 + static_cast<int32_t>(i)) << i;
        });
      }
    }
  }
}

TEST(CommShmCollectives, BroadcastWithDisagreeingRootsFailsWithoutHanging) {
  Comms comms = MakeGroup(2, std::chrono::milliseconds(20000));
  std::vector<Status> got(2);
  OnRanks(comms, [&](int r, Communicator& c) {
    int32_t v = r;
    got[static_cast<size_t>(r)] = c.Broadcast(&v, 1, DType::kInt32, /*root=*/r);
  });
  for (const Status& s : got) EXPECT_EQ(s.code(), Code::kRemote) << s.ToString();
}

TEST(CommShmCollectives, BarriersAndReductionsInterleaveInOneOrder) {
  Comms comms = MakeGroup(3);
  OnRanks(comms, [&](int r, Communicator& c) {
    for (int round = 0; round < 50; ++round) {
      ASSERT_TRUE(c.Barrier().ok());
      int64_t v = r * round;
      ASSERT_TRUE(c.AllReduce(&v, &v, 1, DType::kInt64, ReduceOp::kMax).ok());
      ASSERT_EQ(v, 2 * round);
    }
  });
}

// An absent peer: kTimeout from the shared-memory call (not Gloo's), naming the rank owed, then
// the communicator refuses further calls.
TEST(CommShmCollectives, AnAbsentPeerTimesOutAllReduceBroadcastAndBarrier) {
  for (int which = 0; which < 3; ++which) {
    Comms comms = MakeGroup(2);
    CallOptions opts;
    opts.timeout = std::chrono::milliseconds(200);
    float v = 1.0f;
    const char* what = which == 0 ? "allreduce" : which == 1 ? "broadcast" : "barrier";
    Status s = which == 0   ? comms[0]->AllReduce(&v, &v, 1, DType::kFloat32, ReduceOp::kSum, opts)
               : which == 1 ? comms[0]->Broadcast(&v, 1, DType::kFloat32, 1, opts)
                            : comms[0]->Barrier(opts);
    EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
    EXPECT_NE(s.message().find(std::string("shared-memory ") + what), std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.ToString();
    EXPECT_EQ(comms[0]->Barrier().code(), Code::kInvalidUsage);
  }
}

// A silent peer ends every waiting rank's call with kTimeout, as on Gloo, also the rank that the
// first one to time out wakes through the segment's flag before its own deadline (CI saw that
// rank report kRemote when the two deadlines fell within a millisecond).
TEST(CommShmCollectives, APeersTimeoutReachesTheOtherWaitingRanksAsATimeout) {
  Comms comms = MakeGroup(3);
  Status first, woken;
  auto woken_ms = std::chrono::milliseconds(0);
  std::thread short_wait([&] {
    CallOptions opts;
    opts.timeout = std::chrono::milliseconds(200);
    first = comms[1]->Barrier(opts);
  });
  std::thread long_wait([&] {
    CallOptions opts;
    opts.timeout = std::chrono::milliseconds(60000);
    const auto start = std::chrono::steady_clock::now();
    woken = comms[0]->Barrier(opts);
    woken_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
  });
  short_wait.join();
  long_wait.join();  // rank 2 never calls: only rank 1's timeout can end rank 0's wait
  EXPECT_EQ(first.code(), Code::kTimeout) << first.ToString();
  EXPECT_EQ(woken.code(), Code::kTimeout) << woken.ToString();
  EXPECT_NE(woken.message().find("rank 1 timed out"), std::string::npos) << woken.ToString();
  EXPECT_LT(woken_ms.count(), 30000) << "woken by rank 1's flag, not its own deadline";
}

TEST(CommShmCollectives, AbortWakesAWaitingAllReduceAndBarrierAndTellsThePeer) {
  for (bool barrier : {false, true}) {
    Comms comms = MakeGroup(2, std::chrono::milliseconds(600000));  // only the abort ends it
    std::atomic<bool> entered{false};
    Status waited;
    std::thread waiter([&] {
      entered = true;
      float v = 1.0f;
      waited = barrier ? comms[0]->Barrier()
                       : comms[0]->AllReduce(&v, &v, 1, DType::kFloat32, ReduceOp::kSum);
    });
    while (!entered) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    comms[0]->Abort();
    waiter.join();
    EXPECT_EQ(waited.code(), Code::kAborted) << waited.ToString();
    // Rank 0's message was posted before the abort, so the peer's matching call may complete;
    // its next one fails at once (the segment's flag, or Gloo's closed connection).
    Status peer = comms[1]->Barrier();
    if (peer.ok()) peer = comms[1]->Barrier();
    EXPECT_TRUE(peer.code() == Code::kRemote || peer.code() == Code::kInvalidUsage)
        << peer.ToString();
  }
}

}  // namespace
}  // namespace shardrec::comm
