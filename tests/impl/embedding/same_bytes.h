// Byte-for-byte comparison of two ranges for the embedding tests (fp32 -0.0f stays apart from
// +0.0f, a NaN's payload counts), safe for empty ranges.
#pragma once

#include <cstddef>
#include <cstring>

namespace shardrec::embedding::testing {

// memcmp is never handed a pointer when n is 0: an empty vector's data() may be null, which
// memcmp's nonnull contract (and UBSan) rejects.
inline bool SameBytes(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

}  // namespace shardrec::embedding::testing
