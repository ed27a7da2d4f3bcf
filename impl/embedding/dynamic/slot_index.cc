// The dynamic shard's id -> slot index (slot_index.h).
#include "impl/embedding/dynamic/slot_index.h"

#include <bit>

#include "impl/core/check.h"
#include "impl/embedding/dynamic/placement.h"

namespace shardrec::embedding::dynamic {

void SlotIndex::Reset(int64_t slots) {
  SR_CHECK(slots >= 1);
  const uint64_t size = std::bit_ceil(static_cast<uint64_t>(slots) * 2);
  table_.assign(size, kNone);
  mask_ = size - 1;
  shift_ = 64 - std::countr_zero(size);
}

// The high bits of a second mix: the row-wise placement used Mix64(id) mod blocks, so the low
// bits of that value are alike within one shard and would crowd its table.
size_t SlotIndex::Home(int64_t id) const {
  const uint64_t h = Mix64(static_cast<uint64_t>(id) ^ 0x632be59bd9b4e019ull);
  return shift_ >= 64 ? 0 : static_cast<size_t>(h >> shift_);
}

int32_t SlotIndex::Find(int64_t id, const int64_t* ids) const {
  for (size_t i = Home(id);; i = (i + 1) & mask_) {
    const int32_t s = table_[i];
    if (s == kNone || ids[s] == id) return s;
  }
}

void SlotIndex::Insert(int64_t id, int32_t slot, const int64_t* /*ids*/) {
  size_t i = Home(id);
  while (table_[i] != kNone) i = (i + 1) & mask_;
  table_[i] = slot;
}

void SlotIndex::Erase(int64_t id, const int64_t* ids) {
  size_t i = Home(id);
  while (ids[table_[i]] != id) i = (i + 1) & mask_;
  // Backward shift: an entry after the hole moves into it unless its home lies cyclically in
  // (hole, entry], where a lookup starting at its home would not pass the hole.
  for (size_t j = (i + 1) & mask_; table_[j] != kNone; j = (j + 1) & mask_) {
    const size_t k = Home(ids[table_[j]]);
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      table_[i] = table_[j];
      i = j;
    }
  }
  table_[i] = kNone;
}

}  // namespace shardrec::embedding::dynamic
