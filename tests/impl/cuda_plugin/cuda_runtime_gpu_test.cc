// GPU tests of the plugin's CudaRuntime: allocation, copies in every direction, memset, pinned
// host memory and argument checks. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "tests/impl/cuda_plugin/gpu_test_util.h"

namespace shardrec {
namespace {

using testing::GpuRuntime;

TEST(CoreCudaRuntimeCuda, CopyRoundTripThroughDeviceAndPinnedMemory) {
  SR_SKIP_WITHOUT_GPU();
  const core::CudaRuntime* rt = GpuRuntime();
  constexpr size_t kN = 1 << 16;
  std::vector<float> host(kN);
  std::iota(host.begin(), host.end(), 0.5f);

  void* a = nullptr;
  void* b = nullptr;
  void* pinned = nullptr;
  ASSERT_TRUE(rt->Malloc(0, kN * sizeof(float), &a).ok());
  ASSERT_TRUE(rt->Malloc(0, kN * sizeof(float), &b).ok());
  ASSERT_TRUE(rt->MallocHost(kN * sizeof(float), &pinned).ok());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(pinned, nullptr);

  EXPECT_TRUE(
      rt->MemcpyAsync(0, a, host.data(), kN * sizeof(float), core::CopyKind::kHostToDevice, nullptr)
          .ok());
  EXPECT_TRUE(
      rt->MemcpyAsync(0, b, a, kN * sizeof(float), core::CopyKind::kDeviceToDevice, nullptr).ok());
  // Zero the first quarter of the copy: bytes 0 make float 0.0f.
  EXPECT_TRUE(rt->MemsetAsync(0, b, 0, kN / 4 * sizeof(float), nullptr).ok());
  EXPECT_TRUE(
      rt->MemcpyAsync(0, pinned, b, kN * sizeof(float), core::CopyKind::kDefault, nullptr).ok());
  ASSERT_TRUE(rt->StreamWait(0, nullptr, testing::kStreamWaitMs).ok());

  const float* back = static_cast<const float*>(pinned);
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_EQ(back[i], i < kN / 4 ? 0.0f : host[i]) << "at " << i;
  }
  EXPECT_TRUE(rt->Free(0, a).ok());
  EXPECT_TRUE(rt->Free(0, b).ok());
  EXPECT_TRUE(rt->FreeHost(pinned).ok());
}

TEST(CoreCudaRuntimeCuda, BadArgumentsAreRejected) {
  SR_SKIP_WITHOUT_GPU();
  const core::CudaRuntime* rt = GpuRuntime();
  const int count = rt->DeviceCount();
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(rt->Malloc(count, 16, &p).code(), Code::kInvalidArgument);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(rt->Malloc(-1, 16, &p).code(), Code::kInvalidArgument);
  EXPECT_EQ(rt->Malloc(0, 16, nullptr).code(), Code::kInvalidArgument);
  EXPECT_TRUE(rt->Malloc(0, 0, &p).ok());
  EXPECT_EQ(p, nullptr);
  EXPECT_TRUE(rt->Free(0, nullptr).ok());
  EXPECT_TRUE(rt->FreeHost(nullptr).ok());
  EXPECT_EQ(rt->MemcpyAsync(0, nullptr, &p, 8, core::CopyKind::kDefault, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(rt->MemsetAsync(0, nullptr, 0, 8, nullptr).code(), Code::kInvalidArgument);
  EXPECT_TRUE(rt->MemcpyAsync(0, nullptr, nullptr, 0, core::CopyKind::kDefault, nullptr).ok());
}

TEST(CoreCudaRuntimeCuda, HugeAllocationIsOutOfMemory) {
  SR_SKIP_WITHOUT_GPU();
  void* p = nullptr;
  const Status s = GpuRuntime()->Malloc(0, size_t{1} << 50, &p);  // 1 PiB
  EXPECT_EQ(s.code(), Code::kOutOfMemory) << s.ToString();
  EXPECT_EQ(p, nullptr);
  // The failure leaves the runtime usable.
  EXPECT_TRUE(GpuRuntime()->Malloc(0, 64, &p).ok());
  EXPECT_TRUE(GpuRuntime()->Free(0, p).ok());
}

}  // namespace
}  // namespace shardrec
