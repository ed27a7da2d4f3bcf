// Opening a store: options checked, the directory locked, the MANIFEST of the last Flush read and
// every segment it names checked (identity, size) before anything is changed; files no manifest
// names are scratch of a crash or of a close without Flush, and go. Another identity or a torn
// store is kCorrupt, or emptied with `rebuild`.
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string_view>

#include "impl/store/log_store_parts.h"

namespace shardrec::store {
namespace {

bool IsSegmentName(std::string_view name) {
  if (name.size() != 16 || name.substr(0, 4) != "seg-" || name.substr(12) != ".dat") return false;
  for (char c : name.substr(4, 8)) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool IsStoreFile(std::string_view name) {
  return IsSegmentName(name) || name == "MANIFEST" || name == "MANIFEST.tmp";
}

Status ReadWholeFile(const std::string& store_dir, const std::string& path,
                     std::vector<uint8_t>* out, bool* missing) {
  *missing = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      *missing = true;
      return Status::Ok();
    }
    return StoreErrno(store_dir, "cannot open", path);
  }
  struct stat st {};
  Status s;
  if (::fstat(fd, &st) != 0) s = StoreErrno(store_dir, "cannot stat", path);
  if (s.ok()) {
    out->resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < out->size()) {
      const ssize_t r = ::pread(fd, out->data() + got, out->size() - got, static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        if (r == 0) break;
        s = StoreErrno(store_dir, "cannot read", path);
        break;
      }
      got += static_cast<size_t>(r);
    }
    out->resize(got);
  }
  ::close(fd);
  return s;
}

}  // namespace

LogStore::LogStore(const StoreOptions& o, const LogTuning& t)
    : o_(o), t_(t), geo_(RecordGeometry::For(o.value_bytes)), idh_(IdentityHash(o.identity)) {
  const uint64_t pages = std::max<uint64_t>(t.segment_bytes / kPageBytes, 2) - 1;
  slots_per_segment_ = std::max<uint64_t>(pages / geo_.pages, 1) * geo_.per_page;
  slots_per_segment_ = std::min<uint64_t>(slots_per_segment_, 0xffffffffull);
  const size_t page_run = geo_.pages * kPageBytes;
  tail_ = std::make_unique<Tail>((t.write_chunk / page_run + 2) * page_run);
}

LogStore::~LogStore() {
  {
    std::lock_guard<std::mutex> lock(compact_mu_);
    stop_ = true;
    stopping_.store(true);
  }
  compact_cv_.notify_all();
  if (compactor_.joinable()) compactor_.join();
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

Status LogStore::RemoveStoreFiles() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(o_.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (IsStoreFile(name) && ::unlink(e.path().c_str()) != 0) {
      return StoreErrno(o_.dir, "cannot remove", e.path().string());
    }
  }
  if (ec) return Status::Io("store ", o_.dir, ": cannot list: ", ec.message());
  return Status::Ok();
}

Status LogStore::OpenSegment(uint32_t id, uint64_t slots, std::shared_ptr<Segment>* out) {
  auto seg = std::make_shared<Segment>();
  seg->id = id;
  seg->path = SegmentPath(id);
  seg->slots = slots;
  seg->fd = ::open(seg->path.c_str(), (o_.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (seg->fd < 0) {
    if (errno == ENOENT) {
      return Status::Corrupt("store ", o_.dir, ": segment ", seg->path,
                             " named by the manifest is missing");
    }
    return StoreErrno(o_.dir, "cannot open", seg->path);
  }
  std::vector<uint8_t> page(kPageBytes);
  const ssize_t r = ::pread(seg->fd, page.data(), page.size(), 0);
  if (r < 0) return StoreErrno(o_.dir, "cannot read", seg->path);
  SegmentHeader h;
  Status s = DecodeSegmentHeader(page.data(), static_cast<size_t>(r),
                                 "store " + o_.dir + ": segment " + seg->path, &h);
  if (!s.ok()) return s;
  if (h.segment != id || h.value_bytes != geo_.value_bytes || h.identity_hash != idh_ ||
      h.identity != o_.identity) {
    return Status::Corrupt("store ", o_.dir, ": segment ", seg->path,
                           " belongs to another store (identity \"", h.identity, "\", ",
                           h.value_bytes, "-byte records, segment ", h.segment, ")");
  }
  struct stat st {};
  if (::fstat(seg->fd, &st) != 0) return StoreErrno(o_.dir, "cannot stat", seg->path);
  const uint64_t need = slots == 0 ? kPageBytes : geo_.FileBytes(slots);
  if (static_cast<uint64_t>(st.st_size) < need) {
    return Status::Corrupt("store ", o_.dir, ": segment ", seg->path, " is ", st.st_size,
                           " bytes, its manifest needs ", need, " (torn)");
  }
  seg->file_bytes = static_cast<uint64_t>(st.st_size);
  if (o_.direct_io) {
    seg->direct_fd = ::open(seg->path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  } else {
    // Buffered point reads: no readahead around a record's page.
    ::posix_fadvise(seg->fd, 0, 0, POSIX_FADV_RANDOM);
  }
  *out = std::move(seg);
  return Status::Ok();
}

Status LogStore::Recover(const Manifest& m) {
  if (m.identity != o_.identity || m.value_bytes != geo_.value_bytes) {
    return Status::Corrupt("store ", o_.dir, ": holds another store (identity \"", m.identity,
                           "\", ", m.value_bytes, "-byte records), not \"", o_.identity, "\" of ",
                           geo_.value_bytes, "-byte records");
  }
  bool direct = !m.segments.empty();
  for (const ManifestSegment& ms : m.segments) {
    std::shared_ptr<Segment> seg;
    Status s = OpenSegment(ms.id, ms.slots, &seg);
    if (!s.ok()) return s;
    direct = direct && seg->direct_fd >= 0;
    segs_[ms.id] = std::move(seg);
  }
  direct_ok_.store(direct);
  for (const ManifestEntry& e : m.entries) {
    if (index_.Upsert(e.key, e.loc) != 0) {
      return Status::Corrupt("store ", o_.dir, ": the manifest names key ", e.key, " twice");
    }
    segs_.at(LocSegment(e.loc))->live++;
  }
  next_segment_ = m.next_segment;
  generation_ = m.generation;
  return Status::Ok();
}

Status LogStore::Open() {
  if (!o_.read_only) {
    std::error_code ec;
    std::filesystem::create_directories(o_.dir, ec);
    if (ec) return Status::Io("store ", o_.dir, ": cannot create the directory: ", ec.message());
  }
  dir_fd_ = ::open(o_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) return StoreErrno(o_.dir, "cannot open directory", o_.dir);
  if (::flock(dir_fd_, (o_.read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Status::InvalidUsage("store ", o_.dir, " is open in another store (locked)");
    }
    return StoreErrno(o_.dir, "cannot lock", o_.dir);
  }
  if (!tail_->ok()) return Status::OutOfMemory("store ", o_.dir, ": no tail buffer");
  const std::string manifest_path = o_.dir + "/MANIFEST";
  std::vector<uint8_t> bytes;
  bool missing = false;
  Status s = ReadWholeFile(o_.dir, manifest_path, &bytes, &missing);
  if (!s.ok()) return s;
  Manifest m;
  if (missing) {
    bool leftovers = false;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(o_.dir, ec)) {
      leftovers = leftovers || IsStoreFile(e.path().filename().string());
    }
    if (o_.read_only) {
      return Status::NotFound("store ", o_.dir, ": no MANIFEST (not a store or a snapshot)");
    }
    if (leftovers && !o_.rebuild) {
      return Status::Corrupt("store ", o_.dir,
                             ": segment files without a MANIFEST (a torn store); open with "
                             "rebuild to empty it");
    }
  } else {
    s = DecodeManifest(bytes.data(), bytes.size(), "store " + o_.dir + ": " + manifest_path, &m);
    if (s.ok()) s = Recover(m);
    if (!s.ok()) {
      if (!o_.rebuild || o_.read_only) return s;
      index_ = KeyIndex();
      segs_.clear();
      missing = true;
    }
  }
  if (missing) {
    // A new store, or an emptied one: its first manifest is durable before any segment exists.
    s = RemoveStoreFiles();
    if (!s.ok()) return s;
    m = Manifest();
    m.value_bytes = geo_.value_bytes;
    m.identity = o_.identity;
    next_segment_ = 1;
    generation_ = 0;
    direct_ok_.store(false);
    std::lock_guard<std::mutex> lock(flush_mu_);
    s = FlushLocked(false, &m);
    if (!s.ok()) return s;
  } else if (!o_.read_only) {
    // Scratch: segments the manifest does not name, and a manifest never renamed into place.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(o_.dir, ec)) {
      const std::string name = e.path().filename().string();
      if (!IsStoreFile(name) || name == "MANIFEST") continue;
      const uint32_t id =
          name == "MANIFEST.tmp" ? 0 : static_cast<uint32_t>(std::stoul(name.substr(4, 8)));
      if (id == 0 || segs_.count(id) == 0) ::unlink(e.path().c_str());
    }
  }
  if (!o_.read_only) compactor_ = std::thread([this] { CompactionLoop(); });
  return Status::Ok();
}

Status OpenLogStore(const StoreOptions& o, const LogTuning& t, std::unique_ptr<LogStore>* out) {
  if (out == nullptr) return Status::InvalidArgument("OpenRowStore: null output");
  if (o.dir.empty()) return Status::InvalidArgument("OpenRowStore: StoreOptions.dir is empty");
  if (o.value_bytes == 0 || o.value_bytes > (size_t{1} << 30)) {
    return Status::InvalidArgument("OpenRowStore: StoreOptions.value_bytes is ", o.value_bytes,
                                   " (needs 1 .. 2^30)");
  }
  if (o.identity.size() > kMaxIdentityBytes) {
    return Status::InvalidArgument("OpenRowStore: StoreOptions.identity is ", o.identity.size(),
                                   " bytes (at most ", kMaxIdentityBytes, ")");
  }
  if (o.queue_depth < 1 || o.queue_depth > 4096) {
    return Status::InvalidArgument("OpenRowStore: StoreOptions.queue_depth is ", o.queue_depth,
                                   " (needs 1 .. 4096)");
  }
  if (!(o.compact_dead_ratio > 0.0 && o.compact_dead_ratio <= 1.0)) {
    return Status::InvalidArgument("OpenRowStore: StoreOptions.compact_dead_ratio is ",
                                   o.compact_dead_ratio, " (needs (0, 1])");
  }
  if (o.read_only && o.rebuild) {
    return Status::InvalidArgument("OpenRowStore: read_only and rebuild together");
  }
  std::unique_ptr<LogStore> store(new LogStore(o, t));
  Status s = store->Open();
  if (!s.ok()) return s;
  *out = std::move(store);
  return Status::Ok();
}

Status OpenRowStore(const StoreOptions& o, std::unique_ptr<RowStore>* out) {
  if (out == nullptr) return Status::InvalidArgument("OpenRowStore: null output");
  std::unique_ptr<LogStore> store;
  Status s = OpenLogStore(o, LogTuning(), &store);
  if (s.ok()) *out = std::move(store);
  return s;
}

}  // namespace shardrec::store
