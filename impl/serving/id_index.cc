// Building the served dynamic tables' id index; the hash is splitmix64's finaliser, which spreads
// sequential and strided ids evenly over the buckets.
#include "impl/serving/id_index.h"

#include <new>
#include <string>

namespace shardrec::serving {

uint64_t IdIndex::Home(int64_t id) const {
  uint64_t z = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) & mask_;
}

Status IdIndex::Build(const int64_t* ids, int64_t n, const std::string& table,
                      std::shared_ptr<const IdIndex>* out) {
  auto index = std::make_shared<IdIndex>();
  uint64_t size = 2;
  while (size < 2 * static_cast<uint64_t>(n)) size *= 2;
  try {
    index->entries_.resize(size);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("table ", table, ": id index of ", size, " entries");
  }
  index->mask_ = size - 1;
  for (int64_t r = 0; r < n; ++r) {
    uint64_t h = index->Home(ids[r]);
    while (index->entries_[h].row >= 0) {
      if (index->entries_[h].id == ids[r])
        return Status::InvalidArgument("table ", table, ": id ", ids[r], " appears twice");
      h = (h + 1) & index->mask_;
    }
    index->entries_[h] = Entry{ids[r], r};
  }
  *out = std::move(index);
  return Status::Ok();
}

}  // namespace shardrec::serving
