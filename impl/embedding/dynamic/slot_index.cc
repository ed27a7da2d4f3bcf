// The dynamic shard's id -> slot index (slot_index.h).
#include "impl/embedding/dynamic/slot_index.h"

#include <bit>

#include "impl/core/check.h"

namespace shardrec::embedding::dynamic {

void SlotIndex::Reset(int64_t slots) {
  SR_CHECK(slots >= 1 && slots < INT32_MAX);
  table_.assign(static_cast<size_t>(slots) * 2, 0);
  // Entries hold slot + 1 in [1, slots]; the bits above are the tag, at least one.
  slot_bits_ = std::bit_width(static_cast<uint32_t>(slots));
  slot_mask_ = static_cast<uint32_t>((uint64_t{1} << slot_bits_) - 1);
}

void SlotIndex::Insert(int64_t id, int32_t slot, const int64_t* /*ids*/) {
  const uint64_t h = Hash(id);
  size_t i = Home(h);
  while (table_[i] != 0) i = Next(i);
  table_[i] = (Tag(h) << slot_bits_) | static_cast<uint32_t>(slot + 1);
}

void SlotIndex::Erase(int64_t id, const int64_t* ids) {
  const uint64_t h = Hash(id);
  const uint32_t tag = Tag(h);
  size_t i = Home(h);
  for (;; i = Next(i)) {
    const uint32_t e = table_[i];
    if ((e >> slot_bits_) == tag && ids[(e & slot_mask_) - 1] == id) break;
  }
  // Backward shift: an entry after the hole moves into it unless its home lies cyclically in
  // (hole, entry], where a lookup starting at its home would not pass the hole.
  for (size_t j = Next(i); table_[j] != 0; j = Next(j)) {
    const size_t k = Home(Hash(ids[(table_[j] & slot_mask_) - 1]));
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      table_[i] = table_[j];
      i = j;
    }
  }
  table_[i] = 0;
}

}  // namespace shardrec::embedding::dynamic
