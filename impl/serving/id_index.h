// The id -> row index of a served dynamic table: open addressing with linear probing, built once
// per version (versions are immutable, so there is no insert or erase after the build). The hash
// is keyed by a secret of each index, so no one choosing ids can make them share a probe run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::serving {

class IdIndex {
 public:
  // Indexes ids[0..n) (row i holds ids[i]). kInvalidArgument naming `table` and the id when an
  // id appears twice; kOutOfMemory.
  static Status Build(const int64_t* ids, int64_t n, const std::string& table,
                      std::shared_ptr<const IdIndex>* out);

  // The row of `id`, or -1.
  int64_t Find(int64_t id) const {
    for (uint64_t h = Home(id);; h = (h + 1) & mask_) {
      const Entry& e = entries_[h];
      if (e.row < 0) return -1;
      if (e.id == id) return e.row;
    }
  }
  void Prefetch(int64_t id) const { __builtin_prefetch(&entries_[Home(id)]); }
  size_t bytes() const { return entries_.size() * sizeof(Entry); }

 private:
  // Id and row side by side: a hit costs one cache line, not an index entry and then the id.
  struct Entry {
    int64_t id = 0;
    int64_t row = -1;  // -1: empty
  };
  uint64_t Home(int64_t id) const;

  std::vector<Entry> entries_;  // a power of two >= 2 x rows, so at most half full
  uint64_t mask_ = 0;
  uint64_t key_ = 0;  // the hash's secret (id_index.cc, NewKey)
};

}  // namespace shardrec::serving
