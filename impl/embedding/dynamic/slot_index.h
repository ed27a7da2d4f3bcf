// The id -> slot index of one dynamic shard: open addressing with linear probing over a table of
// exactly 2 x slots entries, sized once (so it is never more than half full), each entry 4 bytes
// holding a slot number and, in the bits the slot number does not need, a tag of the id's hash;
// the ids themselves are kept once, per slot, by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/embedding/dynamic/placement.h"

namespace shardrec::embedding::dynamic {

class SlotIndex {
 public:
  static constexpr int32_t kNone = -1;

  // An empty index for up to `slots` (1 <= slots < 2^31 - 1) entries.
  void Reset(int64_t slots);
  // The slot of `id`, or kNone; `ids[slot]` is each stored slot's id. Inline: it is the inner
  // loop of every dynamic lookup.
  int32_t Find(int64_t id, const int64_t* ids) const {
    const uint64_t h = Hash(id);
    const uint32_t tag = Tag(h);
    for (size_t i = Home(h);; i = Next(i)) {
      const uint32_t e = table_[i];
      if (e == 0) return kNone;
      if ((e >> slot_bits_) == tag) {
        const int32_t s = static_cast<int32_t>(e & slot_mask_) - 1;
        if (ids[s] == id) return s;
      }
    }
  }
  // Asks the cache for the start of `id`'s probe run (a lookup soon after is then faster).
  void Prefetch(int64_t id) const { __builtin_prefetch(table_.data() + Home(Hash(id))); }
  // The slot `id` most likely has, from its home entry alone (no id compared), or kNone: for
  // prefetching the slot's data before a Find, never for a decision.
  int32_t Guess(int64_t id) const {
    const uint64_t h = Hash(id);
    const uint32_t e = table_[Home(h)];
    return e == 0 || (e >> slot_bits_) != Tag(h) ? kNone : static_cast<int32_t>(e & slot_mask_) - 1;
  }
  // Adds id -> slot (id not present; at most `slots` entries).
  void Insert(int64_t id, int32_t slot, const int64_t* ids);
  // Removes `id` (present), moving later entries of its probe run back so no tombstone is left
  // and lookups stay as short as at insertion.
  void Erase(int64_t id, const int64_t* ids);
  // Bytes of the table.
  size_t bytes() const { return table_.size() * sizeof(uint32_t); }

 private:
  // An entry: 0 when empty, else (tag << slot_bits_) | (slot + 1).
  // A second mix: the row-wise placement used Mix64(id) mod blocks, so that value is alike in its
  // low bits within one shard and would crowd its table. The home comes from the high bits
  // (times the table size) and the tag from the low 32 bits shifted past the slot number, so
  // they are nearly independent and a tag mismatch rules an entry out without reading its id.
  static uint64_t Hash(int64_t id) {
    return Mix64(static_cast<uint64_t>(id) ^ 0x632be59bd9b4e019ull);
  }
  size_t Home(uint64_t h) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(h) * table_.size()) >> 64);
  }
  uint32_t Tag(uint64_t h) const { return static_cast<uint32_t>(h) >> slot_bits_; }
  size_t Next(size_t i) const { return i + 1 == table_.size() ? 0 : i + 1; }

  std::vector<uint32_t> table_;
  int slot_bits_ = 31;
  uint32_t slot_mask_ = 0;
};

}  // namespace shardrec::embedding::dynamic
