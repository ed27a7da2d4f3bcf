// The dynamic shard's id -> slot index (slot_index.h).
#include "impl/embedding/dynamic/slot_index.h"

#include "impl/core/check.h"

namespace shardrec::embedding::dynamic {

void SlotIndex::Reset(int64_t slots) {
  SR_CHECK(slots >= 1 && slots < INT32_MAX);
  buckets_.assign(Buckets(slots), Bucket{});
}

void SlotIndex::Insert(int64_t id, int32_t slot) {
  const uint64_t h = Hash(id);
  for (size_t b = Home(h);; b = Next(b)) {
    Bucket& bucket = buckets_[b];
    const uint32_t empty = Match(bucket, 0);
    if (empty == 0) {
      ++bucket.overflow;
      continue;
    }
    const int k = __builtin_ctz(empty);
    bucket.tags[k] = Tag(h);
    bucket.slots[k] = static_cast<uint32_t>(slot);
    return;
  }
}

void SlotIndex::Erase(int64_t id, const int64_t* ids, size_t stride) {
  const uint64_t h = Hash(id);
  const uint8_t tag = Tag(h);
  const size_t home = Home(h);
  size_t b = home;
  for (;; b = Next(b)) {
    Bucket& bucket = buckets_[b];
    uint32_t m = Match(bucket, tag);
    for (; m != 0; m &= m - 1) {
      const int k = __builtin_ctz(m);
      if (ids[bucket.slots[k] * stride] == id) break;
    }
    if (m != 0) {
      bucket.tags[__builtin_ctz(m)] = 0;
      break;
    }
  }
  // The buckets this id passed at insertion (all full then) counted it.
  for (size_t p = home; p != b; p = Next(p)) --buckets_[p].overflow;
}

}  // namespace shardrec::embedding::dynamic
