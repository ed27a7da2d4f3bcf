// The NCCL communicator's control flow against the DeviceApi double: init timeouts, the
// completion watchdog, asynchronous errors, aborts from other threads, poisoning, device choice
// without stray contexts, bounded stream waits, and which NCCL calls the collectives issue.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "impl/cuda_plugin/nccl_communicator.h"
#include "impl/cuda_plugin/runtime_services.h"
#include "tests/impl/cuda_plugin/device_api_double.h"

namespace shardrec {
namespace {

using cuda_plugin::NcclCommunicator;
using testing::Fake;
using testing::FakeDeviceApi;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class NcclDouble : public ::testing::Test {
 protected:
  void SetUp() override {
    Fake().Reset();
    testing::FakeThread("test", /*has_context=*/false);
  }

  std::unique_ptr<NcclCommunicator> Make(milliseconds timeout, int device = 0,
                                         Status* status = nullptr) {
    std::unique_ptr<NcclCommunicator> c;
    ncclUniqueId id{};
    const Status s = NcclCommunicator::Create(FakeDeviceApi(), id, 1, 0, device, timeout, &c);
    if (status != nullptr) *status = s;
    return c;
  }
};

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

TEST_F(NcclDouble, InitThatNeverCompletesTimesOutAndAborts) {
  Fake().init_completes = false;
  Status s;
  const auto start = Clock::now();
  auto c = Make(milliseconds(300), 0, &s);
  const double took = Seconds(Clock::now() - start);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "300 ms")) << s.message();
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 1.5);
  EXPECT_EQ(Fake().aborts.load(), 1);
}

TEST_F(NcclDouble, InitErrorIsRemoteAndAborts) {
  Fake().init_completes = false;
  Fake().init_error = ncclSystemError;
  Status s;
  auto c = Make(milliseconds(5000), 0, &s);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(s.code(), Code::kRemote) << s.ToString();
  EXPECT_EQ(Fake().aborts.load(), 1);
}

TEST_F(NcclDouble, CompletedCollectivesAreRetiredAndEventsReused) {
  auto c = Make(milliseconds(5000));
  ASSERT_NE(c, nullptr);
  float x = 1.0f, y = 0.0f;
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(c->AllReduce(&x, &y, 1, DType::kFloat32, comm::ReduceOp::kSum, {}).ok());
  }
  const auto until = Clock::now() + milliseconds(2000);
  while (c->PendingForTest() > 0 && Clock::now() < until) std::this_thread::yield();
  EXPECT_EQ(c->PendingForTest(), 0u);
  EXPECT_LT(Fake().events_created.load(), 50) << "events are pooled, not one per collective";
  EXPECT_TRUE(c->AsyncError().ok());
  c.reset();
  EXPECT_EQ(Fake().aborts.load(), 0);
  EXPECT_EQ(Fake().finalizes.load(), 1);
  EXPECT_EQ(Fake().destroys.load(), 1);
}

TEST_F(NcclDouble, WatchdogAbortsACollectiveThatNeverCompletes) {
  Fake().work_completes = false;  // the peer died after the enqueue
  auto c = Make(milliseconds(300));
  ASSERT_NE(c, nullptr);
  float x = 1.0f, y = 0.0f;
  const auto start = Clock::now();
  // Enqueueing succeeds: the collective is asynchronous on the stream.
  ASSERT_TRUE(c->AllReduce(&x, &y, 1, DType::kFloat32, comm::ReduceOp::kSum, {}).ok());
  while (Fake().aborts.load() == 0 && Clock::now() - start < milliseconds(5000)) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  const double took = Seconds(Clock::now() - start);
  EXPECT_EQ(Fake().aborts.load(), 1);
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 1.5) << "the survivor must learn within its timeout";
  const Status err = c->AsyncError();
  EXPECT_EQ(err.code(), Code::kTimeout) << err.ToString();
  EXPECT_TRUE(Contains(err.message(), "allreduce")) << err.message();
  const Status next = c->AllReduce(&x, &y, 1, DType::kFloat32, comm::ReduceOp::kSum, {});
  EXPECT_EQ(next.code(), Code::kInvalidUsage) << next.ToString();
  EXPECT_TRUE(Contains(next.message(), "did not complete within")) << next.message();
  c.reset();  // destruction after a poison aborts (already done) instead of finalizing
  EXPECT_EQ(Fake().finalizes.load(), 0);
}

TEST_F(NcclDouble, AsynchronousErrorIsSeenBeforeTheTimeout) {
  Fake().work_completes = false;
  auto c = Make(milliseconds(20000));
  ASSERT_NE(c, nullptr);
  float x = 1.0f;
  ASSERT_TRUE(c->Broadcast(&x, 1, DType::kFloat32, 0, {}).ok());
  const auto start = Clock::now();
  Fake().async_error = ncclRemoteError;
  while (Fake().aborts.load() == 0 && Clock::now() - start < milliseconds(5000)) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  EXPECT_LT(Seconds(Clock::now() - start), 1.0);
  EXPECT_EQ(c->AsyncError().code(), Code::kRemote);
}

TEST_F(NcclDouble, AbortFromAnotherThreadReleasesABlockedBarrier) {
  Fake().work_completes = false;
  auto c = Make(milliseconds(30000));
  ASSERT_NE(c, nullptr);
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    c->Abort();
  });
  const auto start = Clock::now();
  const Status s = c->Barrier({});
  aborter.join();
  EXPECT_FALSE(s.ok());
  EXPECT_LT(Seconds(Clock::now() - start), 5.0);
  EXPECT_EQ(c->AllReduce(nullptr, nullptr, 0, DType::kFloat32, comm::ReduceOp::kSum, {}).code(),
            Code::kInvalidUsage);
}

TEST_F(NcclDouble, BarrierIsBoundedByItsTimeout) {
  Fake().work_completes = false;
  auto c = Make(milliseconds(30000));
  ASSERT_NE(c, nullptr);
  comm::CallOptions o;
  o.timeout = milliseconds(250);
  const auto start = Clock::now();
  const Status s = c->Barrier(o);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_LT(Seconds(Clock::now() - start), 2.0);
}

TEST_F(NcclDouble, NonBlockingEnqueueInProgressIsWaitedAndThenWatched) {
  auto c = Make(milliseconds(5000));
  ASSERT_NE(c, nullptr);
  Fake().enqueue_in_progress = true;
  float x = 1.0f, y = 0.0f;
  EXPECT_TRUE(c->AllReduce(&x, &y, 1, DType::kFloat32, comm::ReduceOp::kSum, {}).ok());
  EXPECT_FLOAT_EQ(y, 1.0f);
}

TEST_F(NcclDouble, SplitWhoseChildNeverInitialisesTimesOutAndPoisonsTheParent) {
  auto c = Make(milliseconds(300));
  ASSERT_NE(c, nullptr);
  Fake().init_completes = false;
  std::unique_ptr<comm::Communicator> child;
  const Status s = c->Split(0, 0, &child);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_EQ(child, nullptr);
  EXPECT_FALSE(c->AsyncError().ok());
}

TEST_F(NcclDouble, EqualBlocksUseNativeAllToAllOthersGroupedSendRecv) {
  auto c = Make(milliseconds(5000));
  ASSERT_NE(c, nullptr);
  std::vector<float> send(4, 1.0f), recv(4, 0.0f);
  const size_t four[] = {4};
  ASSERT_TRUE(c->AllToAllV(send.data(), four, recv.data(), four, DType::kFloat32, {}).ok());
  EXPECT_EQ(Fake().all_to_all.load(), 1);
  EXPECT_EQ(Fake().sends.load(), 0);
}

TEST_F(NcclDouble, ThreadWithoutContextNeverTouchesDeviceZero) {
  // A rank process's thread that never used CUDA: the communicator lives on cuda:2.
  testing::FakeThread("fresh", /*has_context=*/false);
  {
    auto c = Make(milliseconds(5000), 2);
    ASSERT_NE(c, nullptr);
    float x = 1.0f, y = 0.0f;
    ASSERT_TRUE(c->AllReduce(&x, &y, 1, DType::kFloat32, comm::ReduceOp::kSum, {}).ok());
  }
  std::lock_guard<std::mutex> lock(Fake().mu);
  for (int d : Fake().set_device_calls["fresh"]) EXPECT_EQ(d, 2) << "a context on cuda:" << d;
  EXPECT_FALSE(Fake().set_device_calls["fresh"].empty());
}

// The plugin's streams (a GPU collection's step stream) are non-blocking: they do not serialise
// with the legacy default stream.
TEST_F(NcclDouble, PluginStreamsAreNonBlocking) {
  void* s = nullptr;
  (void)cuda_plugin::CreateStream(FakeDeviceApi(), 1, &s);  // the double refuses, after the call
  EXPECT_EQ(Fake().stream_flags.load(), static_cast<int>(cudaStreamNonBlocking));
}

// Pinned memory for a device is allocated with that device current, restored afterwards: a
// thread with no current device creates no context on cuda:0.
TEST_F(NcclDouble, PinnedMemoryOnADeviceNeverTouchesDeviceZero) {
  testing::FakeThread("pinned", /*has_context=*/false);
  void* p = nullptr;
  ASSERT_TRUE(cuda_plugin::HostAllocOn(FakeDeviceApi(), 2, 64, &p).ok());
  EXPECT_NE(p, nullptr);
  EXPECT_TRUE(cuda_plugin::HostFree(FakeDeviceApi(), p).ok());
  std::lock_guard<std::mutex> lock(Fake().mu);
  for (int d : Fake().set_device_calls["pinned"]) EXPECT_EQ(d, 2) << "a context on cuda:" << d;
  EXPECT_FALSE(Fake().set_device_calls["pinned"].empty());
}

TEST_F(NcclDouble, ThreadWithItsOwnDeviceGetsItBack) {
  testing::FakeThread("owner", /*has_context=*/true, /*device=*/3);
  auto c = Make(milliseconds(5000), 1);
  ASSERT_NE(c, nullptr);
  int now = -1;
  ASSERT_EQ(FakeDeviceApi().GetDevice(&now), cudaSuccess);
  EXPECT_EQ(now, 3);
  std::lock_guard<std::mutex> lock(Fake().mu);
  const std::vector<int>& calls = Fake().set_device_calls["owner"];
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls.front(), 1);
  EXPECT_EQ(calls.back(), 3);
}

TEST_F(NcclDouble, StreamWaitIsBounded) {
  Fake().work_completes = false;
  const auto start = Clock::now();
  const Status s = cuda_plugin::WaitStream(FakeDeviceApi(), 0, nullptr, 200);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_LT(Seconds(Clock::now() - start), 2.0);
  EXPECT_EQ(cuda_plugin::WaitStream(FakeDeviceApi(), 0, nullptr, 0).code(), Code::kInvalidArgument);
  Fake().work_completes = true;
  EXPECT_TRUE(cuda_plugin::WaitStream(FakeDeviceApi(), 0, nullptr, 200).ok());
}

TEST_F(NcclDouble, RuntimeServicesCheckDeviceIndexAndArguments) {
  void* p = nullptr;
  EXPECT_EQ(cuda_plugin::DeviceAlloc(FakeDeviceApi(), 9, 16, &p).code(), Code::kInvalidArgument);
  EXPECT_TRUE(cuda_plugin::DeviceAlloc(FakeDeviceApi(), 1, 16, &p).ok());
  EXPECT_EQ(cuda_plugin::MemcpyOnStream(FakeDeviceApi(), 1, p, nullptr, 16, 0, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(cuda_plugin::MemcpyOnStream(FakeDeviceApi(), 1, p, p, 16, 42, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(cuda_plugin::DeviceFree(FakeDeviceApi(), 1, p).ok());
}

}  // namespace
}  // namespace shardrec
