// Helpers of the store's tests: options over a fresh directory and deterministic record values.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "impl/store/log_store.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::store::testing {

inline StoreOptions Options(const std::string& tag, size_t value_bytes = 128) {
  StoreOptions o;
  o.dir = shardrec::testing::FreshDir(tag) + "/store";
  o.identity = "table t0 shard 0 plan abc";
  o.value_bytes = value_bytes;
  return o;
}

// The value of `key` at `round`: every byte depends on both, so a stale or misplaced record shows.
inline std::vector<uint8_t> Value(int64_t key, uint32_t round, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  uint64_t x = static_cast<uint64_t>(key) * 0x9e3779b97f4a7c15ull + round * 0xbf58476d1ce4e5b9ull;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x >> 29;
    x *= 0x94d049bb133111ebull;
    v[i] = static_cast<uint8_t>(x >> 56);
  }
  return v;
}

inline std::vector<uint8_t> Values(const std::vector<int64_t>& keys, uint32_t round, size_t bytes) {
  std::vector<uint8_t> all;
  for (int64_t k : keys) {
    const std::vector<uint8_t> v = Value(k, round, bytes);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

inline std::vector<int64_t> Range(int64_t from, int64_t to) {
  std::vector<int64_t> keys;
  for (int64_t k = from; k < to; ++k) keys.push_back(k);
  return keys;
}

}  // namespace shardrec::store::testing
