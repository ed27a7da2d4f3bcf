// Shared pieces of the GPU collection C API tests, which run on the CPU through the fake
// embedding plugin (SHARDREC_CUDA_PLUGIN, set by ctest) and on a GPU through the real plugin:
// whether they can run here, the collection options, bit equality, and the fake's hooks.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shardrec/device.h"
#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {

inline bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline shardrec_embedding_options_t Options(const Scenario& s, bool cuda,
                                            int32_t device_index = 0) {
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.seed = s.seed;
  if (cuda) {
    o.device_type = SHARDREC_DEVICE_CUDA;
    o.device_index = device_index;
  }
  return o;
}

// A symbol of the fake plugin the library loaded, or null when the loaded plugin (if any) is not
// the fake. The library loads the plugin on the first GPU request.
inline void* FakeSymbol(const char* name) {
  (void)shardrec_device_check(SHARDREC_DEVICE_CUDA, 0);
  const char* path = std::getenv("SHARDREC_CUDA_PLUGIN");
  void* h = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (h == nullptr) return nullptr;
  void* sym = dlsym(h, name);
  dlclose(h);  // NOLOAD: the library's reference keeps it loaded
  return sym;
}

inline bool FakeLoaded() { return FakeSymbol("shardrec_fake_embedding_calls") != nullptr; }

// Makes the fake's next host/device copy after `n` successful ones fail (-1 disarms); false when
// the fake is not loaded.
inline bool FakeFailCopyAfter(int64_t n) {
  auto fn = reinterpret_cast<void (*)(int64_t)>(FakeSymbol("shardrec_fake_fail_copy_after"));
  if (fn == nullptr) return false;
  fn(n);
  return true;
}

// Empty when the tests can run: the fake is loaded, or another plugin (the real one: the gpu
// registration) with a usable device. SHARDREC_TEST_EXPECT_FAKE (the CPU registration) demands
// the fake.
inline std::string WhyNotRunnable() {
  if (FakeLoaded()) return "";
  if (std::getenv("SHARDREC_TEST_EXPECT_FAKE") != nullptr)
    return "SHARDREC_CUDA_PLUGIN does not name the fake embedding plugin (run through ctest)";
  if (shardrec_device_check(SHARDREC_DEVICE_CUDA, 0) != SHARDREC_OK)
    return std::string("no usable CUDA device: ") + shardrec_last_error();
  return "";
}

}  // namespace shardrec::testing

// At the start of every test: fails where the fake should be loaded and is not, skips where
// there is no device.
#define REQUIRE_DEVICE()                                                                          \
  do {                                                                                            \
    const std::string why = ::shardrec::testing::WhyNotRunnable();                                \
    if (!why.empty() && std::getenv("SHARDREC_TEST_EXPECT_FAKE") == nullptr) GTEST_SKIP() << why; \
    ASSERT_TRUE(why.empty()) << why;                                                              \
  } while (0)
