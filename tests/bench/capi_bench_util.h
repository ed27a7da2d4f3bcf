// Helpers of the benchmarks that drive the library through its public C API.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "shardrec/shardrec.h"

namespace shardrec::bench {

// Aborts with the library's message when `rc` is not SHARDREC_OK: a benchmark has no way on.
inline void Check(shardrec_status_t rc, const char* what) {
  if (rc != SHARDREC_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, shardrec_last_error());
    std::abort();
  }
}

// An odd multiplier: a bijection of 64-bit ids that scatters consecutive ones over the range
// (raw ids for dynamic tables).
inline int64_t Scatter(int64_t x) {
  return static_cast<int64_t>(static_cast<uint64_t>(x) * 0x9E3779B97F4A7C15ull);
}

}  // namespace shardrec::bench
