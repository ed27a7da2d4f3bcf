// The communication worker: FIFO order, status and exception propagation, draining on
// destruction, and collectives running on the worker while the caller computes.
#include "impl/comm/work.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

using testutil::Comms;
using testutil::MakeGroup;
using testutil::OnRanks;

TEST(CommWork, RunsInSubmissionOrder) {
  CommWorker worker;
  std::vector<int> order;
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 50; ++i) {
    works.push_back(worker.Submit([&order, i] {
      order.push_back(i);
      return Status::Ok();
    }));
  }
  for (auto& w : works) EXPECT_TRUE(w->Wait().ok());
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
}

TEST(CommWork, ReturnsTheOperationsStatusEveryTime) {
  CommWorker worker;
  auto w = worker.Submit([] { return Status::Timeout("peer 3 did not answer"); });
  Status s = w->Wait();
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(s.message(), "peer 3 did not answer");
  EXPECT_TRUE(w->Done());
  EXPECT_EQ(w->Wait().code(), Code::kTimeout);
}

TEST(CommWork, ExceptionsBecomeStatuses) {
  CommWorker worker;
  auto a = worker.Submit([]() -> Status { throw StatusError(Status::Remote("rank 1 died")); });
  auto b = worker.Submit([]() -> Status { throw std::runtime_error("boom"); });
  auto c = worker.Submit([] { return Status::Ok(); });
  EXPECT_EQ(a->Wait().code(), Code::kRemote);
  Status sb = b->Wait();
  EXPECT_EQ(sb.code(), Code::kInternal);
  EXPECT_NE(sb.message().find("boom"), std::string::npos);
  EXPECT_TRUE(c->Wait().ok()) << "the worker keeps running after a failed operation";
}

TEST(CommWork, DestructionRunsEveryQueuedOperation) {
  std::atomic<int> ran{0};
  std::vector<std::shared_ptr<Work>> works;
  {
    CommWorker worker;
    for (int i = 0; i < 20; ++i) {
      works.push_back(worker.Submit([&ran] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ran.fetch_add(1);
        return Status::Ok();
      }));
    }
  }
  EXPECT_EQ(ran.load(), 20);
  for (auto& w : works) EXPECT_TRUE(w->Done());
}

TEST(CommWork, CollectivesOverlapTheCallersWork) {
  Comms comms = MakeGroup(3);
  ASSERT_EQ(comms.size(), 3u);
  OnRanks(comms, [](int rank, Communicator& comm) {
    CommWorker worker;
    std::vector<float> buf(1000, static_cast<float>(rank + 1));
    auto w = worker.Submit([&] {
      return comm.AllReduce(buf.data(), buf.data(), buf.size(), DType::kFloat32, ReduceOp::kSum);
    });
    // The caller is free while the collective runs on the worker.
    double local = 0;
    for (int i = 0; i < 1000; ++i) local += i;
    EXPECT_EQ(local, 499500.0);
    ASSERT_TRUE(w->Wait().ok());
    for (float v : buf) ASSERT_EQ(v, 6.0f);
  });
}

}  // namespace
}  // namespace shardrec::comm
