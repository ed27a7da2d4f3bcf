// Every collective of the Gloo backend at world sizes 1-4 (threads as ranks), all dtypes and
// reduce ops, uneven and zero counts.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "impl/comm/reduce.h"
#include "impl/comm/rendezvous/stores.h"
#include "impl/core/config.h"
#include "impl/core/half.h"
#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

using testutil::Comms;
using testutil::MakeGroup;
using testutil::OnRanks;

// The value rank r holds at index i before a reduction; small integers, exact in every dtype.
double Input(int r, size_t i) {
  return static_cast<double>((r * 7 + static_cast<int>(i) * 3) % 11) + 1;
}

double Expected(ReduceOp op, int world, size_t i) {
  double acc = Input(0, i);
  for (int r = 1; r < world; ++r) {
    const double v = Input(r, i);
    acc = op == ReduceOp::kMax   ? std::max(acc, v)
          : op == ReduceOp::kMin ? std::min(acc, v)
                                 : acc + v;
  }
  return op == ReduceOp::kAvg ? acc / world : acc;
}

// Typed store/load of doubles into a raw buffer of any dtype.
void Put(std::vector<uint8_t>& buf, DType t, size_t i, double v) {
  uint8_t* p = buf.data() + i * DTypeSize(t);
  switch (t) {
    case DType::kFloat32:
      *reinterpret_cast<float*>(p) = static_cast<float>(v);
      break;
    case DType::kFloat64:
      *reinterpret_cast<double*>(p) = v;
      break;
    case DType::kInt32:
      *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v);
      break;
    case DType::kInt64:
      *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v);
      break;
    case DType::kUInt8:
      *p = static_cast<uint8_t>(v);
      break;
    case DType::kFloat16:
      *reinterpret_cast<uint16_t*>(p) = FloatToHalf(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      *reinterpret_cast<uint16_t*>(p) = FloatToBFloat16(static_cast<float>(v));
      break;
  }
}

double Get(const std::vector<uint8_t>& buf, DType t, size_t i) {
  const uint8_t* p = buf.data() + i * DTypeSize(t);
  switch (t) {
    case DType::kFloat32:
      return *reinterpret_cast<const float*>(p);
    case DType::kFloat64:
      return *reinterpret_cast<const double*>(p);
    case DType::kInt32:
      return *reinterpret_cast<const int32_t*>(p);
    case DType::kInt64:
      return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case DType::kUInt8:
      return *p;
    case DType::kFloat16:
      return HalfToFloat(*reinterpret_cast<const uint16_t*>(p));
    case DType::kBFloat16:
      return BFloat16ToFloat(*reinterpret_cast<const uint16_t*>(p));
  }
  return 0;
}

bool IsInt(DType t) { return t == DType::kInt32 || t == DType::kInt64 || t == DType::kUInt8; }

TEST(CommGloo, AllReduceEveryDTypeOpAndWorldSize) {
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt32,   DType::kInt64,
                          DType::kUInt8,   DType::kFloat16, DType::kBFloat16};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  for (int world = 1; world <= 4; ++world) {
    Comms comms = MakeGroup(world);
    ASSERT_EQ(comms.size(), static_cast<size_t>(world));
    OnRanks(comms, [&](int r, Communicator& c) {
      EXPECT_EQ(c.Rank(), r);
      EXPECT_EQ(c.Size(), world);
      EXPECT_STREQ(c.backend(), "gloo");
      for (DType t : dtypes) {
        for (ReduceOp op : ops) {
          const size_t n = 37;
          std::vector<uint8_t> send(n * DTypeSize(t)), recv(send.size());
          for (size_t i = 0; i < n; ++i) Put(send, t, i, Input(r, i));
          const bool in_place = (static_cast<int>(op) + static_cast<int>(t)) % 2 == 0;
          Status s = in_place ? c.AllReduce(send.data(), send.data(), n, t, op)
                              : c.AllReduce(send.data(), recv.data(), n, t, op);
          ASSERT_TRUE(s.ok()) << s.ToString();
          const auto& out = in_place ? send : recv;
          for (size_t i = 0; i < n; ++i) {
            double want = Expected(op, world, i);
            if (IsInt(t) && op == ReduceOp::kAvg) want = std::floor(want);
            EXPECT_NEAR(Get(out, t, i), want, std::abs(want) * 1e-2)
                << DTypeName(t) << " " << ReduceOpName(op) << " world " << world << " i " << i;
          }
        }
      }
    });
  }
}

TEST(CommGloo, LargeAllReduceSpansManySegments) {
  Comms comms = MakeGroup(3);
  OnRanks(comms, [&](int r, Communicator& c) {
    std::vector<float> v(1 << 20);  // 4 MiB: several of Gloo's 1 MiB segments per rank
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i % 100) + r);
    ASSERT_TRUE(c.AllReduce(v.data(), v.data(), v.size(), DType::kFloat32, ReduceOp::kSum).ok());
    for (size_t i = 0; i < v.size(); i += 997) ASSERT_EQ(v[i], 3.0f * (i % 100) + 3.0f);
  });
}

TEST(CommGloo, AllToAllVUnevenCountsWithZeros) {
  for (int world = 1; world <= 4; ++world) {
    Comms comms = MakeGroup(world);
    // Rank s sends (s + 2 * d) % 3 elements to rank d (zeros included); value = s*1000 + d*100 + i.
    auto count = [](int s, int d) { return static_cast<size_t>((s + 2 * d) % 3); };
    OnRanks(comms, [&](int r, Communicator& c) {
      std::vector<size_t> sc(world), rc(world);
      std::vector<int64_t> send;
      for (int d = 0; d < world; ++d) {
        sc[d] = count(r, d);
        for (size_t i = 0; i < sc[d]; ++i)
          send.push_back(r * 1000 + d * 100 + static_cast<int64_t>(i));
      }
      for (int s = 0; s < world; ++s) rc[s] = count(s, r);
      std::vector<int64_t> recv(std::accumulate(rc.begin(), rc.end(), size_t{0}), -1);
      Status st = c.AllToAllV(send.data(), sc, recv.data(), rc, DType::kInt64);
      ASSERT_TRUE(st.ok()) << st.ToString();
      size_t at = 0;
      for (int s = 0; s < world; ++s) {
        for (size_t i = 0; i < rc[s]; ++i)
          EXPECT_EQ(recv[at++], s * 1000 + r * 100 + static_cast<int64_t>(i));
      }
    });
  }
}

TEST(CommGloo, AllGatherVAndReduceScatterVUnevenCounts) {
  for (int world = 1; world <= 4; ++world) {
    Comms comms = MakeGroup(world);
    std::vector<size_t> counts(world);
    for (int r = 0; r < world; ++r) counts[r] = static_cast<size_t>(r % 3 == 1 ? 0 : r + 2);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    OnRanks(comms, [&](int r, Communicator& c) {
      std::vector<float> mine(counts[r]);
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(r * 10 + i);
      std::vector<float> all(total, -1.0f);
      Status s = c.AllGatherV(mine.data(), mine.size(), all.data(), counts, DType::kFloat32);
      ASSERT_TRUE(s.ok()) << s.ToString();
      size_t at = 0;
      for (int q = 0; q < world; ++q) {
        for (size_t i = 0; i < counts[q]; ++i) EXPECT_EQ(all[at++], static_cast<float>(q * 10 + i));
      }
      // ReduceScatterV: every rank holds `total` elements; rank q gets block q reduced.
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        std::vector<double> send(total);
        for (size_t i = 0; i < total; ++i) send[i] = Input(r, i);
        std::vector<double> out(counts[r], -1.0);
        s = c.ReduceScatterV(send.data(), out.data(), counts, DType::kFloat64, op);
        ASSERT_TRUE(s.ok()) << s.ToString();
        size_t offset = std::accumulate(counts.begin(), counts.begin() + r, size_t{0});
        for (size_t i = 0; i < counts[r]; ++i) {
          EXPECT_DOUBLE_EQ(out[i], Expected(op, world, offset + i)) << ReduceOpName(op);
        }
      }
    });
  }
}

TEST(CommGloo, BroadcastFromEveryRootAndBarrier) {
  for (int world = 1; world <= 4; ++world) {
    Comms comms = MakeGroup(world);
    OnRanks(comms, [&](int r, Communicator& c) {
      for (int root = 0; root < world; ++root) {
        std::vector<int32_t> buf(1000, r == root ? 0 : -1);
        if (r == root) std::iota(buf.begin(), buf.end(), root * 5);
        Status s = c.Broadcast(buf.data(), buf.size(), DType::kInt32, root);
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (size_t i = 0; i < buf.size(); i += 37)
          EXPECT_EQ(buf[i], root * 5 + static_cast<int32_t>(i));
        ASSERT_TRUE(c.Barrier().ok());
      }
    });
  }
}

TEST(CommGloo, InvalidArgumentsAreRejectedWithoutPoisoning) {
  Comms comms = MakeGroup(2);
  OnRanks(comms, [&](int, Communicator& c) {
    float x = 1.0f;
    std::vector<size_t> three(3, 1), two(2, 1);
    Status s = c.AllReduce(nullptr, &x, 1, DType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("send"), std::string::npos);
    EXPECT_EQ(c.AllReduce(&x, &x, 1, static_cast<DType>(99), ReduceOp::kSum).code(),
              Code::kInvalidArgument);
    EXPECT_EQ(c.AllReduce(&x, &x, 1, DType::kFloat32, static_cast<ReduceOp>(7)).code(),
              Code::kInvalidArgument);
    s = c.AllToAllV(&x, three, &x, two, DType::kFloat32);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("send_counts"), std::string::npos);
    s = c.Broadcast(&x, 1, DType::kFloat32, 2);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("root"), std::string::npos);
    EXPECT_EQ(c.AllGatherV(&x, 5, &x, two, DType::kFloat32).code(), Code::kInvalidArgument);
    CallOptions negative;
    negative.timeout = std::chrono::milliseconds(-1);
    EXPECT_EQ(c.Barrier(negative).code(), Code::kInvalidArgument);
    EXPECT_TRUE(c.AsyncError().ok());
    EXPECT_TRUE(c.AllReduce(&x, &x, 1, DType::kFloat32, ReduceOp::kSum).ok());  // still usable
  });
}

TEST(CommGloo, FactoryRejectsBadArgumentsAndMissingDevices) {
  std::unique_ptr<Communicator> c;
  auto store = std::make_shared<MemoryStore>();
  CommOptions opts;
  EXPECT_EQ(CreateCommunicator(store, "x", 0, 0, opts, &c).code(), Code::kInvalidArgument);
  EXPECT_EQ(CreateCommunicator(store, "x", 2, 2, opts, &c).code(), Code::kInvalidArgument);
  EXPECT_EQ(CreateCommunicator(nullptr, "x", 1, 0, opts, &c).code(), Code::kInvalidArgument);
  opts.timeout = std::chrono::milliseconds(-5);
  EXPECT_EQ(CreateCommunicator(store, "x", 1, 0, opts, &c).code(), Code::kInvalidArgument);
  opts.timeout = std::chrono::milliseconds(0);
  opts.device = Device::Cuda(0);
  opts.backend = Backend::kGloo;  // staged CPU engine: needs the CUDA runtime at creation
  // No GPU here: "no device" where the plugin is built, "unsupported" in a build without CUDA.
  const Code no_gpu = SHARDREC_HAVE_CUDA ? Code::kNoDevice : Code::kUnsupported;
  EXPECT_EQ(CreateCommunicator(store, "x", 1, 0, opts, &c).code(), no_gpu);
  opts.backend = Backend::kAuto;  // would be NCCL: the device check comes first
  Status s = CreateCommunicator(store, "y", 1, 0, opts, &c);
  EXPECT_EQ(s.code(), no_gpu) << s.ToString();
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s.message();
  opts.device = Device::Host();
  opts.backend = Backend::kNccl;
  EXPECT_EQ(CreateCommunicator(store, "z", 1, 0, opts, &c).code(), Code::kInvalidArgument);
  EXPECT_EQ(c, nullptr);
  std::vector<std::unique_ptr<Communicator>> group;
  EXPECT_EQ(CreateLocalGroup(0, CommOptions{}, &group).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace shardrec::comm
