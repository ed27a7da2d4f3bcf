// The dynamic shard's id -> slot index (slot_index.h).
#include "impl/embedding/dynamic/slot_index.h"

#include <algorithm>

#include "impl/core/check.h"

namespace shardrec::embedding::dynamic {

void SlotIndex::Reset(int64_t slots) {
  SR_CHECK(slots >= 1 && slots < INT32_MAX);
  // 1.5 entries per slot, so at least one entry stays empty and every probe ends: linear probing
  // at a load of 2/3 passes ~2 entries on a hit and ~5 on a miss, bytes of one cache line.
  // At least kGroup entries, so a group never covers an entry twice.
  entries_ = std::max(static_cast<size_t>(slots) + static_cast<size_t>(slots) / 2 + 1, kGroup);
  tags_.assign(entries_ + kGroup - 1, 0);
  slots_.assign(entries_, 0);
}

void SlotIndex::Insert(int64_t id, int32_t slot, const int64_t* /*ids*/) {
  const uint64_t h = Hash(id);
  size_t i = Home(h);
  while (tags_[i] != 0) i = Next(i);
  SetTag(i, Tag(h));
  slots_[i] = static_cast<uint32_t>(slot);
}

void SlotIndex::Erase(int64_t id, const int64_t* ids) {
  const uint64_t h = Hash(id);
  const uint8_t tag = Tag(h);
  size_t i = Home(h);
  for (;; i = Next(i)) {
    if (tags_[i] == tag && ids[slots_[i]] == id) break;
  }
  // Backward shift: an entry after the hole moves into it unless its home lies cyclically in
  // (hole, entry], where a lookup starting at its home would not pass the hole.
  for (size_t j = Next(i); tags_[j] != 0; j = Next(j)) {
    const size_t k = Home(Hash(ids[slots_[j]]));
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      SetTag(i, tags_[j]);
      slots_[i] = slots_[j];
      i = j;
    }
  }
  SetTag(i, 0);
}

}  // namespace shardrec::embedding::dynamic
