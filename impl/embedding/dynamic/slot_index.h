// The id -> slot index of one dynamic shard: a fixed table of 64-byte buckets, each 12 entries
// (a 1-byte tag of the id's hash and a 4-byte slot number) and a count of the entries that
// passed it, sized once at 1.5 entries per slot (8 bytes per slot); the ids themselves are kept
// once, per slot, by the caller.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "impl/core/prefetch.h"
#include "impl/embedding/dynamic/huge_page_allocator.h"

namespace shardrec::embedding::dynamic {

class SlotIndex {
 public:
  static constexpr int32_t kNone = -1;

  // An empty index for up to `slots` (1 <= slots < 2^31 - 1) entries.
  void Reset(int64_t slots);
  // The slot of `id`, or kNone; `ids[slot * stride]` is each stored slot's id (the caller keeps
  // them in its per-slot records). One key at a time; lookups of many ids use FindAll, whose
  // inner loop is the same probe. A hit reads its bucket (one cache line) and the id of each
  // entry whose tag matches (a tag matches another id's with probability 1/255 per entry); a
  // miss usually reads its bucket alone, and goes on to the next only when an entry overflowed
  // past it.
  int32_t Find(int64_t id, const int64_t* ids, size_t stride = 1) const {
    return FindHashed(Hash(id), id, ids, stride);
  }
  // Find of every keys[i], calling emit(i, slot) in order (slot: kNone when absent). The cache
  // misses of consecutive keys overlap: each key's bucket is fetched some keys before it is
  // probed and the records its bucket guesses (up to two) half as many before (by then the
  // bucket has arrived), and each key is hashed once, for all three. The guesses then settle
  // most probes without reading the bucket again: a guessed slot whose id is the key is its slot
  // (an entry names only a stored id's slot), and a home bucket with no matching tag that no id
  // passed settles a miss; only the rest probe in full. What lookups of many ids call (the training
  // translation too). emit may rewrite keys[i] (the keys ahead are read before it) but must not
  // change the index or the ids (the guesses ahead were read from them).
  template <typename Emit>
  void FindAll(std::span<const int64_t> keys, const int64_t* ids, size_t stride,
               Emit&& emit) const {
    if (bytes() > kFarBytes) {
      FindAllAhead<kFarBucketAhead, kFarRecordAhead>(keys, ids, stride, emit);
    } else {
      FindAllAhead<kBucketAhead, kRecordAhead>(keys, ids, stride, emit);
    }
  }
  // FindAll's distances, in keys. An index beyond the last-level cache (more than kFarBytes)
  // waits on memory, whose latency needs more keys in flight: 64 / 32 measured faster there
  // than 32 / 16 (16M keys, 144-256 MB), while for the step's tables (a few MB) it made the
  // evicting step 1-3 % slower and 32 / 16 stays (which had measured better than 16 / 8 and no
  // worse than 48 / 24; tests/bench/RESULTS.md).
  static constexpr size_t kBucketAhead = 32, kRecordAhead = 16;
  static constexpr size_t kFarBucketAhead = 64, kFarRecordAhead = 32;
  static constexpr size_t kFarBytes = size_t{32} << 20;
  // FindAll with the bucket fetched kBucket keys and the guessed record kRecord keys ahead
  // (FindAll picks them by the index's size; the tests run both).
  template <size_t kBucket, size_t kRecord, typename Emit>
  void FindAllAhead(std::span<const int64_t> keys, const int64_t* ids, size_t stride,
                    Emit& emit) const {
    constexpr size_t kRing = 2 * kBucket;  // hashes of the keys in flight
    static_assert(kRecord < kBucket && (kRing & (kRing - 1)) == 0);
    uint64_t hashes[kRing];
    Guesses guesses[kRing];  // what Guess said of each key kRecord keys before its probe
    const size_t n = keys.size();
    for (size_t i = 0; i < std::min(n, kBucket); ++i) {
      hashes[i] = Hash(keys[i]);
      core::PrefetchLine(&buckets_[Home(hashes[i])]);
    }
    for (size_t i = 0; i < std::min(n, kRecord); ++i) guesses[i] = Guesses{};
    for (size_t i = 0; i < n; ++i) {
      if (i + kBucket < n) {
        const uint64_t h = Hash(keys[i + kBucket]);
        hashes[(i + kBucket) % kRing] = h;
        core::PrefetchLine(&buckets_[Home(h)]);
      }
      if (i + kRecord < n) {
        const Guesses g = Guess(hashes[(i + kRecord) % kRing]);
        guesses[(i + kRecord) % kRing] = g;
        if (g.first >= 0) core::PrefetchLine(ids + static_cast<size_t>(g.first) * stride);
        if (g.second >= 0) core::PrefetchLine(ids + static_cast<size_t>(g.second) * stride);
      }
      const int64_t key = keys[i];
      const Guesses g = guesses[i % kRing];
      if (g.first >= 0 && ids[static_cast<size_t>(g.first) * stride] == key) {
        emit(i, g.first);
      } else if (g.first == kAbsent) {
        emit(i, kNone);
      } else if (g.second >= 0 && ids[static_cast<size_t>(g.second) * stride] == key) {
        emit(i, g.second);
      } else {
        emit(i, FindHashed(hashes[i % kRing], key, ids, stride));
      }
    }
  }
  // Asks the cache for `id`'s bucket (a lookup soon after is then faster).
  void Prefetch(int64_t id) const { core::PrefetchLine(&buckets_[Home(Hash(id))]); }
  // Adds id -> slot (id not present; at most `slots` entries). Throws StatusError (internal)
  // when no entry is free, which only more entries than slots can cause.
  void Insert(int64_t id, int32_t slot);
  // Removes `id` (present). No tombstone: the overflow counts of the buckets it had passed are
  // taken back, so lookups stay as short as if it had never been there. Throws StatusError
  // (internal), changing nothing, when `id` is not in the index (an inconsistent state).
  void Erase(int64_t id, const int64_t* ids, size_t stride = 1);
  // Bytes of the table.
  size_t bytes() const { return buckets_.size() * sizeof(Bucket); }
  // Bytes of the table Reset(slots) builds.
  static size_t BytesFor(int64_t slots) { return Buckets(slots) * sizeof(Bucket); }

 private:
  // Find, with `h` = Hash(id). Each bucket is visited at most once, so even an inconsistent
  // index (overflow counts left nonzero everywhere) answers (slot_index.cc).
  int32_t FindHashed(uint64_t h, int64_t id, const int64_t* ids, size_t stride) const {
    const uint8_t tag = Tag(h);
    size_t b = Home(h);
    // The walk bound is tested only when a bucket sends the walk on (rare), not on each hit.
    for (size_t walked = 1;; ++walked, b = Next(b)) {
      const Bucket& bucket = buckets_[b];
      for (uint32_t m = Match(bucket, tag); m != 0; m &= m - 1) {
        const auto s = static_cast<int32_t>(bucket.slots[__builtin_ctz(m)]);
        if (ids[static_cast<size_t>(s) * stride] == id) return s;
      }
      if (bucket.overflow == 0 || walked >= buckets_.size()) return kNone;
    }
  }
  // From the home bucket of hash `h` alone, no id compared: the slots of its first two entries
  // whose tag matches (the id's among them, unless tags collided or the id sits past its home),
  // else first = kAbsent when no stored id passed the bucket (the id is not stored), else
  // kUnknown with the next bucket asked for (where the walk goes on). The second guess settles
  // the hits whose home holds another id of the same tag ahead of theirs (about 7 entries x
  // 1/255 at fill 0.9) without a walk whose record was never prefetched.
  static constexpr int32_t kUnknown = -1, kAbsent = -2;
  struct Guesses {
    int32_t first = kUnknown, second = kUnknown;
  };
  Guesses Guess(uint64_t h) const {
    const size_t b = Home(h);
    const Bucket& bucket = buckets_[b];
    uint32_t m = Match(bucket, Tag(h));
    Guesses g;
    if (m != 0) {
      g.first = static_cast<int32_t>(bucket.slots[__builtin_ctz(m)]);
      m &= m - 1;
      if (m != 0) g.second = static_cast<int32_t>(bucket.slots[__builtin_ctz(m)]);
    } else if (bucket.overflow == 0) {
      g.first = kAbsent;
    } else {
      core::PrefetchLine(&buckets_[Next(b)]);
    }
    return g;
  }

  // 1.5 entries per slot (8 slots per 12-entry bucket, 8 bytes per slot): at most 2/3 full, so
  // few buckets overflow (a miss then reads one cache line) and every walk finds an empty entry.
  static size_t Buckets(int64_t slots) { return static_cast<size_t>((slots + 7) / 8); }
  static constexpr int kWidth = 12;  // entries per bucket
  // One cache line. tags[k] == 0: entry k is empty; else slots[k] is its slot. overflow: how many
  // stored ids passed this bucket, full, on their way from their home to where they sit (like
  // F14's overflow counts); while it is 0 a lookup ends here.
  struct alignas(64) Bucket {
    uint8_t tags[kWidth];
    uint32_t overflow;
    uint32_t slots[kWidth];
  };
  static_assert(sizeof(Bucket) == 64);

  // The bit mask of the entries of `bucket` whose tag is `tag` (0: the empty ones).
  static uint32_t Match(const Bucket& bucket, uint8_t tag) {
#if defined(__SSE2__)
    const __m128i g = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&bucket));
    const auto m = static_cast<uint32_t>(
        _mm_movemask_epi8(_mm_cmpeq_epi8(g, _mm_set1_epi8(static_cast<char>(tag)))));
    return m & ((1u << kWidth) - 1);
#else
    uint32_t m = 0;
    for (int k = 0; k < kWidth; ++k) m |= static_cast<uint32_t>(bucket.tags[k] == tag) << k;
    return m;
#endif
  }
  // Not the placement's hash: the row-wise placement puts an id on block Mix64(id) mod blocks, so
  // that value is alike in its low bits within one shard and would crowd its table. One 64 x 64 ->
  // 128-bit multiply whose halves are folded (as abseil hashes integers): a lookup's loads wait on
  // this hash, and with Mix64's chain of two multiplies one key at a time was measurably slower
  // (tests/bench/RESULTS.md). The home bucket comes from the high bits (times the bucket count) and
  // the tag from the low 8 bits, so they are nearly independent.
  static uint64_t Hash(int64_t id) {
    const unsigned __int128 p =
        static_cast<unsigned __int128>(static_cast<uint64_t>(id) ^ 0x632be59bd9b4e019ull) *
        0x9e3779b97f4a7c15ull;
    return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
  }
  size_t Home(uint64_t h) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(h) * buckets_.size()) >> 64);
  }
  static uint8_t Tag(uint64_t h) {
    const auto t = static_cast<uint8_t>(h);
    return t == 0 ? 1 : t;
  }
  size_t Next(size_t b) const { return b + 1 == buckets_.size() ? 0 : b + 1; }

  HugeVector<Bucket> buckets_;
};

}  // namespace shardrec::embedding::dynamic
