// Thread safety (row_store.h): Get, Put and Erase from many threads at once, beside Flush, Scan,
// Snapshot and the compaction thread. Each key has one writer that writes rising rounds; a
// reader must only ever see whole records, and for one key never an older round after a newer
// one. Run under ThreadSanitizer by .ci/tsan.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/impl/store/store_test_util.h"

namespace shardrec::store {
namespace {

constexpr size_t kValueBytes = 96;
constexpr int64_t kKeysPerWriter = 400;
constexpr int kWriters = 3;

// key, round, then bytes derived from both.
std::vector<uint8_t> Record(int64_t key, uint32_t round) {
  std::vector<uint8_t> v = testing::Value(key, round, kValueBytes);
  std::memcpy(v.data(), &key, 8);
  std::memcpy(v.data() + 8, &round, 4);
  return v;
}

TEST(StoreConcurrency, GetPutEraseFlushScanSnapshotAndCompactionTogether) {
  StoreOptions o = testing::Options("store_concurrency", kValueBytes);
  o.compact_dead_ratio = 0.3;
  LogTuning t;
  t.segment_bytes = 64 << 10;
  t.write_chunk = 8 << 10;
  t.compact_interval_ms = 2;
  std::unique_ptr<LogStore> s;
  ASSERT_TRUE(OpenLogStore(o, t, &s).ok());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> bad{0}, reads{0};
  // The writers start once both readers are reading: on a loaded machine the writers could
  // otherwise finish before a reader ever ran, and nothing would have been read concurrently.
  std::atomic<int> readers_started{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      while (readers_started.load() < 2) std::this_thread::yield();
      const int64_t base = w * kKeysPerWriter;
      for (uint32_t round = 1; round <= 12; ++round) {
        std::vector<int64_t> keys;
        std::vector<uint8_t> values;
        for (int64_t k = base; k < base + kKeysPerWriter; ++k) {
          keys.push_back(k);
          const std::vector<uint8_t> v = Record(k, round);
          values.insert(values.end(), v.begin(), v.end());
          if (keys.size() == 50) {
            if (!s->Put(keys.data(), values.data(), keys.size()).ok()) bad++;
            keys.clear();
            values.clear();
          }
        }
        if (round % 4 == 0) {
          const int64_t gone = base + round;
          if (!s->Erase(&gone, 1).ok()) bad++;
        }
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<uint32_t> seen(kWriters * kKeysPerWriter, 0);
      std::vector<int64_t> keys(64);
      std::vector<uint8_t> out(keys.size() * kValueBytes);
      std::unique_ptr<bool[]> found(new bool[keys.size()]);
      uint64_t x = 12345 + r;
      readers_started++;
      do {
        for (int64_t& k : keys) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          k = static_cast<int64_t>((x >> 33) % seen.size());
        }
        if (!s->Get(keys.data(), keys.size(), out.data(), found.get()).ok()) bad++;
        for (size_t i = 0; i < keys.size(); ++i) {
          if (!found[i]) continue;
          uint32_t round = 0;
          std::memcpy(&round, out.data() + i * kValueBytes + 8, 4);
          if (std::memcmp(out.data() + i * kValueBytes, Record(keys[i], round).data(),
                          kValueBytes) != 0 ||
              round < seen[keys[i]]) {
            bad++;
          }
          seen[keys[i]] = round;
        }
        reads++;
      } while (!stop.load());
    });
  }
  threads.emplace_back([&] {
    int snaps = 0;
    while (!stop.load()) {
      if (!s->Flush().ok()) bad++;
      int64_t cursor = 0;
      std::vector<int64_t> keys;
      std::vector<uint8_t> values;
      while (cursor != -1) {
        if (!s->Scan(&cursor, 128, &keys, &values).ok()) {
          bad++;
          break;
        }
      }
      if (snaps < 3) {
        const std::string dir = shardrec::testing::FreshDir("store_concurrency_snap") + "/s";
        if (!s->Snapshot(dir).ok()) bad++;
        ++snaps;
      }
      (void)s->stats();
    }
  });
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  stop.store(true);
  for (size_t i = kWriters; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_TRUE(s->compaction_error().ok()) << s->compaction_error().ToString();
  // The final state: round 12 everywhere but the erased keys (erased after rounds 4, 8, 12).
  for (int w = 0; w < kWriters; ++w) {
    for (int64_t k = w * kKeysPerWriter; k < (w + 1) * kKeysPerWriter; ++k) {
      std::vector<uint8_t> out(kValueBytes);
      bool found = false;
      ASSERT_TRUE(s->Get(&k, 1, out.data(), &found).ok());
      const int64_t off = k - w * kKeysPerWriter;
      if (off == 12) {
        EXPECT_FALSE(found) << k;
      } else {
        ASSERT_TRUE(found) << k;
        EXPECT_EQ(out, Record(k, 12)) << k;
      }
    }
  }
}

}  // namespace
}  // namespace shardrec::store
