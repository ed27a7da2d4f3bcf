// The tiered serving row cache (impl/serving/row_cache.h) against a model of what it may hold:
// every row it returns is that row's bytes, a row just put is found, it never holds more rows
// than its slots, and rows are found again after heavy eviction (the map's backward-shift
// deletion keeps every live entry reachable and leaves no stale one); and from many threads.
#include "impl/serving/row_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace shardrec::serving {
namespace {

constexpr uint64_t kRowBytes = 24;

// The bytes row `r` holds: its number in every 8-byte word.
std::vector<uint8_t> RowOf(int64_t r) {
  std::vector<uint8_t> v(kRowBytes);
  for (uint64_t i = 0; i < kRowBytes; i += 8) std::memcpy(v.data() + i, &r, 8);
  return v;
}

TEST(RowCache, RefusesASizeOfNoRowAndCountsSlots) {
  std::unique_ptr<RowCache> c;
  const Status s = RowCache::Create(kRowBytes, kRowBytes + RowCache::kSlotOverhead - 1, "t", &c);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  ASSERT_TRUE(
      RowCache::Create(kRowBytes, 1000 * (kRowBytes + RowCache::kSlotOverhead), "t", &c).ok());
  EXPECT_LE(c->slots(), 1000);
  EXPECT_GE(c->slots(), 1000 - 64);  // at most one stripe's remainder each is left out
  EXPECT_LE(c->bytes(), 1000 * (kRowBytes + RowCache::kSlotOverhead));
}

TEST(RowCache, EveryHitIsTheRowsBytesThroughHeavyEviction) {
  for (uint64_t slots : {1u, 7u, 100u, 1000u}) {
    std::unique_ptr<RowCache> c;
    ASSERT_TRUE(
        RowCache::Create(kRowBytes, slots * (kRowBytes + RowCache::kSlotOverhead), "t", &c).ok());
    std::mt19937_64 rng(slots);
    std::vector<uint8_t> got(kRowBytes);
    int64_t hits = 0;
    for (int i = 0; i < 200000; ++i) {
      // Skewed rows over 5000: some stay, most are evicted again and again.
      const int64_t r = static_cast<int64_t>(rng() % (rng() % 2 ? 50 : 5000));
      if (c->Get(r, got.data())) {
        ASSERT_EQ(got, RowOf(r)) << "slots " << slots << " row " << r;
        ++hits;
      } else {
        c->Put(r, RowOf(r).data());
        ASSERT_TRUE(c->Get(r, got.data())) << "slots " << slots << " row " << r << " just put";
        ASSERT_EQ(got, RowOf(r));
      }
      ASSERT_LE(c->rows(), c->slots());
    }
    EXPECT_EQ(c->rows(), c->slots());
    if (slots >= 100) EXPECT_GT(hits, 50000);  // the 50 hot rows stay
  }
}

TEST(RowCache, ManyThreadsSeeOnlyWholeRows) {
  std::unique_ptr<RowCache> c;
  ASSERT_TRUE(
      RowCache::Create(kRowBytes, 500 * (kRowBytes + RowCache::kSlotOverhead), "t", &c).ok());
  std::vector<std::thread> pool;
  std::vector<int> bad(8, 0);
  for (int t = 0; t < 8; ++t)
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<uint8_t> got(kRowBytes);
      for (int i = 0; i < 20000; ++i) {
        const int64_t r = static_cast<int64_t>(rng() % 2000);
        if (c->Get(r, got.data())) {
          bad[t] += got != RowOf(r);
        } else {
          c->Put(r, RowOf(r).data());
        }
      }
    });
  for (auto& th : pool) th.join();
  for (int b : bad) EXPECT_EQ(b, 0);
  EXPECT_LE(c->rows(), c->slots());
}

}  // namespace
}  // namespace shardrec::serving
