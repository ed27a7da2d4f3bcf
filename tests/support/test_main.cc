// Shared gtest main: ignores SIGPIPE so a test whose peer dies cannot kill the test process.
// A binary that needs hardware this machine lacks defines shardrec_test_skip_reason(); when it
// returns a reason, the binary exits with 77, which ctest reports as "skipped" (the tests set
// SKIP_RETURN_CODE 77) instead of a pass that ran nothing.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>

extern "C" __attribute__((weak)) const char* shardrec_test_skip_reason();

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  ::testing::InitGoogleTest(&argc, argv);
  if (shardrec_test_skip_reason != nullptr) {
    if (const char* why = shardrec_test_skip_reason(); why != nullptr) {
      std::printf("SKIPPED: %s\n", why);
      return 77;
    }
  }
  return RUN_ALL_TESTS();
}
