// CLOCK over a tiered shard's cache slots (slot_cache.h).
#include "impl/embedding/tiered/slot_cache.h"

namespace shardrec::embedding::tiered {

SlotCache::SlotCache(int64_t slots)
    : row_(static_cast<size_t>(slots), -1),
      ref_(static_cast<size_t>(slots), 0),
      dirty_(static_cast<size_t>(slots), 0),
      pin_(static_cast<size_t>(slots), 0) {
  // At most half full, so a probe ends within a few entries.
  size_t cap = 16;
  shift_ = 60;
  while (cap < 2 * static_cast<size_t>(slots)) {
    cap *= 2;
    --shift_;
  }
  map_.assign(cap, -1);
  mask_ = cap - 1;
}

size_t SlotCache::memory_bytes() const {
  return map_.capacity() * sizeof(int32_t) + row_.capacity() * sizeof(int64_t) + ref_.capacity() +
         dirty_.capacity() + pin_.capacity() * sizeof(uint32_t) +
         freed_.capacity() * sizeof(int32_t);
}

int32_t SlotCache::Victim(uint32_t floor) {
  if (!freed_.empty()) return freed_.back();
  const int64_t n = slots();
  if (fresh_ < n) return static_cast<int32_t>(fresh_);
  // Two sweeps clear every second chance; a third finds nothing only if all are pinned.
  for (int64_t step = 0; step < 2 * n + 1; ++step) {
    const auto s = static_cast<int32_t>(hand_);
    hand_ = hand_ + 1 == n ? 0 : hand_ + 1;
    if (pin_[s] >= floor) continue;
    if (ref_[s] != 0) {
      ref_[s] = 0;
      continue;
    }
    return s;
  }
  return -1;
}

void SlotCache::Rebase(uint32_t from) {
  for (uint32_t& p : pin_) p = p >= from ? p - from + 1 : 0;
}

void SlotCache::Install(int32_t slot, int64_t row) {
  if (!freed_.empty() && freed_.back() == slot) {
    freed_.pop_back();
  } else if (slot == fresh_) {
    ++fresh_;
  }
  row_[slot] = row;
  ref_[slot] = 1;
  dirty_[slot] = 0;
  size_t i = Home(row);
  while (map_[i] >= 0) i = (i + 1) & mask_;
  map_[i] = slot;
  ++resident_;
}

void SlotCache::Unmap(int64_t row, int32_t slot) {
  // The probe compares slot numbers, not the rows of the entries it passes (a load each).
  size_t i = Home(row);
  while (map_[i] != slot) i = (i + 1) & mask_;
  // Backward-shift deletion: later entries of the probe run move into the hole when their home
  // does not lie (cyclically) between the hole and them, so no tombstones build up.
  size_t hole = i;
  for (size_t j = (hole + 1) & mask_; map_[j] >= 0; j = (j + 1) & mask_) {
    const size_t home = Home(row_[static_cast<size_t>(map_[j])]);
    const bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (stays) continue;
    map_[hole] = map_[j];
    hole = j;
  }
  map_[hole] = -1;
}

void SlotCache::Remove(int32_t slot) {
  Unmap(row_[slot], slot);
  --resident_;
  row_[slot] = -1;
  ref_[slot] = 0;
  dirty_[slot] = 0;
  freed_.push_back(slot);
}

}  // namespace shardrec::embedding::tiered
