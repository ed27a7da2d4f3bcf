// The dynamic shard's admission counts (admission_sketch.h).
#include "impl/embedding/dynamic/admission_sketch.h"

#include <algorithm>
#include <bit>

#include "impl/embedding/dynamic/placement.h"
#include "impl/sharding/types.h"

namespace shardrec::embedding::dynamic {

uint64_t AdmissionSketch::Width(int64_t slots) {
  return std::bit_ceil(std::max<uint64_t>(64, static_cast<uint64_t>(slots) * 2));
}

void AdmissionSketch::Reset(int64_t slots) {
  const uint64_t width = Width(slots);
  counters_.assign(kDepth * width, 0);
  mask_ = width - 1;
}

uint32_t AdmissionSketch::Add(int64_t id, uint32_t n) {
  size_t at[kDepth];
  uint32_t low = UINT32_MAX;
  for (int d = 0; d < kDepth; ++d) {
    // One independent mix per row (the seeds are arbitrary odd constants, fixed).
    const uint64_t h = Mix64(static_cast<uint64_t>(id) + 0xd1b54a32d192ed03ull * (d + 1));
    at[d] = static_cast<size_t>(d) * (mask_ + 1) + static_cast<size_t>(h & mask_);
    low = std::min<uint32_t>(low, counters_[at[d]]);
  }
  // Conservative update: only counters below the new estimate rise, which keeps the estimate an
  // upper bound with less overcounting than adding n everywhere.
  // Saturates at the highest admission threshold validation lets through (DynamicConfig), so every
  // allowed threshold is reachable.
  const uint32_t est = std::min<uint32_t>(low + n, 65535u);
  static_assert(sharding::DynamicConfig::kMaxAdmissionThreshold == 65535);
  for (int d = 0; d < kDepth; ++d)
    counters_[at[d]] = static_cast<uint16_t>(std::max<uint32_t>(counters_[at[d]], est));
  return est;
}

void AdmissionSketch::Halve() {
  for (uint16_t& c : counters_) c = static_cast<uint16_t>(c >> 1);
}

}  // namespace shardrec::embedding::dynamic
