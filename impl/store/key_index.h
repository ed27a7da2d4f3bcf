// The store's in-memory index: key -> location (segment and slot, format.h PackLoc), an
// open-addressing table of 16-byte entries with linear probing and backward-shift deletion (no
// tombstones), kept at most 3/4 full: 16 B per key at best, 21-43 B per key over a doubling
// (index_bytes in the stats). Not thread-safe: the store guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace shardrec::store {

class KeyIndex {
 public:
  KeyIndex();

  // 0 when absent.
  uint64_t Find(int64_t key) const;
  // Starts loading key's home slot into the cache: a batch prefetches a few keys ahead of its
  // Finds, so their cache misses overlap (a large table misses on nearly every lookup).
  void Prefetch(int64_t key) const { __builtin_prefetch(&table_[Home(key)]); }
  // Sets key's location (loc != 0); returns the previous one, or 0.
  uint64_t Upsert(int64_t key, uint64_t loc);
  // Removes key; returns its location, or 0 when it was absent.
  uint64_t Erase(int64_t key);

  size_t size() const { return size_; }
  size_t memory_bytes() const { return capacity_ * sizeof(Entry); }

  template <typename F>
  void ForEach(F&& f) const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (table_[i].loc != 0) f(table_[i].key, table_[i].loc);
    }
  }

 private:
  struct Entry {
    int64_t key;
    uint64_t loc;  // 0: empty
  };
  size_t Home(int64_t key) const;
  void Grow();

  std::unique_ptr<Entry[]> table_;
  size_t capacity_ = 0;  // a power of two
  size_t size_ = 0;
};

}  // namespace shardrec::store
