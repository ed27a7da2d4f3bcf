// A byte-sized cache of a served table's stored rows for many reader threads: the rows are split
// over lock stripes by a hash of the row, each stripe with its own slots, map and CLOCK hand, so
// a hit takes one stripe's lock for a map probe and a row copy and never a lock that every
// reader shares. Rows are copied out (a reader never holds a pointer into the cache), so a slot
// can be reused as soon as its stripe's lock is released.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::serving {

class RowCache {
 public:
  // DRAM a slot costs beyond its row: its row number (8 bytes), reference bit (1) and two map
  // entries (32), rounded up.
  static constexpr uint64_t kSlotOverhead = 64;

  // A cache of as many rows of `row_bytes` as `cache_bytes` pays for (row + kSlotOverhead each).
  // kInvalidArgument naming `what` when that is not one row; kOutOfMemory.
  static Status Create(uint64_t row_bytes, uint64_t cache_bytes, const std::string& what,
                       std::unique_ptr<RowCache>* out);

  // Copies row `row` into `dst` (row_bytes) and marks it referenced; false when not cached.
  bool Get(int64_t row, uint8_t* dst);
  // Caches a copy of `src` as row `row` (a row already cached is left as it is), evicting the
  // stripe's first unreferenced row in CLOCK order when the stripe is full.
  void Put(int64_t row, const uint8_t* src);

  int64_t slots() const { return slots_; }
  uint64_t bytes() const { return static_cast<uint64_t>(slots_) * (row_bytes_ + kSlotOverhead); }
  int64_t rows() const;  // rows cached now (takes every stripe's lock in turn)

 private:
  RowCache() = default;

  // Row -> slot: open addressing with linear probing over 2 entries per slot (at most half
  // full), entries deleted by backward shift (no tombstones), so a probe stays short and touches
  // one or two cache lines.
  struct Entry {
    int64_t row = -1;  // -1: empty (rows are >= 0)
    uint32_t slot = 0;
  };
  struct alignas(64) Stripe {
    std::mutex mu;
    std::vector<Entry> map;
    std::vector<int64_t> row;  // slot -> row
    std::vector<uint8_t> referenced;
    uint8_t* data = nullptr;  // this stripe's slots
    uint32_t capacity = 0, used = 0, hand = 0;

    // The entry a row's probe starts at: the hash's top 32 bits scaled to the map's size.
    uint64_t Home(int64_t r) const {
      return ((static_cast<uint64_t>(r) * 0xD6E8FEB86659FD93ull) >> 32) * map.size() >> 32;
    }
    uint64_t Next(uint64_t h) const { return h + 1 == map.size() ? 0 : h + 1; }
    const Entry* Find(int64_t r) const {
      for (uint64_t h = Home(r);; h = Next(h)) {
        if (map[h].row == r) return &map[h];
        if (map[h].row < 0) return nullptr;
      }
    }
    void Insert(int64_t r, uint32_t s) {
      uint64_t h = Home(r);
      while (map[h].row >= 0) h = Next(h);
      map[h] = Entry{r, s};
    }
    void Erase(int64_t r);
  };
  Stripe& StripeOf(int64_t row) {
    if (num_stripes_ == 1) return stripes_[0];
    // Fibonacci hashing: neighbouring rows land in different stripes.
    return stripes_[(static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull) >> shift_];
  }

  uint64_t row_bytes_ = 0;
  int64_t slots_ = 0;
  int shift_ = 64;
  std::shared_ptr<uint8_t> memory_;
  std::unique_ptr<Stripe[]> stripes_;
  size_t num_stripes_ = 0;
};

}  // namespace shardrec::serving
