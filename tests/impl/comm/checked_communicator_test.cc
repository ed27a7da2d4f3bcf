// The checked prologue of the host backends (checked_communicator.h), on a backend that records
// what reaches its bodies: bad arguments, a negative timeout and a poisoned communicator are
// refused before any body runs, with the shared wording; what does reach a body comes with the
// timeout resolved and the element totals summed.
#include "impl/comm/checked_communicator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shardrec::comm {
namespace {

class Recorder final : public CheckedCommunicator {
 public:
  int Rank() const override { return 1; }
  int Size() const override { return 3; }
  Device device() const override { return Device::Host(); }
  const char* backend() const override { return "recorder"; }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(777); }
  void set_timeout(std::chrono::milliseconds) override {}
  Status Split(int, int, std::unique_ptr<Communicator>*) override { return Status::Ok(); }
  void Abort() override {}
  Status AsyncError() const override { return poison; }

  Status poison;
  std::vector<std::string> bodies;
  Call last;

 protected:
  Status DoAllReduce(const void*, void*, size_t, DType, ReduceOp, const Call& c) override {
    return Record("allreduce", c);
  }
  Status DoAllToAllV(const void*, std::span<const size_t>, void*, std::span<const size_t>, DType,
                     const Call& c) override {
    return Record("alltoallv", c);
  }
  Status DoAllGatherV(const void*, size_t, void*, std::span<const size_t>, DType,
                      const Call& c) override {
    return Record("allgatherv", c);
  }
  Status DoReduceScatterV(const void*, void*, std::span<const size_t>, DType, ReduceOp,
                          const Call& c) override {
    return Record("reducescatterv", c);
  }
  Status DoBroadcast(void*, size_t, DType, int, const Call& c) override {
    return Record("broadcast", c);
  }
  Status DoBarrier(const Call& c) override { return Record("barrier", c); }

 private:
  Status Record(const char* what, const Call& c) {
    bodies.push_back(what);
    last = c;
    return Status::Ok();
  }
};

void ExpectRefused(const Status& s, const std::string& words) {
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
}

TEST(CheckedCommunicator, BadArgumentsNeverReachABody) {
  Recorder c;
  float buf[8] = {};
  const size_t three[] = {1, 2, 3};
  const size_t two[] = {1, 2};
  ExpectRefused(c.AllReduce(nullptr, buf, 4, DType::kFloat32, ReduceOp::kSum),
                "send must not be null for 4 elements");
  ExpectRefused(c.AllReduce(buf, buf, 4, DType::kFloat32, static_cast<ReduceOp>(9)),
                "reduce op 9 is not one of sum, avg, max, min");
  ExpectRefused(c.AllToAllV(buf, two, buf, three, DType::kFloat32),
                "send_counts has 2 entries, expected one per rank (3)");
  ExpectRefused(c.AllGatherV(buf, 1, buf, three, DType::kFloat32),
                "send_count 1 differs from recv_counts[1] = 2");
  ExpectRefused(c.ReduceScatterV(buf, nullptr, three, DType::kFloat32, ReduceOp::kSum),
                "recv must not be null for 2 elements");
  ExpectRefused(c.Broadcast(buf, 1, DType::kFloat32, 3), "root 3 is outside [0, 3)");
  ExpectRefused(c.Barrier({std::chrono::milliseconds(-1), nullptr}),
                "timeout -1 ms must not be negative");
  EXPECT_TRUE(c.bodies.empty());
}

TEST(CheckedCommunicator, APoisonedCommunicatorIsRefusedBeforeItsArguments) {
  Recorder c;
  c.poison = Status::Remote("peer 2 died");
  // The arguments are bad too: the communicator's state is reported first, as every host
  // backend did before the prologue was shared.
  const Status s = c.AllReduce(nullptr, nullptr, 4, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), Code::kInvalidUsage) << s.ToString();
  EXPECT_NE(s.message().find("unusable after an earlier error"), std::string::npos);
  EXPECT_TRUE(c.bodies.empty());
}

TEST(CheckedCommunicator, BodiesGetTheResolvedTimeoutAndTheTotals) {
  Recorder c;
  float buf[16] = {};
  const size_t counts[] = {1, 2, 3};
  ASSERT_TRUE(c.AllToAllV(buf, counts, buf, counts, DType::kFloat32).ok());
  EXPECT_EQ(c.last.timeout, std::chrono::milliseconds(777));  // 0: the communicator's
  EXPECT_EQ(c.last.send_total, 6u);
  EXPECT_EQ(c.last.recv_total, 6u);
  ASSERT_TRUE(c.ReduceScatterV(buf, buf + 8, counts, DType::kFloat32, ReduceOp::kSum,
                               {std::chrono::milliseconds(5), nullptr})
                  .ok());
  EXPECT_EQ(c.last.timeout, std::chrono::milliseconds(5));
  EXPECT_EQ(c.last.send_total, 6u);
  EXPECT_EQ(c.last.recv_total, 2u);  // this rank's block
  ASSERT_TRUE(c.AllGatherV(buf, 2, buf + 4, counts, DType::kFloat32).ok());
  EXPECT_EQ(c.last.send_total, 2u);
  EXPECT_EQ(c.last.recv_total, 6u);
  ASSERT_TRUE(c.Barrier().ok());
  EXPECT_EQ(c.bodies,
            (std::vector<std::string>{"alltoallv", "reducescatterv", "allgatherv", "barrier"}));
}

}  // namespace
}  // namespace shardrec::comm
