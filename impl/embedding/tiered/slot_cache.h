// Which rows of one tiered shard sit in which cache slots, and which slot leaves next
// (docs/disk-tier.md): CLOCK (second chance) over the slots not pinned by the batch being
// resolved or the batch a backward may still train. Not thread-safe: the tiered tables guard it.
// Deterministic: the same sequence of calls gives the same slots, so column shards of one row
// block (which see the same ids) keep their rows in the same slots on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace shardrec::embedding::tiered {

class SlotCache {
 public:
  explicit SlotCache(int64_t slots);

  int64_t slots() const { return static_cast<int64_t>(row_.size()); }
  int64_t resident() const { return static_cast<int64_t>(index_.size()); }

  // The slot holding `row`, or -1.
  int32_t Find(int64_t row) const;
  // A hit: the slot gets its second chance.
  void Touch(int32_t slot) { ref_[slot] = 1; }
  // Pins `slot` for resolution `epoch`: Victim skips it until a later epoch.
  void Pin(int32_t slot, uint32_t epoch) { pin_[slot] = epoch; }
  bool Pinned(int32_t slot, uint32_t epoch) const { return pin_[slot] == epoch; }

  // A slot to fill: a free one first, else the CLOCK hand's next unpinned slot
  // without a second chance (clearing chances as it passes). -1 when every slot is pinned. The
  // caller evicts the victim's row (Remove, which frees the slot) before it installs another.
  int32_t Victim(uint32_t epoch);
  void Install(int32_t slot, int64_t row);
  void Remove(int32_t slot);

  int64_t row_of(int32_t slot) const { return row_[slot]; }
  bool dirty(int32_t slot) const { return dirty_[slot] != 0; }
  void set_dirty(int32_t slot, bool d) { dirty_[slot] = d ? 1 : 0; }
  // Slot i's row, or -1 for a free slot (the rounding keys of the optimizer read it).
  const int64_t* rows() const { return row_.data(); }

 private:
  std::unordered_map<int64_t, int32_t> index_;
  std::vector<int64_t> row_;  // per slot: its row, -1 free
  std::vector<uint8_t> ref_;
  std::vector<uint8_t> dirty_;
  std::vector<uint32_t> pin_;
  std::vector<int32_t> free_;  // free slots, the next to fill last
  int64_t hand_ = 0;
};

}  // namespace shardrec::embedding::tiered
