#include "impl/store/key_index.h"

namespace shardrec::store {
namespace {

constexpr size_t kInitialCapacity = 1024;

// splitmix64's finalizer: sequential ids spread over the table.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

KeyIndex::KeyIndex() : table_(new Entry[kInitialCapacity]()), capacity_(kInitialCapacity) {}

size_t KeyIndex::Home(int64_t key) const {
  return Mix(static_cast<uint64_t>(key)) & (capacity_ - 1);
}

uint64_t KeyIndex::Find(int64_t key) const {
  for (size_t i = Home(key);; i = (i + 1) & (capacity_ - 1)) {
    const Entry& e = table_[i];
    if (e.loc == 0) return 0;
    if (e.key == key) return e.loc;
  }
}

uint64_t KeyIndex::Upsert(int64_t key, uint64_t loc) {
  if ((size_ + 1) * 4 > capacity_ * 3) Grow();
  for (size_t i = Home(key);; i = (i + 1) & (capacity_ - 1)) {
    Entry& e = table_[i];
    if (e.loc == 0) {
      e = {key, loc};
      ++size_;
      return 0;
    }
    if (e.key == key) {
      const uint64_t old = e.loc;
      e.loc = loc;
      return old;
    }
  }
}

uint64_t KeyIndex::Erase(int64_t key) {
  const size_t mask = capacity_ - 1;
  size_t i = Home(key);
  for (;; i = (i + 1) & mask) {
    if (table_[i].loc == 0) return 0;
    if (table_[i].key == key) break;
  }
  const uint64_t old = table_[i].loc;
  // Backward shift: move later members of the probe run into the hole when their home lies at or
  // before it (cyclically), so lookups never need tombstones.
  size_t hole = i;
  for (size_t j = (i + 1) & mask; table_[j].loc != 0; j = (j + 1) & mask) {
    const size_t home = Home(table_[j].key);
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      table_[hole] = table_[j];
      hole = j;
    }
  }
  table_[hole] = {0, 0};
  --size_;
  return old;
}

void KeyIndex::Grow() {
  std::unique_ptr<Entry[]> old = std::move(table_);
  const size_t old_capacity = capacity_;
  capacity_ *= 2;
  table_.reset(new Entry[capacity_]());
  size_ = 0;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (old[i].loc != 0) Upsert(old[i].key, old[i].loc);
  }
}

}  // namespace shardrec::store
