// Writes: records are appended to the active segment's tail buffer and written in page-aligned
// chunks; a failed write (a full disk) rolls the store back to the state before the call.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "impl/store/log_store_parts.h"

namespace shardrec::store {

Status StoreErrno(const std::string& dir, const char* what, const std::string& path) {
  const int e = errno;
  return Status::Io("store ", dir, ": ", what, " ", path, ": ", std::strerror(e));
}

namespace {

Status WriteAll(int fd, const uint8_t* p, size_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::Io("");
    }
    if (w == 0) {
      errno = ENOSPC;
      return Status::Io("");
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

}  // namespace

std::string LogStore::SegmentPath(uint32_t id) const {
  char name[32];
  std::snprintf(name, sizeof(name), "seg-%08u.dat", id);
  return o_.dir + "/" + name;
}

Status LogStore::CreateSegmentLocked(std::shared_ptr<Segment>* out) {
  auto seg = std::make_shared<Segment>();
  seg->id = next_segment_;
  seg->path = SegmentPath(seg->id);
  seg->fd = ::open(seg->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (seg->fd < 0) return StoreErrno(o_.dir, "cannot create segment", seg->path);
  const std::vector<uint8_t> header =
      EncodeSegmentHeader({seg->id, geo_.value_bytes, idh_, o_.identity});
  if (!WriteAll(seg->fd, header.data(), header.size(), 0).ok()) {
    Status s = StoreErrno(o_.dir, "cannot write segment", seg->path);
    ::unlink(seg->path.c_str());
    return s;
  }
  if (o_.direct_io) {
    seg->direct_fd = ::open(seg->path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  } else {
    // Buffered point reads: no readahead around a record's page.
    ::posix_fadvise(seg->fd, 0, 0, POSIX_FADV_RANDOM);
  }
  direct_ok_.store(seg->direct_fd >= 0);
  seg->file_bytes = kPageBytes;
  seg->dirty = true;
  ++next_segment_;
  segs_[seg->id] = seg;
  active_ = seg;
  tail_->first = 0;
  std::memset(tail_->data(), 0, tail_->bytes());
  *out = seg;
  return Status::Ok();
}

Status LogStore::WriteTailLocked(bool pad) {
  Segment* seg = active_.get();
  if (seg == nullptr) return Status::Ok();
  const uint64_t full = seg->slots / geo_.per_page * geo_.per_page;
  const uint64_t end = pad ? geo_.RoundUpSlot(seg->slots) : full;
  if (end <= tail_->first) return Status::Ok();
  if (mark_ != nullptr && !mark_->saved && mark_->active.get() == seg) {
    mark_->tail_bytes.assign(tail_->data(), tail_->data() + mark_->tail_used);
    mark_->saved = true;
  }
  const size_t page_run = geo_.pages * kPageBytes;
  const size_t bytes = (end - tail_->first) / geo_.per_page * page_run;
  const uint64_t at = geo_.PageOffset(tail_->first);
  if (!WriteAll(seg->fd, tail_->data(), bytes, at).ok()) {
    return StoreErrno(o_.dir, "cannot write segment", seg->path);
  }
  seg->file_bytes = std::max(seg->file_bytes, at + bytes);
  seg->dirty = true;
  write_bytes_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  // The partial page (records in it, more to come) moves to the buffer's front.
  const size_t partial = (!pad && seg->slots > end) ? page_run : 0;
  std::memmove(tail_->data(), tail_->data() + bytes, partial);
  std::memset(tail_->data() + partial, 0, bytes);
  if (pad) seg->slots = end;
  tail_->first = end;
  return Status::Ok();
}

Status LogStore::AppendLocked(const int64_t* keys, const uint8_t* values, size_t n,
                              uint64_t* locs) {
  const size_t page_run = geo_.pages * kPageBytes;
  for (size_t i = 0; i < n; ++i) {
    if (active_ == nullptr || active_->slots >= slots_per_segment_) {
      if (active_ != nullptr) {
        Status s = WriteTailLocked(true);
        if (!s.ok()) return s;
      }
      std::shared_ptr<Segment> made;
      Status s = CreateSegmentLocked(&made);
      if (!s.ok()) return s;
    }
    Segment* seg = active_.get();
    auto offset_of = [&](uint64_t slot) {
      return (slot - tail_->first) / geo_.per_page * page_run + geo_.InPage(slot);
    };
    if (offset_of(seg->slots) + geo_.record_bytes > tail_->bytes()) {
      Status s = WriteTailLocked(false);
      if (!s.ok()) return s;
    }
    const uint64_t slot = seg->slots;
    EncodeRecord(idh_, seg->id, slot, keys[i], values + i * geo_.value_bytes, geo_.value_bytes,
                 tail_->data() + offset_of(slot));
    locs[i] = PackLoc(seg->id, static_cast<uint32_t>(slot));
    seg->slots = slot + 1;
    if ((seg->slots - tail_->first) / geo_.per_page * page_run >= t_.write_chunk) {
      Status s = WriteTailLocked(false);
      if (!s.ok()) return s;
    }
  }
  return Status::Ok();
}

void LogStore::MarkLocked(Mark* m) {
  m->active = active_;
  m->next_segment = next_segment_;
  m->tail_first = tail_->first;
  m->saved = false;
  m->tail_used = 0;
  if (active_ != nullptr) {
    m->slots = active_->slots;
    m->file_bytes = active_->file_bytes;
    m->tail_used =
        geo_.RoundUpSlot(active_->slots - tail_->first) / geo_.per_page * geo_.pages * kPageBytes;
  }
  mark_ = m;
}

void LogStore::RollbackLocked(Mark* m) {
  mark_ = nullptr;
  for (auto it = segs_.lower_bound(m->next_segment); it != segs_.end();) {
    ::unlink(it->second->path.c_str());
    it = segs_.erase(it);
  }
  next_segment_ = m->next_segment;
  active_ = m->active;
  if (active_ == nullptr) return;
  if (m->saved) {
    std::memset(tail_->data(), 0, tail_->bytes());
    std::memcpy(tail_->data(), m->tail_bytes.data(), m->tail_bytes.size());
  } else {
    // Nothing was written: the records of the call lie after the mark's last slot; clear them.
    const size_t page_run = geo_.pages * kPageBytes;
    const size_t from =
        (m->slots - m->tail_first) / geo_.per_page * page_run + geo_.InPage(m->slots);
    std::memset(tail_->data() + from, 0, tail_->bytes() - from);
  }
  tail_->first = m->tail_first;
  active_->slots = m->slots;
  if (active_->file_bytes > m->file_bytes) {
    // Shrinking a file needs no space; what failed to fit goes.
    (void)!::ftruncate(active_->fd, static_cast<off_t>(m->file_bytes));
    active_->file_bytes = m->file_bytes;
  }
}

void LogStore::MoveLocked(uint64_t from, uint64_t to) {
  if (from != 0) segs_.at(LocSegment(from))->live--;
  segs_.at(LocSegment(to))->live++;
}

Status LogStore::Put(const int64_t* keys, const uint8_t* values, size_t n) {
  if (o_.read_only) return Status::InvalidUsage("store ", o_.dir, " is open read-only");
  if (n == 0) return Status::Ok();
  if (keys == nullptr || values == nullptr) {
    return Status::InvalidArgument("store ", o_.dir, ": Put of ", n,
                                   " records with null keys or values");
  }
  std::vector<uint64_t> locs(n);
  std::unique_lock<std::shared_mutex> lock(mu_);
  // The index entries the Upserts below touch lie at random in a table of megabytes: asking for
  // the first ones now lets their cache misses overlap the append's encoding and writing, and
  // each later one a window ahead, instead of each Upsert waiting for its own (a quarter of the
  // write-back thread's time, whose batches are 256 records).
  constexpr size_t kAhead = 256;
  for (size_t i = 0; i < std::min(n, kAhead); ++i) index_.Prefetch(keys[i]);
  Mark mark;
  MarkLocked(&mark);
  Status s = AppendLocked(keys, values, n, locs.data());
  if (!s.ok()) {
    RollbackLocked(&mark);
    return s;
  }
  mark_ = nullptr;
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) index_.Prefetch(keys[i + kAhead]);
    MoveLocked(index_.Upsert(keys[i], locs[i]), locs[i]);
  }
  writes_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  return Status::Ok();
}

Status LogStore::Erase(const int64_t* keys, size_t n) {
  if (o_.read_only) return Status::InvalidUsage("store ", o_.dir, " is open read-only");
  if (n == 0) return Status::Ok();
  if (keys == nullptr) return Status::InvalidArgument("store ", o_.dir, ": Erase with null keys");
  std::unique_lock<std::shared_mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t old = index_.Erase(keys[i]);
    if (old != 0) segs_.at(LocSegment(old))->live--;
  }
  return Status::Ok();
}

}  // namespace shardrec::store
