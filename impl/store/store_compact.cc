// Compaction: a sealed segment whose dead share exceeds compact_dead_ratio is read sequentially,
// its records still named by the index are appended to the active segment (moved only if the
// index still names the old place, under the write lock, so a newer Put always wins), and the
// emptied segment is retired; a Flush then makes a manifest without it durable and unlinks it.
#include <errno.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "impl/store/log_store_parts.h"

namespace shardrec::store {

void LogStore::CompactionLoop() {
  std::unique_lock<std::mutex> lock(compact_mu_);
  while (!stop_) {
    compact_cv_.wait_for(lock, std::chrono::milliseconds(t_.compact_interval_ms));
    if (stop_) break;
    lock.unlock();
    int rewritten = 0;
    Status s = CompactPass(&rewritten);
    lock.lock();
    if (!s.ok()) compaction_error_ = s;
  }
}

Status LogStore::compaction_error() const {
  std::lock_guard<std::mutex> lock(compact_mu_);
  return compaction_error_;
}

Status LogStore::CompactNow(int* rewritten) {
  if (o_.read_only) return Status::InvalidUsage("store ", o_.dir, " is open read-only");
  return CompactPass(rewritten);
}

Status LogStore::CompactPass(int* rewritten) {
  std::lock_guard<std::mutex> pass(pass_mu_);
  *rewritten = 0;
  std::vector<std::shared_ptr<Segment>> todo;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    for (const auto& [id, seg] : segs_) {
      if (seg == active_ || seg->slots == 0) continue;
      const double dead = 1.0 - static_cast<double>(seg->live) / static_cast<double>(seg->slots);
      if (dead > o_.compact_dead_ratio) todo.push_back(seg);
    }
  }
  Status s;
  for (const auto& seg : todo) {
    if (stopping_.load()) break;
    bool done = false;
    s = CompactSegment(seg, &done);
    if (!s.ok()) break;
    if (done) ++*rewritten;
  }
  if (*rewritten > 0) {
    Status f = FlushImpl(false);
    if (s.ok()) s = f;
  }
  return s;
}

Status LogStore::CompactSegment(const std::shared_ptr<Segment>& seg, bool* done) {
  *done = false;
  const size_t page_run = geo_.pages * kPageBytes;
  const uint64_t slots = seg->slots;  // sealed: fixed
  const uint64_t runs_per_chunk = std::max<uint64_t>(1, (size_t{1} << 20) / page_run);
  std::vector<uint8_t> chunk(runs_per_chunk * page_run);
  std::vector<int64_t> keys;
  std::vector<uint32_t> from;
  std::vector<uint8_t> values;
  std::vector<uint64_t> locs;
  for (uint64_t first = 0; first < slots; first += runs_per_chunk * geo_.per_page) {
    if (stopping_.load()) return Status::Ok();
    const uint64_t last = std::min<uint64_t>(slots, first + runs_per_chunk * geo_.per_page);
    const size_t bytes = (geo_.RoundUpSlot(last) - first) / geo_.per_page * page_run;
    size_t got = 0;
    while (got < bytes) {
      const ssize_t r = ::pread(seg->fd, chunk.data() + got, bytes - got,
                                static_cast<off_t>(geo_.PageOffset(first) + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        if (r == 0) errno = EIO;
        return StoreErrno(o_.dir, "cannot read segment", seg->path);
      }
      got += static_cast<size_t>(r);
    }
    keys.clear();
    from.clear();
    values.clear();
    for (uint64_t slot = first; slot < last; ++slot) {
      const uint8_t* rec =
          chunk.data() + (slot - first) / geo_.per_page * page_run + geo_.InPage(slot);
      int64_t key = 0;
      if (!DecodeRecord(idh_, seg->id, slot, rec, geo_.value_bytes, &key)) continue;
      keys.push_back(key);
      from.push_back(static_cast<uint32_t>(slot));
      values.insert(values.end(), rec + 8, rec + 8 + geo_.value_bytes);
    }
    std::unique_lock<std::shared_mutex> lock(mu_);
    // Only records the index still names here move; the rest are dead (replaced or erased).
    size_t kept = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (index_.Find(keys[i]) != PackLoc(seg->id, from[i])) continue;
      keys[kept] = keys[i];
      from[kept] = from[i];
      std::memmove(values.data() + kept * geo_.value_bytes, values.data() + i * geo_.value_bytes,
                   geo_.value_bytes);
      ++kept;
    }
    locs.resize(kept);
    Mark mark;
    MarkLocked(&mark);
    Status s = AppendLocked(keys.data(), values.data(), kept, locs.data());
    if (!s.ok()) {
      RollbackLocked(&mark);
      return s;
    }
    mark_ = nullptr;
    for (size_t i = 0; i < kept; ++i) MoveLocked(index_.Upsert(keys[i], locs[i]), locs[i]);
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (seg->live != 0) {
    // A record the index names failed its checksum, so it was not moved.
    return Status::Corrupt("store ", o_.dir, ": segment ", seg->path, " holds ", seg->live,
                           " live records that fail their checksum");
  }
  segs_.erase(seg->id);
  retired_.push_back(seg);
  compactions_.fetch_add(1, std::memory_order_relaxed);
  *done = true;
  return Status::Ok();
}

}  // namespace shardrec::store
