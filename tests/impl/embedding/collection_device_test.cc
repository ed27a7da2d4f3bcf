// What a collection refuses before it takes any memory, where the C API cannot reach: a device
// (NCCL) communicator of another device than a GPU collection's, or one given to a host
// collection. No plugin or GPU is needed: the refusal comes first.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/collection.h"
#include "impl/embedding/device_copy.h"
#include "impl/sharding/layout.h"

namespace shardrec::embedding {
namespace {

// A single-rank communicator that says it runs on cuda:<index>, as an NCCL one does. Its only
// working collective is the one-rank all-reduce of the creation's agreement.
class CudaLabelledComm : public comm::Communicator {
 public:
  explicit CudaLabelledComm(int index) : index_(index) {}
  int Rank() const override { return 0; }
  int Size() const override { return 1; }
  Device device() const override { return Device::Cuda(index_); }
  const char* backend() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(1000); }
  void set_timeout(std::chrono::milliseconds) override {}
  Status AllReduce(const void* send, void* recv, size_t count, DType dtype, comm::ReduceOp,
                   const comm::CallOptions&) override {
    if (send != recv) std::memcpy(recv, send, count * DTypeSize(dtype));
    return Status::Ok();
  }
  Status AllToAllV(const void*, std::span<const size_t>, void*, std::span<const size_t>, DType,
                   const comm::CallOptions&) override {
    return Unused();
  }
  Status AllGatherV(const void*, size_t, void*, std::span<const size_t>, DType,
                    const comm::CallOptions&) override {
    return Unused();
  }
  Status ReduceScatterV(const void*, void*, std::span<const size_t>, DType, comm::ReduceOp,
                        const comm::CallOptions&) override {
    return Unused();
  }
  Status Broadcast(void*, size_t, DType, int, const comm::CallOptions&) override {
    return Unused();
  }
  Status Barrier(const comm::CallOptions&) override { return Unused(); }
  Status Split(int, int, std::unique_ptr<comm::Communicator>*) override { return Unused(); }
  void Abort() override {}
  Status AsyncError() const override { return Status::Ok(); }

 private:
  static Status Unused() { return Status::Internal("not used by a refused creation"); }
  int index_;
};

std::shared_ptr<sharding::Plan> OneTablePlan() {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 1;
  plan->local_world_size = 1;
  plan->features = {{"a", 1.0f}};
  sharding::TableConfig t;
  t.name = "t";
  t.rows = 8;
  t.dim = 4;
  t.features = {0};
  plan->tables = {t};
  plan->table_plans = {sharding::MakeTableWise(plan->tables[0], 0)};
  return plan;
}

TEST(EmbeddingCollectionDevice, AGpuCollectionRefusesACommunicatorOfAnotherDevice) {
  CollectionOptions options;
  options.device = Device::Cuda(0);
  std::unique_ptr<EmbeddingCollection> out;
  const Status s = EmbeddingCollection::Create(
      OneTablePlan(), std::make_shared<CudaLabelledComm>(1), nullptr, options, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("cuda:1"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("on the collection's device"), std::string::npos) << s.ToString();
  EXPECT_EQ(out, nullptr);
}

TEST(EmbeddingCollectionDevice, AHostCollectionRefusesADeviceCommunicator) {
  std::unique_ptr<EmbeddingCollection> out;
  const Status s = EmbeddingCollection::Create(
      OneTablePlan(), std::make_shared<CudaLabelledComm>(0), nullptr, CollectionOptions{}, &out);
  EXPECT_EQ(s.code(), Code::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("host communicators only"), std::string::npos) << s.ToString();
  EXPECT_EQ(out, nullptr);
}

// Without a CUDA runtime (this test runs with no plugin named), host staging still stages, in
// pageable memory; the pinned case is host_staging_test.cc's, under the fake plugin.
TEST(HostStagingFallback, PageableWithoutARuntime) {
  const core::CudaRuntime* rt = nullptr;
  if (core::GetCudaRuntime(&rt).ok()) GTEST_SKIP() << "this process has a CUDA runtime";
  HostStaging s;
  ASSERT_TRUE(s.Reserve(Device::Cuda(0), 256).ok());
  EXPECT_FALSE(s.pinned());
  EXPECT_GE(s.bytes(), 256u);
  std::memset(s.data(), 3, 256);
  ASSERT_TRUE(s.Reserve(Device::Cuda(0), 100).ok());
  EXPECT_GE(s.bytes(), 256u);
}

}  // namespace
}  // namespace shardrec::embedding
