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
#include <unordered_map>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::serving {

class RowCache {
 public:
  // DRAM a slot costs beyond its row: its row number, reference bit and map entry (a node and a
  // bucket of the stripe's hash map), rounded up.
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

  struct alignas(64) Stripe {
    std::mutex mu;
    std::unordered_map<int64_t, uint32_t> map;  // row -> slot
    std::vector<int64_t> row;                   // slot -> row
    std::vector<uint8_t> referenced;
    uint8_t* data = nullptr;  // this stripe's slots
    uint32_t capacity = 0, used = 0, hand = 0;
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
