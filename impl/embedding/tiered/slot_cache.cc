// CLOCK over a tiered shard's cache slots (slot_cache.h).
#include "impl/embedding/tiered/slot_cache.h"

namespace shardrec::embedding::tiered {

SlotCache::SlotCache(int64_t slots)
    : row_(static_cast<size_t>(slots), -1),
      ref_(static_cast<size_t>(slots), 0),
      dirty_(static_cast<size_t>(slots), 0),
      pin_(static_cast<size_t>(slots), 0) {
  free_.reserve(static_cast<size_t>(slots));
  for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
  index_.reserve(static_cast<size_t>(slots));
}

int32_t SlotCache::Find(int64_t row) const {
  auto it = index_.find(row);
  return it == index_.end() ? -1 : it->second;
}

int32_t SlotCache::Victim(uint32_t epoch) {
  if (!free_.empty()) return free_.back();
  const int64_t n = slots();
  // Two sweeps clear every second chance; a third finds nothing only if all are pinned.
  for (int64_t step = 0; step < 2 * n + 1; ++step) {
    const auto s = static_cast<int32_t>(hand_);
    hand_ = hand_ + 1 == n ? 0 : hand_ + 1;
    if (pin_[s] == epoch) continue;
    if (ref_[s] != 0) {
      ref_[s] = 0;
      continue;
    }
    return s;
  }
  return -1;
}

void SlotCache::Install(int32_t slot, int64_t row) {
  if (!free_.empty() && free_.back() == slot) free_.pop_back();
  row_[slot] = row;
  ref_[slot] = 1;
  dirty_[slot] = 0;
  index_[row] = slot;
}

void SlotCache::Remove(int32_t slot) {
  index_.erase(row_[slot]);
  row_[slot] = -1;
  ref_[slot] = 0;
  dirty_[slot] = 0;
  free_.push_back(slot);
}

}  // namespace shardrec::embedding::tiered
