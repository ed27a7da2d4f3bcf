// The admission counts of one dynamic shard: a count-min sketch (4 rows of saturating 16-bit
// counters, conservative update) of the occurrences of ids that have no row yet. Its memory is
// fixed at creation; an estimate is never below the true count, so a collision can only admit an
// id early.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardrec::embedding::dynamic {

class AdmissionSketch {
 public:
  static constexpr int kDepth = 4;

  // Zeroed counters for a shard of `slots` slots: width a power of two >= 2 x slots (>= 64).
  void Reset(int64_t slots);
  // Adds `n` occurrences of `id` and returns its estimated count (saturating at 65535).
  uint32_t Add(int64_t id, uint32_t n);
  // Halves every counter, rounded down (the decay of admission counts). The minimum over an id's
  // counters halves the same way, so an estimate stays at least the halved true count.
  void Halve();
  size_t bytes() const { return counters_.size() * sizeof(uint16_t); }
  // Bytes of the counters Reset(slots) makes.
  static size_t BytesFor(int64_t slots) { return kDepth * Width(slots) * sizeof(uint16_t); }
  // The counters as saved by checkpoints (empty when the shard keeps no sketch); Restore takes
  // counters of the same size (a shard of the same slot count) back.
  const std::vector<uint16_t>& counters() const { return counters_; }
  void Restore(const std::vector<uint16_t>& counters) { counters_ = counters; }

 private:
  static uint64_t Width(int64_t slots);
  std::vector<uint16_t> counters_;  // kDepth rows of width_ counters
  uint64_t mask_ = 0;
};

}  // namespace shardrec::embedding::dynamic
