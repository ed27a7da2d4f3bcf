// The id -> slot index of one dynamic shard: open addressing with linear probing over a table
// sized once (a power of two >= 2 x slots, so it is never more than half full), whose entries
// are 4-byte slot numbers; the ids themselves are kept once, per slot, by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardrec::embedding::dynamic {

class SlotIndex {
 public:
  static constexpr int32_t kNone = -1;

  // An empty index for up to `slots` (>= 1) entries.
  void Reset(int64_t slots);
  // The slot of `id`, or kNone; `ids[slot]` is each stored slot's id.
  int32_t Find(int64_t id, const int64_t* ids) const;
  // Asks the cache for the start of `id`'s probe run (a lookup soon after is then faster).
  void Prefetch(int64_t id) const { __builtin_prefetch(table_.data() + Home(id)); }
  // Adds id -> slot (id not present; at most `slots` entries).
  void Insert(int64_t id, int32_t slot, const int64_t* ids);
  // Removes `id` (present), moving later entries of its probe run back so no tombstone is left
  // and lookups stay as short as at insertion.
  void Erase(int64_t id, const int64_t* ids);
  // Bytes of the table.
  size_t bytes() const { return table_.size() * sizeof(int32_t); }

 private:
  size_t Home(int64_t id) const;

  std::vector<int32_t> table_;
  uint64_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace shardrec::embedding::dynamic
