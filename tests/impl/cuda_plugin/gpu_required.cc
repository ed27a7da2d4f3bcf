// Linked into the binaries that test on a real GPU: without one they report "skipped" to ctest
// (see tests/support/test_main.cc) rather than passing with nothing run.
#include "tests/impl/cuda_plugin/gpu_test_util.h"

extern "C" const char* shardrec_test_skip_reason() {
  static std::string reason;
  if (shardrec::testing::GpuRuntime() != nullptr) return nullptr;
  reason = "no usable CUDA device: " + shardrec::testing::NoGpuReason();
  return reason.c_str();
}
