// core::PinnedBuffer's failure and release contract against a runtime whose pinned allocations
// the test controls: every failed Reserve leaves the buffer empty with the old block freed, a
// plugin that reports success without a block is an error, and Release frees through the runtime
// that gave the block.
#include "impl/core/pinned_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>

#include "impl/core/cuda_plugin.h"

namespace shardrec::core {
namespace {

// What the controlled runtime's host_alloc does next.
enum class Next { kGive, kFail, kGiveNull };
Next next = Next::kGive;
std::set<void*> live;  // blocks given and not freed
int frees = 0;

int32_t HostAlloc(size_t bytes, void** out, shardrec_plugin_status_t* st) {
  st->code = 0;
  st->message[0] = '\0';
  *out = nullptr;
  if (next == Next::kFail) {
    st->code = static_cast<int32_t>(Code::kOutOfMemory);
    std::strcpy(st->message, "test: no pinned memory");
    return st->code;
  }
  if (next == Next::kGiveNull) return 0;
  *out = new uint8_t[bytes];
  live.insert(*out);
  return 0;
}

int32_t HostFree(void* p, shardrec_plugin_status_t* st) {
  st->code = 0;
  st->message[0] = '\0';
  ++frees;
  live.erase(p);
  delete[] static_cast<uint8_t*>(p);
  return 0;
}

class CorePinnedBuffer : public ::testing::Test {
 protected:
  void SetUp() override {
    next = Next::kGive;
    live.clear();
    frees = 0;
    table_.host_alloc = &HostAlloc;
    table_.host_free = &HostFree;
  }
  shardrec_cuda_plugin_table_t table_{};
  CudaRuntime cuda_{&table_, 1};
};

TEST_F(CorePinnedBuffer, GrowsOnlyAndReleasesThroughItsRuntime) {
  PinnedBuffer b;
  EXPECT_EQ(b.data(), nullptr);
  ASSERT_TRUE(b.Reserve(64, cuda_).ok());
  void* first = b.data();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(b.bytes(), 64u);
  ASSERT_TRUE(b.Reserve(32, cuda_).ok());  // fits: same block
  EXPECT_EQ(b.data(), first);
  ASSERT_TRUE(b.Reserve(128, cuda_).ok());  // grows: the old block is freed
  EXPECT_EQ(b.bytes(), 128u);
  EXPECT_EQ(frees, 1);
  EXPECT_EQ(live.size(), 1u);
  b.Release();
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_TRUE(live.empty());
  b.Release();  // twice is harmless
  EXPECT_EQ(frees, 2);
}

TEST_F(CorePinnedBuffer, AFailedAllocationLeavesItEmpty) {
  PinnedBuffer b;
  ASSERT_TRUE(b.Reserve(64, cuda_).ok());
  next = Next::kFail;
  const Status s = b.Reserve(128, cuda_);
  EXPECT_EQ(s.code(), Code::kOutOfMemory) << s.ToString();
  EXPECT_NE(s.message().find("no pinned memory"), std::string::npos) << s.ToString();
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_TRUE(live.empty()) << "the old block is freed, not kept";
  next = Next::kGive;
  ASSERT_TRUE(b.Reserve(16, cuda_).ok());  // usable again
  EXPECT_NE(b.data(), nullptr);
}

TEST_F(CorePinnedBuffer, SuccessWithoutABlockIsAnError) {
  PinnedBuffer b;
  ASSERT_TRUE(b.Reserve(64, cuda_).ok());
  next = Next::kGiveNull;
  const Status s = b.Reserve(128, cuda_);
  EXPECT_EQ(s.code(), Code::kOutOfMemory) << s.ToString();
  EXPECT_NE(s.message().find("no block of 128 bytes"), std::string::npos) << s.ToString();
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_TRUE(live.empty());
  // An empty buffer's Reserve(0) is no request: it succeeds without a block.
  EXPECT_TRUE(b.Reserve(0, cuda_).ok());
}

TEST_F(CorePinnedBuffer, AFailedRuntimeLookupLeavesItEmpty) {
  const CudaRuntime* process = nullptr;
  // core_test runs without a usable plugin (no GPU, or no SHARDREC_CUDA_PLUGIN); on a machine
  // with one the lookup succeeds and there is no failure to observe.
  if (GetCudaRuntime(&process).ok()) GTEST_SKIP() << "this process has a CUDA runtime";
  PinnedBuffer b;
  ASSERT_TRUE(b.Reserve(64, cuda_).ok());
  const Status s = b.Reserve(128);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_TRUE(live.empty()) << "the old block is freed through the runtime that gave it";
}

}  // namespace
}  // namespace shardrec::core
