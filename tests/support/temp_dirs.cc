// Test directories removed after the last test (temp_dirs.h).
#include "tests/support/temp_dirs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <vector>

namespace shardrec::testing {
namespace {

// The directories FreshDir made (a CI run's checkpoint tests made about 330). A gtest
// environment, so only the process that runs the tests tears it down.
class MadeDirs : public ::testing::Environment {
 public:
  static MadeDirs& Get() {
    // Owned by gtest once registered.
    static MadeDirs* dirs =
        static_cast<MadeDirs*>(::testing::AddGlobalTestEnvironment(new MadeDirs));
    return *dirs;
  }
  void Add(const std::filesystem::path& p) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(p);
  }
  void TearDown() override {
    std::error_code ignored;
    for (const auto& p : dirs_) std::filesystem::remove_all(p, ignored);
  }

 private:
  std::mutex mu_;
  std::vector<std::filesystem::path> dirs_;
};

}  // namespace

std::string FreshDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  namespace fs = std::filesystem;
  const fs::path p =
      fs::path(::testing::TempDir()) /
      ("shardrec_test_" + std::to_string(::getpid()) + "_" + tag + "_" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  MadeDirs::Get().Add(p);
  return p.string();
}

}  // namespace shardrec::testing
