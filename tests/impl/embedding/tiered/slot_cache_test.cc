// CLOCK over a tiered shard's slots (impl/embedding/tiered/slot_cache.h): free slots first,
// pinned slots never chosen, a second chance for touched ones, and the same calls give the same
// slots.
#include "impl/embedding/tiered/slot_cache.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

#include "impl/embedding/tiered/cache_layout.h"
#include "impl/embedding/tiered/row_set.h"

namespace shardrec::embedding::tiered {
namespace {

TEST(SlotCache, FreeSlotsFirstThenUnpinnedWithoutASecondChance) {
  SlotCache c(3);
  for (int64_t row = 10; row < 13; ++row) {
    const int32_t v = c.Victim(1);
    ASSERT_GE(v, 0);
    c.Install(v, row);
    c.Pin(v, 1);
  }
  EXPECT_EQ(c.resident(), 3);
  EXPECT_EQ(c.Victim(1), -1);  // all pinned by this epoch
  // Epoch 2: row 11 pinned, row 12 touched; row 10 has lost its chance after one sweep.
  c.Pin(c.Find(11), 2);
  c.Touch(c.Find(12));
  const int32_t v = c.Victim(2);
  ASSERT_GE(v, 0);
  EXPECT_NE(c.row_of(v), 11);
  c.Remove(v);
  EXPECT_EQ(c.Find(c.row_of(v)), -1);
  EXPECT_EQ(c.resident(), 2);
  EXPECT_EQ(c.Victim(2), v);  // the freed slot is the next to fill
}

TEST(SlotCache, TheSameCallsGiveTheSameSlots) {
  auto run = [] {
    SlotCache c(4);
    std::vector<int32_t> slots;
    uint32_t epoch = 0;
    for (int64_t row = 0; row < 40; ++row) {
      ++epoch;
      int32_t v = c.Find(row % 7);
      if (v < 0) {
        v = c.Victim(epoch);
        if (c.row_of(v) >= 0) c.Remove(v);
        c.Install(v, row % 7);
      } else {
        c.Touch(v);
      }
      c.Pin(v, epoch);
      slots.push_back(v);
    }
    return slots;
  };
  EXPECT_EQ(run(), run());
}

// Victim(floor) skips every slot pinned at `floor` or later; Rebase renumbers the pins so that
// the same floors (renumbered alike) skip the same slots.
TEST(SlotCache, AFloorKeepsLaterPinsAndRebaseKeepsWhichAreLater) {
  SlotCache c(3);
  for (int64_t row = 0; row < 3; ++row) {
    const int32_t v = c.Victim(1);
    c.Install(v, row);
    c.Pin(v, static_cast<uint32_t>(5 + row));  // slot i pinned at epoch 5 + i
  }
  EXPECT_EQ(c.Victim(5), -1);
  EXPECT_EQ(c.Victim(6), 0);
  EXPECT_EQ(c.Victim(6), 0);
  for (int i = 0; i < 4; ++i) EXPECT_NE(c.Victim(7), 2);
  c.Rebase(6);  // 5 -> 0 (never pinned), 6 -> 1, 7 -> 2
  EXPECT_TRUE(c.Pinned(1, 1));
  EXPECT_TRUE(c.Pinned(2, 2));
  EXPECT_TRUE(c.Pinned(0, 0));
  EXPECT_EQ(c.Victim(1), 0);
  for (int i = 0; i < 4; ++i) EXPECT_NE(c.Victim(2), 2);
}

// The row-to-slot map (open addressing with backward-shift deletion) against a reference map
// through many installs and evictions of rows that collide in the map's low bits.
TEST(SlotCache, FindsWhatAReferenceMapFinds) {
  for (int64_t slots : {1, 7, 64, 1000}) {
    SlotCache c(slots);
    std::unordered_map<int64_t, int32_t> ref;
    std::mt19937_64 rng(static_cast<uint64_t>(slots));
    uint32_t epoch = 0;
    for (int step = 0; step < 20000; ++step) {
      ++epoch;
      // Rows in a range a few times the cache, some spread far apart, some negative keys' bits.
      const int64_t row = static_cast<int64_t>(rng() % static_cast<uint64_t>(3 * slots + 5)) *
                          ((step % 3 == 0) ? (int64_t{1} << 40) + 1 : 1);
      int32_t v = c.Find(row);
      const auto it = ref.find(row);
      ASSERT_EQ(v, it == ref.end() ? -1 : it->second) << "slots " << slots << " step " << step;
      if (v < 0) {
        v = c.Victim(epoch);
        ASSERT_GE(v, 0);
        if (c.row_of(v) >= 0) {
          ref.erase(c.row_of(v));
          c.Remove(v);
        }
        c.Install(v, row);
        ref[row] = v;
      } else {
        c.Touch(v);
      }
      c.Pin(v, epoch);
      ASSERT_EQ(c.resident(), static_cast<int64_t>(ref.size()));
    }
    for (const auto& [row, slot] : ref) EXPECT_EQ(c.Find(row), slot);
  }
}

// The metadata fits the 32 B per slot charged against cache_bytes.
TEST(SlotCache, MetadataWithinItsChargePerSlot) {
  for (int64_t slots : {1, 1000, 1025, 40000, 65537}) {
    SlotCache c(slots);
    EXPECT_LE(c.memory_bytes(), static_cast<size_t>(slots) * kSlotOverheadBytes + 64)
        << slots << " slots";
  }
}

TEST(RowSet, InsertsEachRowOnceAndClearsOnReset) {
  RowSet s;
  for (int round = 0; round < 3; ++round) {
    s.Reset(100);
    for (int64_t r = 0; r < 100; ++r) EXPECT_TRUE(s.Insert(r * 7919 - 50));
    for (int64_t r = 0; r < 100; ++r) EXPECT_FALSE(s.Insert(r * 7919 - 50));
  }
  s.Reset(5000);  // grows
  for (int64_t r = 0; r < 5000; ++r) EXPECT_TRUE(s.Insert(r << 33));
  EXPECT_FALSE(s.Insert(int64_t{4999} << 33));
}

}  // namespace
}  // namespace shardrec::embedding::tiered
