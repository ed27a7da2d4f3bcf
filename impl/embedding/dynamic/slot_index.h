// The id -> slot index of one dynamic shard: open addressing with linear probing over a table of
// 1.5 x slots entries, sized once (so it is never more than 2/3 full), each entry a 1-byte tag of
// the id's hash and a 4-byte slot number in two arrays; the ids themselves are kept once, per
// slot, by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "impl/embedding/dynamic/huge_page_allocator.h"
#include "impl/embedding/dynamic/placement.h"

namespace shardrec::embedding::dynamic {

class SlotIndex {
 public:
  static constexpr int32_t kNone = -1;

  // An empty index for up to `slots` (1 <= slots < 2^31 - 1) entries.
  void Reset(int64_t slots);
  // The slot of `id`, or kNone; `ids[slot]` is each stored slot's id. Inline: it is the inner
  // loop of every dynamic lookup. A miss usually reads only tags_ (a tag matches another id's
  // with probability 1/255 per entry passed).
  int32_t Find(int64_t id, const int64_t* ids) const {
    const uint64_t h = Hash(id);
    const uint8_t tag = Tag(h);
    size_t i = Home(h);
    // The slot numbers of the first entries are fetched while the tags are compared, so a hit
    // waits for two memory reads in a row (tags and slot numbers together, then the id), not
    // three.
    __builtin_prefetch(slots_.data() + i);
#if defined(__SSE2__)
    // 16 entries at once: the tags that match before the first empty entry are the only
    // candidates, and a miss whose group holds an empty entry ends without a branch per entry
    // (mispredicted exits of a byte loop were what made misses slow).
    const __m128i want = _mm_set1_epi8(static_cast<char>(tag));
    for (;;) {
      const __m128i g = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tags_.data() + i));
      const uint32_t empty =
          static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(g, _mm_setzero_si128())));
      uint32_t match = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(g, want)));
      if (empty != 0) match &= (empty & (0u - empty)) - 1;
      for (; match != 0; match &= match - 1) {
        size_t j = i + static_cast<size_t>(__builtin_ctz(match));
        if (j >= entries_) j -= entries_;
        const int32_t s = static_cast<int32_t>(slots_[j]);
        if (ids[s] == id) return s;
      }
      if (empty != 0) return kNone;
      i += kGroup;
      if (i >= entries_) i -= entries_;
    }
#else
    for (;; i = Next(i)) {
      const uint8_t t = tags_[i];
      if (t == 0) return kNone;
      if (t == tag) {
        const int32_t s = static_cast<int32_t>(slots_[i]);
        if (ids[s] == id) return s;
      }
    }
#endif
  }
  // Asks the cache for the start of `id`'s probe run (a lookup soon after is then faster).
  void Prefetch(int64_t id) const {
    const size_t i = Home(Hash(id));
    __builtin_prefetch(tags_.data() + i);
    __builtin_prefetch(slots_.data() + i);
  }
  // The slot `id` most likely has, from its home entry alone (no id compared), or kNone: for
  // prefetching the slot's data before a Find, never for a decision.
  int32_t Guess(int64_t id) const {
    const uint64_t h = Hash(id);
    const size_t i = Home(h);
    return tags_[i] != Tag(h) ? kNone : static_cast<int32_t>(slots_[i]);
  }
  // Adds id -> slot (id not present; at most `slots` entries).
  void Insert(int64_t id, int32_t slot, const int64_t* ids);
  // Removes `id` (present), moving later entries of its probe run back so no tombstone is left
  // and lookups stay as short as at insertion.
  void Erase(int64_t id, const int64_t* ids);
  // Bytes of the table.
  size_t bytes() const { return tags_.size() * sizeof(uint8_t) + slots_.size() * sizeof(uint32_t); }

 private:
  // Entry i is empty when tags_[i] == 0; otherwise slots_[i] is its slot and tags_[i] (1..255)
  // eight bits of its id's hash. The tags are a separate byte array so that a probe, and above
  // all a miss, reads 1 byte per entry (the whole array is 1.5 bytes per slot and stays in the
  // cache far better than the 4-byte slot numbers would).
  // A second mix: the row-wise placement used Mix64(id) mod blocks, so that value is alike in its
  // low bits within one shard and would crowd its table. The home comes from the high bits
  // (times the table size) and the tag from the low 8 bits, so they are nearly independent.
  static uint64_t Hash(int64_t id) {
    return Mix64(static_cast<uint64_t>(id) ^ 0x632be59bd9b4e019ull);
  }
  size_t Home(uint64_t h) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(h) * entries_) >> 64);
  }
  static uint8_t Tag(uint64_t h) {
    const auto t = static_cast<uint8_t>(h);
    return t == 0 ? 1 : t;
  }
  size_t Next(size_t i) const { return i + 1 == entries_ ? 0 : i + 1; }
  // Writes entry i's tag, and its clone past the end when i < kGroup - 1.
  void SetTag(size_t i, uint8_t t) {
    tags_[i] = t;
    if (i + 1 < kGroup) tags_[entries_ + i] = t;
  }

  // Entries probed at once. tags_ has kGroup - 1 bytes more than there are entries, a copy of
  // the first ones, so a group starting near the end reads the entries after the wrap.
  static constexpr size_t kGroup = 16;
  size_t entries_ = 0;
  HugeVector<uint8_t> tags_;
  HugeVector<uint32_t> slots_;
};

}  // namespace shardrec::embedding::dynamic
