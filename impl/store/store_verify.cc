// A snapshot links sealed segments instead of copying them, so a record damaged on disk after it
// was written (a flipped bit the store never read back) would pass into the snapshot unseen, and
// a checkpoint that names the snapshot would publish, replace the previous one, and then fail to
// load. Before its first link each sealed segment's live records are read back and checked
// (the reads a copy would have made, once per segment: a segment is immutable once sealed).
// They go through the store's own descriptor, O_DIRECT where the file system allows it, so they
// see what the disk holds rather than the page cache's copy of what was written.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "impl/core/check.h"
#include "impl/store/log_store_parts.h"

namespace shardrec::store {
namespace {

// Reads `bytes` at `offset` of `fd` (named `path` in errors) into `out`.
Status ReadAt(const std::string& dir, int fd, const std::string& path, uint64_t offset,
              size_t bytes, uint8_t* out) {
  size_t got = 0;
  while (got < bytes) {
    const ssize_t r = ::pread(fd, out + got, bytes - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;  // shorter than the manifest says
      return StoreErrno(dir, "cannot read segment", path);
    }
    got += static_cast<size_t>(r);
  }
  return Status::Ok();
}

// A page-aligned buffer, as an O_DIRECT read needs.
struct PageBuffer {
  struct Free {
    void operator()(uint8_t* p) const { free(p); }
  };
  std::unique_ptr<uint8_t, Free> p;
  explicit PageBuffer(size_t bytes) {
    void* q = nullptr;
    if (posix_memalign(&q, kPageBytes, bytes) == 0) p.reset(static_cast<uint8_t*>(q));
  }
  uint8_t* data() const { return p.get(); }
};

}  // namespace

Status LogStore::VerifyForSnapshot(const Manifest& m) {
  // The live records by location, so each segment's are one ascending run.
  std::vector<std::pair<uint64_t, int64_t>> live;
  live.reserve(m.entries.size());
  for (const ManifestEntry& e : m.entries)
    if (verified_.count(LocSegment(e.loc)) == 0) live.emplace_back(e.loc, e.key);
  std::sort(live.begin(), live.end());
  const size_t page_run = geo_.pages * kPageBytes;
  const PageBuffer page(kPageBytes), run(page_run);
  if (page.data() == nullptr || run.data() == nullptr)
    return Status::OutOfMemory("store ", o_.dir, ": no memory to verify segments");
  // The segments' files, held open whatever the index does meanwhile. The flush lock the caller
  // holds keeps each on disk: a segment compaction empties after the manifest was taken is only
  // retired (unlinked by the next flush).
  std::map<uint32_t, std::shared_ptr<Segment>> files;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    for (const auto& [id, seg] : segs_) files.emplace(id, seg);
    for (const auto& seg : retired_) files.emplace(seg->id, seg);
  }
  size_t at = 0;
  for (const ManifestSegment& seg : m.segments) {
    if (verified_.count(seg.id) != 0) continue;
    const std::string path = SegmentPath(seg.id);
    const auto file = files.find(seg.id);
    if (file == files.end())
      return Status::Internal("store ", o_.dir, ": segment ", path, " left the store mid-snapshot");
    const int fd = file->second->read_fd();
    Status s = ReadAt(o_.dir, fd, path, 0, kPageBytes, page.data());
    SegmentHeader h;
    if (s.ok()) s = DecodeSegmentHeader(page.data(), kPageBytes, path, &h);
    if (s.ok() && (h.segment != seg.id || h.identity_hash != idh_))
      s = Status::Corrupt("store ", o_.dir, ": segment ", path, " is not this store's segment ",
                          seg.id);
    while (at < live.size() && LocSegment(live[at].first) < seg.id) ++at;  // listed elsewhere
    uint64_t loaded = UINT64_MAX;                                          // the page run in `run`
    for (; s.ok() && at < live.size() && LocSegment(live[at].first) == seg.id; ++at) {
      const uint64_t slot = LocSlot(live[at].first);
      const uint64_t first = slot - slot % geo_.per_page;
      if (first != loaded) {
        s = ReadAt(o_.dir, fd, path, geo_.PageOffset(first), page_run, run.data());
        loaded = first;
      }
      int64_t key = 0;
      if (s.ok() && (!DecodeRecord(idh_, seg.id, slot, run.data() + geo_.InPage(slot),
                                   geo_.value_bytes, &key) ||
                     key != live[at].second))
        s = Status::Corrupt("store ", o_.dir, ": segment ", path, " slot ", slot,
                            " (the record of key ", live[at].second,
                            ") fails its checksum: a snapshot would link a damaged record");
    }
    SR_RETURN_IF_ERROR(s);
    verified_.insert(seg.id);
  }
  return Status::Ok();
}

}  // namespace shardrec::store
