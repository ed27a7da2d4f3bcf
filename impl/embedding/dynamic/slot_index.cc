// The dynamic shard's id -> slot index (slot_index.h).
#include "impl/embedding/dynamic/slot_index.h"

#include "impl/core/check.h"

namespace shardrec::embedding::dynamic {

void SlotIndex::Reset(int64_t slots) {
  SR_CHECK(slots >= 1 && slots < INT32_MAX);
  buckets_.assign(Buckets(slots), Bucket{});
}

// Every walk below visits each bucket at most once. On a consistent index it ends long before
// (the table is at most 2/3 full); one left inconsistent (an id given two slots by a corrupt
// checkpoint used to be one) must fail as an internal error, never spin forever: a caller
// cannot interrupt a forward stuck here, and shardrec_comm_abort does not reach it.
void SlotIndex::Insert(int64_t id, int32_t slot) {
  const uint64_t h = Hash(id);
  size_t b = Home(h);
  for (size_t walked = 0; walked < buckets_.size(); ++walked, b = Next(b)) {
    Bucket& bucket = buckets_[b];
    const uint32_t empty = Match(bucket, 0);
    if (empty == 0) continue;
    const int k = __builtin_ctz(empty);
    bucket.tags[k] = Tag(h);
    bucket.slots[k] = static_cast<uint32_t>(slot);
    // The full buckets it passed count it (taken back by Erase).
    for (size_t p = Home(h); p != b; p = Next(p)) ++buckets_[p].overflow;
    return;
  }
  throw StatusError(Status::Internal("dynamic shard index: no free entry for id ", id,
                                     " (more ids than slots: its state is inconsistent)"));
}

void SlotIndex::Erase(int64_t id, const int64_t* ids, size_t stride) {
  const uint64_t h = Hash(id);
  const uint8_t tag = Tag(h);
  const size_t home = Home(h);
  size_t b = home;
  for (size_t walked = 0; walked < buckets_.size(); ++walked, b = Next(b)) {
    Bucket& bucket = buckets_[b];
    for (uint32_t m = Match(bucket, tag); m != 0; m &= m - 1) {
      const int k = __builtin_ctz(m);
      if (ids[bucket.slots[k] * stride] != id) continue;
      bucket.tags[k] = 0;
      // The buckets this id passed at insertion (all full then) counted it.
      for (size_t p = home; p != b; p = Next(p)) --buckets_[p].overflow;
      return;
    }
  }
  throw StatusError(Status::Internal("dynamic shard index: id ", id,
                                     " to erase is not in the index (its state is inconsistent)"));
}

}  // namespace shardrec::embedding::dynamic
