// A stable LSD radix sort by byte digits, for the dynamic shard's per-step sorts of random
// 64-bit ids: a comparison sort mispredicts about every other branch on such keys.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace shardrec::embedding::dynamic {

// Sorts `v` stably by the key whose byte d (0 = least significant) is digit(x, d), d in
// [0, kDigits): the order of the unsigned kDigits-byte keys. `scratch` is reused memory. A digit
// every element shares moves nothing and is skipped.
template <int kDigits, typename T, typename Digit>
void RadixSort(std::vector<T>* v, std::vector<T>* scratch, Digit digit) {
  const size_t n = v->size();
  if (n < 2) return;
  std::array<std::array<uint32_t, 256>, kDigits> count{};
  for (const T& x : *v)
    for (int d = 0; d < kDigits; ++d) ++count[d][digit(x, d)];
  scratch->resize(n);
  for (int d = 0; d < kDigits; ++d) {
    std::array<uint32_t, 256>& at = count[d];
    if (at[digit((*v)[0], d)] == n) continue;
    uint32_t sum = 0;
    for (uint32_t& c : at) sum += std::exchange(c, sum);
    for (const T& x : *v) (*scratch)[at[digit(x, d)]++] = x;
    v->swap(*scratch);
  }
}

}  // namespace shardrec::embedding::dynamic
