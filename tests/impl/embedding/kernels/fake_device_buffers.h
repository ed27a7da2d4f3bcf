// Device buffers for the dispatch tests: allocated through the loaded plugin's runtime and filled
// / read back with its stream-ordered copies, as collection code would. Under the fake embedding
// plugin they are its registered device blocks; under the real plugin (the GPU registration of the
// same tests) they are CUDA device memory.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "impl/core/cuda_plugin.h"
#include "impl/core/exec.h"

namespace shardrec::embedding::kernels::testing {

inline constexpr const char* kFakePath = "/fake/embedding/libshardrec_cuda.so";
inline constexpr int64_t kWaitMs = 10000;

inline ExecContext DeviceCtx() { return ExecContext::Cuda(0, nullptr); }

// Whether the loaded plugin is the fake (whose refusals of host pointers the tests check; the
// real plugin would fault on them instead).
inline bool FakePlugin() {
  std::string path;
  return core::GetCudaPluginPath(&path).ok() && path == kFakePath;
}

// Empty when the tests can run: the fake is loaded, or another plugin (the real one: the GPU
// registration, .ci/gpu-check) with a usable CUDA device. Otherwise the reason.
inline std::string WhyNotRunnable() {
  if (FakePlugin()) return "";
  if (std::getenv("SHARDREC_TEST_EXPECT_FAKE") != nullptr)
    return "SHARDREC_CUDA_PLUGIN does not name the fake embedding plugin (run through ctest)";
  const core::CudaRuntime* rt = nullptr;
  const Status s = core::GetCudaRuntime(&rt);
  return s.ok() ? "" : "no usable CUDA device: " + s.ToString();
}

// At the start of a test: fails it where the fake should be loaded and is not
// (SHARDREC_TEST_EXPECT_FAKE, the CPU registration), skips it where there is no device.
#define SHARDREC_REQUIRE_DEVICE()                                                                 \
  do {                                                                                            \
    const std::string why = ::shardrec::embedding::kernels::testing::WhyNotRunnable();            \
    if (!why.empty() && std::getenv("SHARDREC_TEST_EXPECT_FAKE") == nullptr) GTEST_SKIP() << why; \
    ASSERT_TRUE(why.empty()) << why;                                                              \
  } while (0)

// Owns device blocks; frees them when destroyed.
class DeviceArena {
 public:
  DeviceArena() {
    const Status s = core::GetCudaRuntime(&rt_);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  ~DeviceArena() {
    for (void* p : blocks_) (void)rt_->Free(0, p);
  }
  bool ok() const { return rt_ != nullptr; }

  void* Alloc(size_t bytes) {
    void* p = nullptr;
    const Status s = rt_->Malloc(0, bytes, &p);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (p != nullptr) blocks_.push_back(p);
    return p;
  }
  // Waits for the stream (a count copied to the host by GroupRows lands when it gets there).
  bool Sync() {
    const Status s = rt_->StreamWait(0, nullptr, kWaitMs);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return s.ok();
  }
  // Frees one block early (to test use after free).
  void FreeNow(void* p) {
    EXPECT_TRUE(rt_->Free(0, p).ok());
    std::erase(blocks_, p);
  }

  template <class T>
  T* Upload(const std::vector<T>& v) {
    if (v.empty()) return nullptr;
    auto* d = static_cast<T*>(Alloc(v.size() * sizeof(T)));
    // Waited for: callers pass temporaries, and a deferred copy must not read them after return.
    Status s = rt_->MemcpyAsync(0, d, v.data(), v.size() * sizeof(T), core::CopyKind::kHostToDevice,
                                nullptr);
    if (s.ok()) s = rt_->StreamWait(0, nullptr, kWaitMs);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return d;
  }
  template <class T>
  std::vector<T> Download(const T* d, size_t n) {
    std::vector<T> v(n);
    if (n == 0) return v;
    Status s =
        rt_->MemcpyAsync(0, v.data(), d, n * sizeof(T), core::CopyKind::kDeviceToHost, nullptr);
    if (s.ok()) s = rt_->StreamWait(0, nullptr, kWaitMs);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return v;
  }

 private:
  const core::CudaRuntime* rt_ = nullptr;
  std::vector<void*> blocks_;
};

template <class T>
::testing::AssertionResult SameBits(const std::vector<T>& a, const std::vector<T>& b,
                                    const std::string& what) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure()
             << what << "[" << i << "] differs: host " << +a[i] << " device " << +b[i];
  }
  return ::testing::AssertionSuccess();
}

}  // namespace shardrec::embedding::kernels::testing
