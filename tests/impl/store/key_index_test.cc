// The store's in-memory index against std::unordered_map over random upserts and erases (the
// backward-shift deletion keeps every probe run reachable), clustered keys included.
#include "impl/store/key_index.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace shardrec::store {
namespace {

TEST(KeyIndex, AgreesWithAMapOverRandomUpsertsAndErases) {
  KeyIndex index;
  std::unordered_map<int64_t, uint64_t> ref;
  std::mt19937_64 rng(5);
  for (int op = 0; op < 400000; ++op) {
    // A small key range so erases hit and probe runs collide; some extreme keys too.
    int64_t key = static_cast<int64_t>(rng() % 5000) - 2500;
    if (op % 97 == 0) key = (op % 2) ? INT64_MIN : INT64_MAX;
    const uint64_t loc = (rng() | 1) & 0xffffffffffffull;
    if (rng() % 3 == 0) {
      const auto it = ref.find(key);
      ASSERT_EQ(index.Erase(key), it == ref.end() ? 0 : it->second);
      if (it != ref.end()) ref.erase(it);
    } else {
      const auto it = ref.find(key);
      ASSERT_EQ(index.Upsert(key, loc), it == ref.end() ? 0 : it->second);
      ref[key] = loc;
    }
    if (op % 5000 == 0) {
      ASSERT_EQ(index.size(), ref.size());
      for (const auto& [k, v] : ref) ASSERT_EQ(index.Find(k), v) << k;
    }
  }
  size_t visited = 0;
  index.ForEach([&](int64_t k, uint64_t v) {
    ++visited;
    EXPECT_EQ(ref.at(k), v);
  });
  EXPECT_EQ(visited, ref.size());
  EXPECT_EQ(index.Find(123456789), 0u);
}

TEST(KeyIndex, MemoryStaysWithinFortyThreeBytesPerKey) {
  KeyIndex index;
  for (int64_t k = 0; k < 1000000; ++k) index.Upsert(k * 7919, 1);
  EXPECT_LE(index.memory_bytes(), 43 * index.size());
  EXPECT_GE(index.memory_bytes(), 16 * index.size() * 4 / 3);
}

}  // namespace
}  // namespace shardrec::store
