// A set of rows that a tiered shard's resolver clears every batch (docs/disk-tier.md), each with
// a small value (where the resolver keeps the row's miss): open addressing over int64 rows with a
// stamp per entry, so clearing is one increment and the memory
// is kept from batch to batch (no allocation per forward). Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardrec::embedding::tiered {

class RowSet {
 public:
  // Empties the set and makes room for `n` rows without growing.
  void Reset(size_t n) {
    size_t cap = 16;
    int shift = 60;
    while (cap < 2 * n) {
      cap *= 2;
      --shift;
    }
    if (cap > keys_.size()) {
      keys_.assign(cap, 0);
      values_.assign(cap, 0);
      stamp_.assign(cap, 0);
      shift_ = shift;
      stamp_now_ = 0;
    }
    if (++stamp_now_ == 0) {  // wrapped: every old stamp could read as current
      std::fill(stamp_.begin(), stamp_.end(), 0);
      stamp_now_ = 1;
    }
  }
  // Adds `row`; true when it was not in the set. At most Reset's `n` rows between two Resets.
  bool Insert(int64_t row) { return InsertOrFind(row, 0) < 0; }
  // Adds `row` with `value` (>= 0) and returns -1 when it was not in the set; else returns the
  // value it was added with. At most Reset's `n` rows between two Resets.
  int32_t InsertOrFind(int64_t row, int32_t value) {
    const size_t mask = keys_.size() - 1;
    for (size_t i =
             static_cast<size_t>((static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull) >> shift_);
         ; i = (i + 1) & mask) {
      if (stamp_[i] != stamp_now_) {
        stamp_[i] = stamp_now_;
        keys_[i] = row;
        values_[i] = value;
        return -1;
      }
      if (keys_[i] == row) return values_[i];
    }
  }

 private:
  std::vector<int64_t> keys_;
  std::vector<int32_t> values_;
  std::vector<uint32_t> stamp_;
  uint32_t stamp_now_ = 0;
  int shift_ = 60;
};

}  // namespace shardrec::embedding::tiered
