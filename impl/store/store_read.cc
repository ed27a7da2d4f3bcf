// Reads: the index is consulted under a shared lock (records still in the tail are copied from
// memory there); the pages of the others are read outside it, batched through a pooled reader,
// and every record is checked (its checksum, seeded with its place, and its key) before use.
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "impl/store/log_store_parts.h"

namespace shardrec::store {

std::unique_ptr<PageReader> LogStore::TakeReader() {
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    if (!readers_.empty()) {
      std::unique_ptr<PageReader> r = std::move(readers_.back());
      readers_.pop_back();
      return r;
    }
  }
  std::unique_ptr<PageReader> r =
      MakePageReader(o_.queue_depth, geo_.pages * kPageBytes, t_.try_io_uring);
  uring_state_.store(r->uses_io_uring() ? 1 : 0);
  return r;
}

void LogStore::ReturnReader(std::unique_ptr<PageReader> r) {
  std::lock_guard<std::mutex> lock(readers_mu_);
  readers_.push_back(std::move(r));
}

bool LogStore::uses_io_uring() const {
  if (uring_state_.load() < 0) {
    auto* self = const_cast<LogStore*>(this);
    self->ReturnReader(self->TakeReader());
  }
  return uring_state_.load() == 1;
}

Status LogStore::ReadRecords(const std::vector<const Segment*>& segs,
                             const std::vector<uint32_t>& slots, const std::vector<int64_t>& keys,
                             const std::vector<size_t>& out_index, uint8_t* out, bool* found) {
  if (segs.empty()) return Status::Ok();
  const uint32_t len = static_cast<uint32_t>(geo_.pages * kPageBytes);
  // One read per distinct page: records of one Get that share a page (rows written back
  // together and missed together) cost one I/O. Pages are grouped by a small hash table in the
  // order they are first asked for (sorting them into file order cost more CPU and gave fewer
  // reads per second on the virtio disk measured, docs/disk-tier.md).
  const size_t n = segs.size();
  auto page_of = [&](size_t j) { return geo_.PageOffset(slots[j]); };
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  std::vector<uint64_t> hkey(cap);
  std::vector<uint32_t> hgroup(cap, UINT32_MAX);
  std::vector<uint32_t> group_of(n);
  uint32_t groups = 0;
  for (size_t j = 0; j < n; ++j) {
    const uint64_t key = (static_cast<uint64_t>(segs[j]->id) << 32) ^ (slots[j] / geo_.per_page);
    size_t h = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
    while (hgroup[h] != UINT32_MAX && hkey[h] != key) h = (h + 1) & (cap - 1);
    if (hgroup[h] == UINT32_MAX) {
      hkey[h] = key;
      hgroup[h] = groups++;
    }
    group_of[j] = hgroup[h];
  }
  // Counting sort of the records by page: order[first[p] .. first[p + 1]) are page p's.
  std::vector<size_t> first(groups + 1, 0);
  for (size_t j = 0; j < n; ++j) ++first[group_of[j] + 1];
  for (uint32_t p = 0; p < groups; ++p) first[p + 1] += first[p];
  std::vector<size_t> order(n);
  {
    std::vector<size_t> at(first.begin(), first.end() - 1);
    for (size_t j = 0; j < n; ++j) order[at[group_of[j]]++] = j;
  }
  const size_t pages = groups;
  // A buffered read copies only the bytes asked for out of the page cache: from the page's first
  // record of this Get to the end of its last (a 4 KiB copy per page was the prefetch thread's
  // largest cost, docs/disk-tier.md). An O_DIRECT read stays whole pages, as that path needs.
  std::vector<uint32_t> skip(pages, 0), span(pages, len);
  for (size_t p = 0; p < pages; ++p) {
    if (segs[order[first[p]]]->direct_fd >= 0) continue;
    size_t lo = len, hi = 0;
    for (size_t k = first[p]; k < first[p + 1]; ++k) {
      const size_t at = geo_.InPage(slots[order[k]]);
      lo = std::min(lo, at);
      hi = std::max(hi, at + geo_.record_bytes);
    }
    skip[p] = static_cast<uint32_t>(lo);
    span[p] = static_cast<uint32_t>(hi - lo);
  }
  std::unique_ptr<PageReader> reader = TakeReader();
  auto prepare = [&](size_t p) {
    const size_t j = order[first[p]];
    return PageRead{segs[j]->read_fd(), page_of(j) + skip[p], span[p]};
  };
  std::unique_ptr<uint8_t, decltype(&free)> fallback(nullptr, &free);
  auto done = [&](size_t p, const uint8_t* data, ssize_t res) -> Status {
    const size_t j0 = order[first[p]];
    const Segment& seg = *segs[j0];
    if (res == -EINVAL && seg.direct_fd >= 0) {
      // The file system took O_DIRECT at open but refuses this read: read it buffered.
      if (!fallback) {
        void* m = nullptr;
        if (posix_memalign(&m, kPageBytes, len) != 0) {
          return Status::OutOfMemory("store ", o_.dir, ": no read buffer");
        }
        fallback.reset(static_cast<uint8_t*>(m));
      }
      res = ::pread(seg.fd, fallback.get(), len, static_cast<off_t>(page_of(j0)));
      if (res < 0) res = -errno;
      data = fallback.get();
      direct_ok_.store(false);
    }
    if (res < 0) {
      errno = static_cast<int>(-res);
      return StoreErrno(o_.dir, "cannot read segment", seg.path);
    }
    if (static_cast<size_t>(res) < span[p]) {
      return Status::Corrupt("store ", o_.dir, ": segment ", seg.path, " ends inside slot ",
                             slots[j0], " (", res, " of ", span[p], " bytes read)");
    }
    for (size_t k = first[p]; k < first[p + 1]; ++k) {
      const size_t j = order[k];
      int64_t key = 0;
      const uint8_t* rec = data + geo_.InPage(slots[j]) - skip[p];
      if (!DecodeRecord(idh_, seg.id, slots[j], rec, geo_.value_bytes, &key) || key != keys[j]) {
        return Status::Corrupt("store ", o_.dir, ": the record of key ", keys[j], " in segment ",
                               seg.path, " slot ", slots[j], " fails its checksum");
      }
      std::memcpy(out + out_index[j] * geo_.value_bytes, rec + 8, geo_.value_bytes);
      found[out_index[j]] = true;
    }
    return Status::Ok();
  };
  Status s = reader->Run(pages, prepare, done);
  ReturnReader(std::move(reader));
  reads_.fetch_add(static_cast<int64_t>(segs.size()), std::memory_order_relaxed);
  read_bytes_.fetch_add(static_cast<int64_t>(pages * len), std::memory_order_relaxed);
  return s;
}

Status LogStore::Contains(const int64_t* keys, size_t n, bool* found) {
  if (n == 0) return Status::Ok();
  if (keys == nullptr || found == nullptr) {
    return Status::InvalidArgument("store ", o_.dir, ": Contains of ", n,
                                   " keys with null keys or found");
  }
  std::shared_lock<std::shared_mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) found[i] = index_.Find(keys[i]) != 0;
  return Status::Ok();
}

Status LogStore::Get(const int64_t* keys, size_t n, uint8_t* out, bool* found) {
  if (n == 0) return Status::Ok();
  if (keys == nullptr || out == nullptr || found == nullptr) {
    return Status::InvalidArgument("store ", o_.dir, ": Get of ", n,
                                   " keys with null keys, out or found");
  }
  // Each record's segment by plain pointer, each distinct segment held once (`held`) until the
  // reads are done: a shared_ptr copy per record cost two atomic operations each.
  std::vector<const Segment*> segs;
  std::vector<std::shared_ptr<Segment>> held;
  std::vector<uint32_t> slots;
  std::vector<int64_t> want;
  std::vector<size_t> out_index;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    const size_t page_run = geo_.pages * kPageBytes;
    // Which segments `held` has, by id from the lowest (the map is ordered by id).
    const uint32_t first_id = segs_.empty() ? 0 : segs_.begin()->first;
    std::vector<uint8_t> holds(segs_.empty() ? 0 : segs_.rbegin()->first - first_id + 1, 0);
    constexpr size_t kAhead = 8;
    for (size_t i = 0; i < std::min(n, kAhead); ++i) index_.Prefetch(keys[i]);
    for (size_t i = 0; i < n; ++i) {
      if (i + kAhead < n) index_.Prefetch(keys[i + kAhead]);
      found[i] = false;
      const uint64_t loc = index_.Find(keys[i]);
      if (loc == 0) continue;
      const uint32_t slot = LocSlot(loc);
      const uint32_t id = LocSegment(loc);
      const std::shared_ptr<Segment>& seg = segs_.at(id);
      if (seg == active_ && slot >= tail_->first) {
        const size_t at = (slot - tail_->first) / geo_.per_page * page_run + geo_.InPage(slot);
        std::memcpy(out + i * geo_.value_bytes, tail_->data() + at + 8, geo_.value_bytes);
        found[i] = true;
        continue;
      }
      if (holds[id - first_id] == 0) {
        holds[id - first_id] = 1;
        held.push_back(seg);
      }
      segs.push_back(seg.get());
      slots.push_back(slot);
      want.push_back(keys[i]);
      out_index.push_back(i);
    }
  }
  return ReadRecords(segs, slots, want, out_index, out, found);
}

StoreStats LogStore::stats() const {
  StoreStats st;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    st.live_records = static_cast<int64_t>(index_.size());
    for (const auto& [id, seg] : segs_) st.disk_bytes += static_cast<int64_t>(seg->file_bytes);
    for (const auto& seg : retired_) st.disk_bytes += static_cast<int64_t>(seg->file_bytes);
    st.index_bytes =
        static_cast<int64_t>(index_.memory_bytes() + segs_.size() * (sizeof(Segment) + 64));
  }
  st.reads = reads_.load();
  st.read_bytes = read_bytes_.load();
  st.writes = writes_.load();
  st.write_bytes = write_bytes_.load();
  st.compactions = compactions_.load();
  st.direct_io = direct_ok_.load();
  return st;
}

}  // namespace shardrec::store
