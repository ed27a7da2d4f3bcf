// Building the served dynamic tables' id index; the hash is splitmix64's finaliser, which spreads
// sequential and strided ids evenly over the buckets, keyed by a secret drawn per index. Unkeyed,
// the finaliser is invertible: ids chosen to share their home bucket (a delta from the network, a
// serving file or checkpoint from elsewhere) made one probe run of every id, and building the
// index of n of them took n^2 / 2 probes (32k ids: 33 s under the sanitizers; a million: hours),
// as did each lookup that missed in it.
#include "impl/serving/id_index.h"

#include <atomic>
#include <chrono>
#include <new>
#include <random>
#include <string>

namespace shardrec::serving {
namespace {

// A key no file or request can know: from the OS's entropy once per process (the steady clock's
// count where it has none), then a distinct one per index.
uint64_t NewKey() {
  static const uint64_t process_key = [] {
    try {
      std::random_device rd;
      return (static_cast<uint64_t>(rd()) << 32) ^ rd();
    } catch (const std::exception&) {
      return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    }
  }();
  static std::atomic<uint64_t> count{0};
  return process_key + 0x9e3779b97f4a7c15ull * count.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

uint64_t IdIndex::Home(int64_t id) const {
  uint64_t z = (static_cast<uint64_t>(id) ^ key_) + 0x9e3779b97f4a7c15ull;
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
  index->key_ = NewKey();
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
