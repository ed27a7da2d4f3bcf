// Counter-based random numbers: a value is a pure function of its key, so initial weights do not
// depend on the plan, the world size, the rank or the order of computation.
#pragma once

#include <cstdint>
#include <string_view>

#include "impl/core/host_device.h"

namespace shardrec {

// splitmix64 finaliser: a bijective 64-bit mixer with good avalanche. Host/device: the
// stochastic-rounding bits of the CUDA kernels come from it too.
SHARDREC_HD constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a of a name, used to key tables by name rather than by position in a config.
constexpr uint64_t HashName(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Uniform in [0, 1) with 24 random bits (exactly representable in fp32), keyed by
// (seed, table, row, column).
constexpr float UniformAt(uint64_t seed, uint64_t table_key, uint64_t row, uint64_t col) {
  uint64_t h = Mix64(seed ^ Mix64(table_key ^ Mix64(row ^ Mix64(col))));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

}  // namespace shardrec
