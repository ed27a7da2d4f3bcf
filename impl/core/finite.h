// Finding NaN and infinite floats in a buffer (batch weights, output gradients), fast in the usual
// case where there are none.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace shardrec {

// The position of the first NaN or infinite value of p[0, n), or n when every value is finite. A
// branch-free scan the compiler vectorises (all exponent bits set is NaN or infinity) decides;
// only when it finds one does a second pass look for where.
inline size_t FirstNonFinite(const float* p, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    bad |= static_cast<uint32_t>((std::bit_cast<uint32_t>(p[i]) & 0x7f800000u) == 0x7f800000u);
  if (bad == 0) return n;
  size_t i = 0;
  while (std::isfinite(p[i])) ++i;
  return i;
}

}  // namespace shardrec
