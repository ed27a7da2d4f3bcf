// GPU tests of the NCCL communicator (plugin) through the bridge: every collective against
// exact expected values, split, abort, poisoning and timeouts. NCCL refuses two ranks of one
// communicator on the same GPU, so multi-rank cases need that many devices and skip otherwise;
// world 1 runs on any single GPU. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "impl/comm/nccl/nccl_backend.h"
#include "tests/impl/cuda_plugin/gpu_test_util.h"
#include "tests/impl/cuda_plugin/memory_store.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec {
namespace {

using comm::Communicator;
using comm::ReduceOp;
using testing::DeviceVector;
using testing::GpuRuntime;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout(60000);

int DeviceCount() { return GpuRuntime() == nullptr ? 0 : GpuRuntime()->DeviceCount(); }

std::unique_ptr<Communicator> Make(comm::Store* store, const std::string& prefix, int world,
                                   int rank, milliseconds timeout = kTimeout) {
  std::unique_ptr<Communicator> c;
  const Status s =
      comm::nccl::CreateNcclCommunicator(store, prefix, world, rank, rank, timeout, &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

// Runs every collective on `c` (rank r of W, device r) and checks exact results.
void CheckAllCollectives(Communicator& c) {
  const int r = c.Rank();
  const int w = c.Size();
  const int dev = c.device().index;
  const float fw = static_cast<float>(w);

  {  // AllReduce: sum, avg, max, min; values chosen so that every result is exact.
    constexpr size_t kN = 1000;
    std::vector<float> in(kN);
    for (size_t i = 0; i < kN; ++i) in[i] = fw * (r + 1) + fw * i;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      DeviceVector<float> send(dev, in);
      DeviceVector<float> recv(dev, kN);
      ASSERT_TRUE(c.AllReduce(send.data(), recv.data(), kN, DType::kFloat32, op).ok());
      const std::vector<float> out = recv.Download();
      for (size_t i = 0; i < kN; ++i) {
        const float base = fw * i;
        float want = 0;
        switch (op) {
          case ReduceOp::kSum:
            want = fw * (fw * (fw + 1) / 2) + fw * base;
            break;
          case ReduceOp::kAvg:
            want = fw * (fw + 1) / 2 + base;
            break;
          case ReduceOp::kMax:
            want = fw * fw + base;
            break;
          case ReduceOp::kMin:
            want = fw + base;
            break;
        }
        // NCCL averages floats by scaling with 1/W, which is inexact for W = 3; the rest is exact.
        const float tolerance = op == ReduceOp::kAvg ? 1e-6f * want : 0.0f;
        ASSERT_NEAR(out[i], want, tolerance) << "op " << static_cast<int>(op) << " at " << i;
      }
    }
    // In place, int64.
    DeviceVector<int64_t> buf(dev, std::vector<int64_t>{r + 1, int64_t{1} << 40});
    ASSERT_TRUE(c.AllReduce(buf.data(), buf.data(), 2, DType::kInt64, ReduceOp::kSum).ok());
    EXPECT_EQ(buf.Download(), (std::vector<int64_t>{w * (w + 1) / 2, w * (int64_t{1} << 40)}));
  }

  {  // AllToAllV with counts c(s, d) = (s + 2d) % 3, zeros included.
    auto count = [](int s, int d) { return static_cast<size_t>((s + 2 * d) % 3); };
    std::vector<size_t> send_counts(w), recv_counts(w);
    std::vector<float> send_host, want;
    for (int d = 0; d < w; ++d) {
      send_counts[d] = count(r, d);
      for (size_t k = 0; k < send_counts[d]; ++k) send_host.push_back(r * 1000.f + d * 10.f + k);
    }
    for (int s = 0; s < w; ++s) {
      recv_counts[s] = count(s, r);
      for (size_t k = 0; k < recv_counts[s]; ++k) want.push_back(s * 1000.f + r * 10.f + k);
    }
    DeviceVector<float> send(dev, send_host.empty() ? std::vector<float>{0.f} : send_host);
    DeviceVector<float> recv(dev, want.size() + 1);
    ASSERT_TRUE(
        c.AllToAllV(send.data(), send_counts, recv.data(), recv_counts, DType::kFloat32).ok());
    std::vector<float> out = recv.Download();
    out.resize(want.size());
    EXPECT_EQ(out, want);
  }

  for (bool equal : {false, true}) {  // AllGatherV: grouped path and native path.
    std::vector<size_t> counts(w);
    std::vector<float> want;
    for (int p = 0; p < w; ++p) {
      counts[p] = equal ? 3 : static_cast<size_t>(p + 1);
      for (size_t k = 0; k < counts[p]; ++k) want.push_back(p * 100.f + k);
    }
    std::vector<float> mine;
    for (size_t k = 0; k < counts[r]; ++k) mine.push_back(r * 100.f + k);
    DeviceVector<float> send(dev, mine);
    DeviceVector<float> recv(dev, want.size());
    ASSERT_TRUE(c.AllGatherV(send.data(), counts[r], recv.data(), counts, DType::kFloat32).ok());
    EXPECT_EQ(recv.Download(), want) << "equal counts " << equal;
  }

  for (bool equal : {false, true}) {  // ReduceScatterV: per-root reduce and native path.
    std::vector<size_t> counts(w);
    size_t total = 0;
    for (int p = 0; p < w; ++p) total += counts[p] = equal ? 4 : static_cast<size_t>(p % 2 + 1);
    std::vector<float> send_host(total);
    for (size_t j = 0; j < total; ++j) send_host[j] = (r + 1) * 1.f + j * 10.f;
    DeviceVector<float> send(dev, send_host);
    DeviceVector<float> recv(dev, counts[r]);
    ASSERT_TRUE(
        c.ReduceScatterV(send.data(), recv.data(), counts, DType::kFloat32, ReduceOp::kSum).ok());
    size_t at = 0;
    for (int p = 0; p < r; ++p) at += counts[p];
    std::vector<float> want(counts[r]);
    for (size_t k = 0; k < counts[r]; ++k) want[k] = fw * (fw + 1) / 2 + fw * 10.f * (at + k);
    EXPECT_EQ(recv.Download(), want) << "equal counts " << equal;
  }

  {  // Broadcast from the last rank.
    const int root = w - 1;
    std::vector<int32_t> host(17, r == root ? 42 : -1);
    DeviceVector<int32_t> buf(dev, host);
    ASSERT_TRUE(c.Broadcast(buf.data(), host.size(), DType::kInt32, root).ok());
    EXPECT_EQ(buf.Download(), std::vector<int32_t>(17, 42));
  }

  comm::CallOptions opts;
  opts.timeout = milliseconds(20000);
  EXPECT_TRUE(c.Barrier(opts).ok());
  EXPECT_TRUE(c.AsyncError().ok());
}

TEST(CommNcclCuda, WorldOneRunsEveryCollective) {
  SR_SKIP_WITHOUT_GPU();
  testing::MemoryStore store;
  std::unique_ptr<Communicator> c = Make(&store, "w1", 1, 0);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Rank(), 0);
  EXPECT_EQ(c->Size(), 1);
  EXPECT_STREQ(c->backend(), "nccl");
  EXPECT_EQ(c->device(), Device::Cuda(0));
  EXPECT_EQ(c->timeout(), kTimeout);
  CheckAllCollectives(*c);
}

TEST(CommNcclCuda, MultiRankCollectivesAndSplit) {
  SR_SKIP_WITHOUT_GPU();
  const int world = std::min(DeviceCount(), 4);
  if (world < 2) GTEST_SKIP() << "needs 2 CUDA devices (NCCL allows one rank per GPU)";
  testing::MemoryStore store;
  testing::SpawnRanks(world, [&](int rank) {
    std::unique_ptr<Communicator> c = Make(&store, "multi", world, rank);
    ASSERT_NE(c, nullptr);
    CheckAllCollectives(*c);
    // Split by parity, reversed order inside each group.
    std::unique_ptr<Communicator> sub;
    ASSERT_TRUE(c->Split(rank % 2, -rank, &sub).ok());
    ASSERT_NE(sub, nullptr);
    std::vector<int> members;
    for (int r = 0; r < world; ++r) {
      if (r % 2 == rank % 2) members.push_back(r);
    }
    const int size = static_cast<int>(members.size());
    EXPECT_EQ(sub->Size(), size);
    int position = 0;
    for (int i = 0; i < size; ++i) {
      if (members[i] == rank) position = size - 1 - i;
    }
    EXPECT_EQ(sub->Rank(), position);
    DeviceVector<int32_t> v(rank, std::vector<int32_t>{rank});
    ASSERT_TRUE(sub->AllReduce(v.data(), v.data(), 1, DType::kInt32, ReduceOp::kSum).ok());
    int32_t want = 0;
    for (int m : members) want += m;
    EXPECT_EQ(v.Download()[0], want);
    // Not a member of any group.
    std::unique_ptr<Communicator> none;
    ASSERT_TRUE(c->Split(rank == 0 ? -1 : 0, 0, &none).ok());
    EXPECT_EQ(none == nullptr, rank == 0);
    if (none) {
      EXPECT_EQ(none->Size(), world - 1);
    }
  });
}

TEST(CommNcclCuda, WorldOneSplit) {
  SR_SKIP_WITHOUT_GPU();
  testing::MemoryStore store;
  std::unique_ptr<Communicator> c = Make(&store, "split1", 1, 0);
  ASSERT_NE(c, nullptr);
  std::unique_ptr<Communicator> sub;
  ASSERT_TRUE(c->Split(7, 0, &sub).ok());
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->Size(), 1);
  EXPECT_EQ(sub->timeout(), c->timeout());
  CheckAllCollectives(*sub);
  std::unique_ptr<Communicator> none;
  ASSERT_TRUE(c->Split(-1, 0, &none).ok());
  EXPECT_EQ(none, nullptr);
}

TEST(CommNcclCuda, BadArgumentsDoNotPoison) {
  SR_SKIP_WITHOUT_GPU();
  testing::MemoryStore store;
  std::unique_ptr<Communicator> c = Make(&store, "args", 1, 0);
  ASSERT_NE(c, nullptr);
  DeviceVector<float> buf(0, std::vector<float>{1, 2, 3});
  const std::vector<size_t> two = {1, 1};
  EXPECT_EQ(c->AllToAllV(buf.data(), two, buf.data(), two, DType::kFloat32).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(c->Broadcast(buf.data(), 3, DType::kFloat32, 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(
      c->AllGatherV(buf.data(), 2, buf.data(), std::vector<size_t>{3}, DType::kFloat32).code(),
      Code::kInvalidArgument);
  EXPECT_EQ(c->AllReduce(nullptr, buf.data(), 3, DType::kFloat32, ReduceOp::kSum).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(c->AllReduce(buf.data(), buf.data(), 3, static_cast<DType>(99), ReduceOp::kSum).code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(c->AllReduce(buf.data(), buf.data(), 3, DType::kFloat32, ReduceOp::kSum).ok());
  EXPECT_EQ(buf.Download(), (std::vector<float>{1, 2, 3}));
}

TEST(CommNcclCuda, AbortPoisonsEveryLaterCall) {
  SR_SKIP_WITHOUT_GPU();
  testing::MemoryStore store;
  std::unique_ptr<Communicator> c = Make(&store, "abort", 1, 0);
  ASSERT_NE(c, nullptr);
  c->Abort();
  DeviceVector<float> buf(0, std::vector<float>{1});
  const Status s = c->AllReduce(buf.data(), buf.data(), 1, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_NE(s.message().find("aborted"), std::string::npos) << s.message();
  EXPECT_EQ(c->Barrier().code(), Code::kInvalidUsage);
  std::unique_ptr<Communicator> sub;
  EXPECT_EQ(c->Split(0, 0, &sub).code(), Code::kInvalidUsage);
  EXPECT_FALSE(c->AsyncError().ok());
  c->Abort();  // twice is harmless
}

TEST(CommNcclCuda, MissingRankTimesOutInsteadOfHanging) {
  SR_SKIP_WITHOUT_GPU();
  testing::MemoryStore store;
  std::unique_ptr<Communicator> c;
  const auto start = Clock::now();
  // Rank 1 of 2 never shows up.
  const Status s =
      comm::nccl::CreateNcclCommunicator(&store, "missing", 2, 0, 0, milliseconds(3000), &c);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_EQ(c, nullptr);
  EXPECT_LT(Clock::now() - start, milliseconds(30000));
}

TEST(CommNcclCuda, SilentPeerMakesBarrierTimeOut) {
  SR_SKIP_WITHOUT_GPU();
  if (DeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  testing::MemoryStore store;
  testing::SpawnRanks(2, [&](int rank) {
    std::unique_ptr<Communicator> c = Make(&store, "silent", 2, rank, milliseconds(3000));
    ASSERT_NE(c, nullptr);
    if (rank == 1) return;  // never joins the barrier; its destructor is bounded too
    const auto start = Clock::now();
    const Status s = c->Barrier();
    EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
    EXPECT_LT(Clock::now() - start, milliseconds(30000));
    EXPECT_EQ(c->Barrier().code(), Code::kInvalidUsage);
    EXPECT_EQ(c->AsyncError().code(), Code::kTimeout);
  });
}

TEST(CommNcclCuda, TwoRanksOnOneGpuFailCleanly) {
  SR_SKIP_WITHOUT_GPU();
  // NCCL rejects duplicate GPUs in one communicator; what matters is an error, not a hang.
  testing::MemoryStore store;
  testing::SpawnRanks(2, [&](int rank) {
    std::unique_ptr<Communicator> c;
    const Status s =
        comm::nccl::CreateNcclCommunicator(&store, "dup", 2, rank, 0, milliseconds(10000), &c);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(c, nullptr);
  });
}

}  // namespace
}  // namespace shardrec
