// CLOCK over a tiered shard's slots (impl/embedding/tiered/slot_cache.h): free slots first,
// pinned slots never chosen, a second chance for touched ones, and the same calls give the same
// slots.
#include "impl/embedding/tiered/slot_cache.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace shardrec::embedding::tiered
