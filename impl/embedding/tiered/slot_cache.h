// Which rows of one tiered shard sit in which cache slots, and which slot leaves next
// (docs/disk-tier.md): CLOCK (second chance) over the slots not pinned by the batch being
// resolved, the batch a backward may still train or the batch being prefetched (pins by epoch:
// a victim is pinned before the caller's floor). Not thread-safe: the tiered tables guard it.
// Deterministic: the same sequence of calls gives the same slots, so column shards of one row
// block (which see the same ids) keep their rows in the same slots on every rank.
//
// Memory: per slot its row (8 B), pin epoch (4 B), reference and dirty marks (1 B each), and 2-4
// entries of 4 B in the row-to-slot map (an open-addressing table of slot numbers, at most half
// full, whose keys are the slots' rows): 22-30 B, within the 32 B a slot is charged
// (kSlotOverheadBytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardrec::embedding::tiered {

class SlotCache {
 public:
  explicit SlotCache(int64_t slots);

  int64_t slots() const { return static_cast<int64_t>(row_.size()); }
  int64_t resident() const { return resident_; }

  // The slot holding `row`, or -1.
  int32_t Find(int64_t row) const {
    for (size_t i = Home(row);; i = (i + 1) & mask_) {
      const int32_t s = map_[i];
      if (s < 0) return -1;
      if (row_[static_cast<size_t>(s)] == row) return s;
    }
  }
  // Hints the CPU to load `row`'s home in the map (a batch of Finds overlaps their misses).
  void Prefetch(int64_t row) const { __builtin_prefetch(&map_[Home(row)]); }
  // Hints the CPU to load what a Find and a hit of `row` read next: the row and pin of the slot
  // at its home (its map entry should be loaded already, by Prefetch).
  void PrefetchSlot(int64_t row) const {
    const int32_t s = map_[Home(row)];
    if (s < 0) return;
    __builtin_prefetch(&row_[static_cast<size_t>(s)]);
    __builtin_prefetch(&pin_[static_cast<size_t>(s)]);
  }
  // A hit: the slot gets its second chance.
  void Touch(int32_t slot) { ref_[slot] = 1; }
  // Pins `slot` at `epoch`: Victim(floor) skips it while floor <= epoch. Epochs only grow (the
  // tier numbers its resolutions and prefetches in order), so a later floor releases it.
  void Pin(int32_t slot, uint32_t epoch) { pin_[slot] = epoch; }
  bool Pinned(int32_t slot, uint32_t epoch) const { return pin_[slot] == epoch; }

  // A slot to fill: a free one first (freed ones before never used ones), else the CLOCK hand's
  // next slot pinned before `floor` and without a second chance (clearing chances as it passes).
  // -1 when every slot is pinned at `floor` or later. The caller evicts the victim's row
  // (Remove, which frees the slot) before it installs another.
  int32_t Victim(uint32_t floor);
  // Renumbers the pins so that epoch `from` becomes 1 and later ones follow it (e -> e - from + 1)
  // and earlier ones become 0 (never pinned): the tier calls it before its epochs would wrap,
  // keeping which pins Victim honours for every floor >= `from`.
  void Rebase(uint32_t from);
  void Install(int32_t slot, int64_t row);
  void Remove(int32_t slot);

  int64_t row_of(int32_t slot) const { return row_[slot]; }
  bool dirty(int32_t slot) const { return dirty_[slot] != 0; }
  void set_dirty(int32_t slot, bool d) { dirty_[slot] = d ? 1 : 0; }
  // Slot i's row, or -1 for a free slot (the rounding keys of the optimizer read it).
  const int64_t* rows() const { return row_.data(); }

  // DRAM of this cache's metadata (not the slots' values): what kSlotOverheadBytes bounds.
  size_t memory_bytes() const;

 private:
  size_t Home(int64_t row) const {
    return static_cast<size_t>((static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  // Takes `row`, held by `slot`, out of the map.
  void Unmap(int64_t row, int32_t slot);

  std::vector<int32_t> map_;  // open addressing, linear probing: a slot number, or -1 empty
  size_t mask_ = 0;
  int shift_ = 0;
  std::vector<int64_t> row_;  // per slot: its row, -1 free
  std::vector<uint8_t> ref_;
  std::vector<uint8_t> dirty_;
  std::vector<uint32_t> pin_;
  std::vector<int32_t> freed_;  // slots freed by Remove, the next to fill last
  int64_t fresh_ = 0;           // slots [fresh_, slots) were never filled
  int64_t resident_ = 0;
  int64_t hand_ = 0;
};

}  // namespace shardrec::embedding::tiered
