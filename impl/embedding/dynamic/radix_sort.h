// Radix sorts for the dynamic shard's per-step sorts of random 64-bit ids: a comparison sort
// mispredicts about every other branch on such keys.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
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

// Sorts `v` by the unsigned 64-bit key(x) (elements with equal keys in no particular order): one
// pass scatters them by the highest bits their keys do not all share, into about as many buckets
// as elements, and each bucket (a few elements when the keys spread like random ids) is finished
// by insertion, or by std::sort when it is large (keys crowded below the split). Three passes
// instead of an LSD sort's eight on random 64-bit keys. `scratch` and `count` are reused memory.
template <typename T, typename Key>
void SortByKey64(std::vector<T>* v, std::vector<T>* scratch, std::vector<uint32_t>* count,
                 Key key) {
  const size_t n = v->size();
  auto less = [&key](const T& a, const T& b) { return key(a) < key(b); };
  if (n < 64) {
    std::sort(v->begin(), v->end(), less);
    return;
  }
  const uint64_t first = key((*v)[0]);
  uint64_t varies = 0;
  for (const T& x : *v) varies |= key(x) ^ first;
  if (varies == 0) return;
  const int top = static_cast<int>(std::bit_width(varies));  // bits from `top` up are shared
  const int bits = std::min(top, static_cast<int>(std::bit_width(n)) - 1);
  const int shift = top - bits;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  count->assign((size_t{1} << bits) + 1, 0);
  for (const T& x : *v) ++(*count)[((key(x) >> shift) & mask) + 1];
  for (size_t b = 1; b < count->size(); ++b) (*count)[b] += (*count)[b - 1];
  scratch->resize(n);
  {
    std::vector<uint32_t>& at = *count;  // bucket b's next place; ends as bucket b + 1's start
    for (const T& x : *v) (*scratch)[at[(key(x) >> shift) & mask]++] = x;
  }
  v->swap(*scratch);
  // count[b] is now the end of bucket b (the start of b + 1); bucket 0 starts at 0.
  size_t begin = 0;
  for (size_t b = 0; b + 1 < count->size(); ++b) {
    const size_t end = (*count)[b];
    if (end - begin > 16) {
      std::sort(v->begin() + static_cast<ptrdiff_t>(begin),
                v->begin() + static_cast<ptrdiff_t>(end), less);
    } else {
      for (size_t i = begin + 1; i < end; ++i) {
        T x = (*v)[i];
        const uint64_t kx = key(x);
        size_t j = i;
        for (; j > begin && key((*v)[j - 1]) > kx; --j) (*v)[j] = (*v)[j - 1];
        (*v)[j] = x;
      }
    }
    begin = end;
  }
}

}  // namespace shardrec::embedding::dynamic
