// Black-box tests of shardrec/device.h through libshardrec.so: device count, device checks and
// the plugin loader's behaviour without a GPU (this file runs on every machine).
#include "shardrec/device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/common.h"
#include "tests/support/fresh_process.h"

namespace {

namespace testing = shardrec::testing;

int32_t Count() {
  int32_t n = -1;
  EXPECT_EQ(shardrec_device_count(&n), SHARDREC_OK) << shardrec_last_error();
  return n;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CapiDevice, CountSucceedsAndIsStable) {
  const int32_t n = Count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(Count(), n);
  EXPECT_EQ(shardrec_device_count(nullptr), SHARDREC_EINVAL);
  EXPECT_TRUE(Contains(shardrec_last_error(), "out")) << shardrec_last_error();
}

TEST(CapiDevice, HostIsAlwaysUsable) {
  EXPECT_EQ(shardrec_device_check(SHARDREC_DEVICE_HOST, 0), SHARDREC_OK);
  EXPECT_EQ(shardrec_device_check(SHARDREC_DEVICE_HOST, 3), SHARDREC_OK);
  EXPECT_STREQ(shardrec_last_error(), "");
}

TEST(CapiDevice, BadArgumentsAreNamed) {
  EXPECT_EQ(shardrec_device_check(7, 0), SHARDREC_EINVAL);
  EXPECT_TRUE(Contains(shardrec_last_error(), "device_type 7")) << shardrec_last_error();
  EXPECT_EQ(shardrec_device_check(SHARDREC_DEVICE_CUDA, -1), SHARDREC_EINVAL);
  EXPECT_TRUE(Contains(shardrec_last_error(), "device_index")) << shardrec_last_error();
  char buf[8];
  EXPECT_EQ(shardrec_device_plugin_path(nullptr, nullptr, sizeof(buf)), SHARDREC_EINVAL);
}

TEST(CapiDevice, DeviceBeyondCountIsNoDevice) {
  const int32_t n = Count();
  const shardrec_status_t rc = shardrec_device_check(SHARDREC_DEVICE_CUDA, n);
#if SHARDREC_TEST_HAVE_CUDA
  EXPECT_EQ(rc, SHARDREC_ENODEVICE);
#else
  EXPECT_EQ(rc, SHARDREC_EUNSUPPORTED);
#endif
  EXPECT_TRUE(Contains(shardrec_last_error(), "cuda:" + std::to_string(n)))
      << shardrec_last_error();
  // The failure is cached: asking again gives the same answer.
  const std::string first = shardrec_last_error();
  EXPECT_EQ(shardrec_device_check(SHARDREC_DEVICE_CUDA, n), rc);
  EXPECT_EQ(first, shardrec_last_error());
  if (n > 0) {
    EXPECT_EQ(shardrec_device_check(SHARDREC_DEVICE_CUDA, 0), SHARDREC_OK);
  }
}

TEST(CapiDevice, PluginPathReportsWhereItWasFound) {
  size_t len = 123;
  char buf[4096];
  const shardrec_status_t rc = shardrec_device_plugin_path(&len, buf, sizeof(buf));
  const std::string message = shardrec_last_error();
#if SHARDREC_TEST_HAVE_CUDA
  if (Count() > 0) {
    ASSERT_EQ(rc, SHARDREC_OK) << message;
    EXPECT_TRUE(Contains(buf, "libshardrec_cuda.so")) << buf;
    EXPECT_EQ(len, std::string(buf).size());
    size_t needed = 0;
    EXPECT_EQ(shardrec_device_plugin_path(&needed, nullptr, 0), SHARDREC_OK);
    EXPECT_EQ(needed, len);
  } else {
    // The build tree puts the plugin next to libshardrec.so, so it loads and then finds no GPU.
    EXPECT_EQ(rc, SHARDREC_ENODEVICE);
    EXPECT_EQ(len, 0u);
    EXPECT_TRUE(Contains(message, "no CUDA device")) << message;
    EXPECT_TRUE(Contains(message, "loaded from")) << message;
    EXPECT_TRUE(Contains(message, "libshardrec_cuda.so")) << message;
  }
#else
  EXPECT_EQ(rc, SHARDREC_EUNSUPPORTED);
  EXPECT_TRUE(Contains(message, "without CUDA")) << message;
#endif
}

int BogusPluginChild() {
  const shardrec_status_t rc = shardrec_device_check(SHARDREC_DEVICE_CUDA, 0);
  const std::string message = shardrec_last_error();
  // A plugin named by SHARDREC_CUDA_PLUGIN is loaded in every build, with or without CUDA.
  if (rc != SHARDREC_ENODEVICE) return 1;
  if (!Contains(message, "/nonexistent/dir/libshardrec_cuda.so.0")) return 2;
  if (!Contains(message, "SHARDREC_CUDA_PLUGIN")) return 3;
  int32_t n = -1;
  if (shardrec_device_count(&n) != SHARDREC_OK || n != 0) return 4;
  return 0;
}

const int kBogusChild = testing::RegisterFreshChild("bogus", &BogusPluginChild);

TEST(CapiDevice, BogusPluginPathIsNoDevice) {
  EXPECT_EQ(testing::RunFresh("bogus", "/nonexistent/dir/libshardrec_cuda.so.0"), 0);
}

int ConcurrentFirstCallsChild() {
  constexpr int kThreads = 8;
  std::atomic<int> ready{0};
  std::vector<shardrec_status_t> codes(kThreads);
  std::vector<std::string> messages(kThreads);
  std::vector<int32_t> counts(kThreads, -1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      codes[t] = shardrec_device_check(SHARDREC_DEVICE_CUDA, 0);
      messages[t] = shardrec_last_error();
      if (shardrec_device_count(&counts[t]) != SHARDREC_OK) counts[t] = -1;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) {
    if (codes[t] != codes[0] || messages[t] != messages[0] || counts[t] != counts[0]) return 1;
  }
  if (counts[0] < 0) return 2;
  if ((counts[0] > 0) != (codes[0] == SHARDREC_OK)) return 3;
  return 0;
}

const int kConcurrentChild = testing::RegisterFreshChild("concurrent", &ConcurrentFirstCallsChild);

TEST(CapiDevice, ConcurrentFirstCallsAgree) {
  EXPECT_EQ(testing::RunFresh("concurrent", nullptr), 0);
}

}  // namespace
