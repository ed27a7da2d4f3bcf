// Durability: Flush writes the tail, fsyncs the segments written since the last one, then
// replaces the MANIFEST (the index and its segment list) by write-fsync-rename-fsync; only then
// are segments emptied by compaction unlinked. Snapshot seals, flushes, reads back the live records
// of segments no snapshot has linked yet (store_verify.cc) and links the segments the new manifest
// names into another directory beside a copy of it.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "impl/store/log_store_parts.h"

namespace shardrec::store {
namespace {

Status WriteFileDurably(const std::string& store_dir, int dir_fd, const std::string& dir,
                        const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string tmp = dir + "/" + name + ".tmp";
  const std::string path = dir + "/" + name;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return StoreErrno(store_dir, "cannot create", tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      Status s = StoreErrno(store_dir, "cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    Status s = StoreErrno(store_dir, "cannot fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = StoreErrno(store_dir, "cannot rename", tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::fsync(dir_fd) != 0) return StoreErrno(store_dir, "cannot fsync directory", dir);
  return Status::Ok();
}

// A copy of the first `bytes` of `from` (where a hard link is refused: another file system).
Status CopyFile(const std::string& store_dir, const std::string& from, const std::string& to,
                uint64_t bytes) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return StoreErrno(store_dir, "cannot open", from);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    Status s = StoreErrno(store_dir, "cannot create", to);
    ::close(in);
    return s;
  }
  std::vector<uint8_t> buf(1 << 20);
  Status s;
  for (uint64_t at = 0; at < bytes && s.ok();) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - at));
    const ssize_t r = ::pread(in, buf.data(), want, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;
      s = StoreErrno(store_dir, "cannot read", from);
      break;
    }
    for (ssize_t w = 0; w < r && s.ok();) {
      const ssize_t k = ::pwrite(out, buf.data() + w, static_cast<size_t>(r - w),
                                 static_cast<off_t>(at + static_cast<uint64_t>(w)));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        if (k == 0) errno = ENOSPC;
        s = StoreErrno(store_dir, "cannot write", to);
      } else {
        w += k;
      }
    }
    at += static_cast<uint64_t>(r);
  }
  if (s.ok() && ::fsync(out) != 0) s = StoreErrno(store_dir, "cannot fsync", to);
  ::close(in);
  ::close(out);
  return s;
}

}  // namespace

Status LogStore::Flush() { return FlushImpl(false); }

Status LogStore::FlushImpl(bool seal) {
  std::lock_guard<std::mutex> lock(flush_mu_);
  Manifest m;
  return FlushLocked(seal, &m);
}

Status LogStore::FlushLocked(bool seal, Manifest* m) {
  std::vector<std::shared_ptr<Segment>> to_sync, to_unlink;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    if (!o_.read_only) {
      Status s = WriteTailLocked(true);
      if (!s.ok()) return s;
      if (seal || (active_ != nullptr && active_->slots >= slots_per_segment_)) active_ = nullptr;
    }
    m->value_bytes = geo_.value_bytes;
    m->identity = o_.identity;
    m->generation = ++generation_;
    m->next_segment = next_segment_;
    m->segments.clear();
    m->entries.clear();
    for (const auto& [id, seg] : segs_) {
      m->segments.push_back({id, seg->slots});
      if (seg->dirty) {
        to_sync.push_back(seg);
        seg->dirty = false;
      }
    }
    m->entries.reserve(index_.size());
    index_.ForEach([&](int64_t key, uint64_t loc) { m->entries.push_back({key, loc}); });
    to_unlink.swap(retired_);
  }
  if (o_.read_only) return Status::Ok();
  Status s;
  for (const auto& seg : to_sync) {
    if (s.ok() && ::fdatasync(seg->fd) != 0) s = StoreErrno(o_.dir, "cannot fsync", seg->path);
  }
  if (s.ok()) s = WriteFileDurably(o_.dir, dir_fd_, o_.dir, "MANIFEST", EncodeManifest(*m));
  if (!s.ok()) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    for (const auto& seg : to_sync) seg->dirty = true;
    retired_.insert(retired_.end(), to_unlink.begin(), to_unlink.end());
    return s;
  }
  for (const auto& seg : to_unlink) ::unlink(seg->path.c_str());
  return Status::Ok();
}

Status LogStore::Snapshot(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("store ", o_.dir, ": empty snapshot directory");
  std::lock_guard<std::mutex> lock(flush_mu_);
  if (::mkdir(dir.c_str(), 0755) != 0) {
    if (errno == EEXIST) {
      return Status::InvalidArgument("store ", o_.dir, ": snapshot directory ", dir,
                                     " already exists");
    }
    return StoreErrno(o_.dir, "cannot create snapshot directory", dir);
  }
  Manifest m;
  Status s = FlushLocked(/*seal=*/true, &m);
  if (s.ok()) s = VerifyForSnapshot(m);
  const int snap_fd = s.ok() ? ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (s.ok() && snap_fd < 0) s = StoreErrno(o_.dir, "cannot open", dir);
  for (const ManifestSegment& seg : m.segments) {
    if (!s.ok()) break;
    const std::string from = SegmentPath(seg.id);
    const std::string to = dir + from.substr(o_.dir.size());
    if (::link(from.c_str(), to.c_str()) == 0) continue;
    if (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != ENOTSUP) {
      s = StoreErrno(o_.dir, "cannot link", to);
      break;
    }
    s = CopyFile(o_.dir, from, to, geo_.FileBytes(seg.slots));
  }
  if (s.ok()) s = WriteFileDurably(o_.dir, snap_fd, dir, "MANIFEST", EncodeManifest(m));
  if (snap_fd >= 0) ::close(snap_fd);
  if (!s.ok()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return s;
}

Status LogStore::Scan(int64_t* cursor, size_t max, std::vector<int64_t>* keys,
                      std::vector<uint8_t>* values) {
  if (cursor == nullptr || keys == nullptr || values == nullptr || max == 0) {
    return Status::InvalidArgument("store ", o_.dir, ": Scan needs a cursor, outputs and max > 0");
  }
  keys->clear();
  values->clear();
  if (*cursor == -1) return Status::Ok();
  std::shared_ptr<std::vector<int64_t>> order;
  {
    std::lock_guard<std::mutex> lock(scan_mu_);
    if (*cursor == 0 || scan_keys_ == nullptr) {
      auto fresh = std::make_shared<std::vector<int64_t>>();
      {
        std::shared_lock<std::shared_mutex> read(mu_);
        fresh->reserve(index_.size());
        index_.ForEach([&](int64_t key, uint64_t) { fresh->push_back(key); });
      }
      std::sort(fresh->begin(), fresh->end());
      scan_keys_ = std::move(fresh);
    }
    order = scan_keys_;
  }
  // The cursor is the next key to visit with its sign bit flipped, so that 0 starts at INT64_MIN
  // and -1 (INT64_MAX's code) can mean the end: a chunk after which only INT64_MAX would remain
  // takes it in too (one record over `max`, the one case).
  const int64_t from = static_cast<int64_t>(static_cast<uint64_t>(*cursor) ^ (uint64_t{1} << 63));
  auto it = std::lower_bound(order->begin(), order->end(), from);
  // Batched reads; keys erased since the scan began are skipped.
  auto take = [&](size_t count) -> Status {
    std::vector<uint8_t> got(count * geo_.value_bytes);
    std::unique_ptr<bool[]> found(new bool[count]);
    Status s = Get(&*it, count, got.data(), found.get());
    if (!s.ok()) return s;
    for (size_t i = 0; i < count; ++i, ++it) {
      if (!found[i]) continue;
      keys->push_back(*it);
      values->insert(values->end(), got.begin() + i * geo_.value_bytes,
                     got.begin() + (i + 1) * geo_.value_bytes);
    }
    return Status::Ok();
  };
  while (it != order->end() && keys->size() < max) {
    Status s = take(std::min<size_t>(max - keys->size(), order->end() - it));
    if (!s.ok()) return s;
  }
  if (it != order->end() && *it == INT64_MAX) {
    Status s = take(1);
    if (!s.ok()) return s;
  }
  *cursor = it == order->end()
                ? -1
                : static_cast<int64_t>(static_cast<uint64_t>(*it) ^ (uint64_t{1} << 63));
  return Status::Ok();
}

}  // namespace shardrec::store
