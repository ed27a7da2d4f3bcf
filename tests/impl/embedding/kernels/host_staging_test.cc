// embedding::HostStaging over core::PinnedBuffer: pinned through the plugin when it can be (one
// pinned allocation per growth, none while it fits), pageable otherwise.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "impl/embedding/device_copy.h"
#include "tests/impl/embedding/kernels/fake_device_buffers.h"

namespace shardrec::embedding {
namespace {

// A build without CUDA loads no plugin at all, so there is nothing to pin through; the pageable
// fallback is collection_device_test.cc's.
using kernels::testing::FakePlugin;

// The fake's count of pinned host allocations (its shardrec_fake_runtime_calls(4)).
int64_t FakePinnedAllocs() {
  const char* path = std::getenv("SHARDREC_CUDA_PLUGIN");
  void* h = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (h == nullptr) return -1;
  auto fn = reinterpret_cast<int64_t (*)(int32_t)>(dlsym(h, "shardrec_fake_runtime_calls"));
  const int64_t n = fn != nullptr ? fn(4) : -1;
  dlclose(h);
  return n;
}

TEST(HostStaging, PinsThroughThePluginAndGrowsOnly) {
  SHARDREC_REQUIRE_DEVICE();
  if (!FakePlugin()) GTEST_SKIP() << "pinned allocations are counted by the fake plugin";
  const int64_t before = FakePinnedAllocs();
  ASSERT_GE(before, 0);
  HostStaging s;
  EXPECT_EQ(s.bytes(), 0u);
  ASSERT_TRUE(s.Reserve(Device::Cuda(0), 1000).ok());
  EXPECT_TRUE(s.pinned());
  EXPECT_GE(s.bytes(), 1000u);
  std::memset(s.data(), 1, 1000);
  uint8_t* first = s.data();
  ASSERT_TRUE(s.Reserve(Device::Cuda(0), 500).ok());
  EXPECT_EQ(s.data(), first);
  EXPECT_EQ(FakePinnedAllocs() - before, 1);
  ASSERT_TRUE(s.Reserve(Device::Cuda(0), 4000).ok());
  EXPECT_TRUE(s.pinned());
  EXPECT_GE(s.bytes(), 4000u);
  std::memset(s.data(), 2, 4000);
  EXPECT_EQ(FakePinnedAllocs() - before, 2);
}

// The fake's count of pinned allocations made without naming a device (host_alloc).
int64_t FakeBareAllocs() {
  const char* path = std::getenv("SHARDREC_CUDA_PLUGIN");
  void* h = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (h == nullptr) return -1;
  auto fn = reinterpret_cast<int64_t (*)()>(dlsym(h, "shardrec_fake_host_allocs_without_device"));
  const int64_t n = fn != nullptr ? fn() : -1;
  dlclose(h);
  return n;
}

// Staging for a CUDA device pins with that device current (host_alloc_on, refused by the fake for
// a device it does not have); staging for the host names none.
TEST(HostStaging, PinsWithTheCopysDeviceCurrent) {
  SHARDREC_REQUIRE_DEVICE();
  if (!FakePlugin()) GTEST_SKIP() << "bare pinned allocations are counted by the fake plugin";
  const int64_t before = FakeBareAllocs();
  ASSERT_GE(before, 0);
  HostStaging on_device;
  ASSERT_TRUE(on_device.Reserve(Device::Cuda(0), 256).ok());
  EXPECT_TRUE(on_device.pinned());
  EXPECT_EQ(FakeBareAllocs(), before);
  HostStaging elsewhere;
  ASSERT_TRUE(elsewhere.Reserve(Device::Cuda(7), 256).ok());  // pinning refused: pageable
  EXPECT_FALSE(elsewhere.pinned());
  EXPECT_EQ(FakeBareAllocs(), before);
  HostStaging host;
  ASSERT_TRUE(host.Reserve(Device::Host(), 256).ok());
  EXPECT_EQ(FakeBareAllocs(), before + 1);
}
}  // namespace
}  // namespace shardrec::embedding
