// The batched reads of a served tiered table's missed rows (tiered_reads.h).
#include "impl/serving/tiered_reads.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "impl/checkpoint/snapshot_file.h"
#include "impl/core/check.h"

namespace shardrec::serving {
namespace {

constexpr uint64_t kPage = 4096;
// Parts of one file at most this far apart are read as one: copying a few unwanted bytes from
// the page cache costs less than another read.
constexpr uint64_t kMergeGap = 4096;
// And one read at most this long (a part longer than it is read alone): each reader of the pool
// holds kQueueDepth buffers of it.
constexpr uint64_t kMergeBytes = 16 * 1024;

uint64_t PageCeil(uint64_t x) { return (x + kPage - 1) / kPage * kPage; }

Status ErrnoStatus(int err, const std::string& what, const std::string& path) {
  return Status::Io(what, " ", path, ": ", std::strerror(err));
}

}  // namespace

Status TieredReads::Open(std::vector<DiskPiece> pieces, std::unique_ptr<TieredReads>* out) {
  auto r = std::unique_ptr<TieredReads>(new TieredReads());
  r->pieces_ = std::move(pieces);
  r->fd_.assign(r->pieces_.size(), -1);
  r->store_.assign(r->pieces_.size(), -1);
  std::map<std::string, int> fds, stores;
  uint64_t widest = 0;
  for (size_t i = 0; i < r->pieces_.size(); ++i) {
    const DiskPiece& p = r->pieces_[i];
    if (p.is_store) {
      auto it = stores.find(p.path);
      if (it == stores.end()) {
        // The MANIFEST must still be the one the checkpoint names (as OpenStoreSnapshot checks).
        static const std::shared_ptr<checkpoint::FileSystem> fs = checkpoint::PosixFileSystem();
        uint64_t size = 0;
        checkpoint::StoreRef ref;
        SR_RETURN_IF_ERROR(checkpoint::DescribeStoreSnapshot(*fs, p.path, &size, &ref));
        if (size != p.manifest_bytes || ref.manifest_xxh3 != p.store.manifest_xxh3)
          return Status::Corrupt("checkpoint store snapshot ", p.path,
                                 ": its MANIFEST does not match the checkpoint's manifest: "
                                 "replaced or damaged");
        store::StoreOptions o;
        o.dir = p.path;
        o.identity = p.store.identity;
        o.value_bytes = static_cast<size_t>(p.store.value_bytes);
        o.read_only = true;
        // Through the page cache, as a load reads it: hot pages of a cold row cache stay cheap.
        o.direct_io = false;
        o.queue_depth = kQueueDepth;
        std::unique_ptr<store::RowStore> st;
        const Status s = store::OpenRowStore(o, &st);
        if (!s.ok())
          return Status(s.code() == Code::kNotFound ? Code::kCorrupt : s.code(),
                        StrCat("checkpoint store snapshot ", p.path, ": ", s.message()));
        it = stores.emplace(p.path, static_cast<int>(r->stores_.size())).first;
        r->stores_.push_back(std::move(st));
      }
      r->store_[i] = it->second;
      continue;
    }
    auto it = fds.find(p.path);
    if (it == fds.end()) {
      const int fd = ::open(p.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return ErrnoStatus(errno, "cannot open checkpoint file", p.path);
      r->own_fds_.push_back(fd);
      it = fds.emplace(p.path, fd).first;
    }
    r->fd_[i] = it->second;
    widest = std::max(widest, p.rec.row_bytes());
  }
  r->max_read_ = std::max(kMergeBytes, PageCeil(widest) + kPage);
  *out = std::move(r);
  return Status::Ok();
}

TieredReads::~TieredReads() {
  for (int fd : own_fds_) ::close(fd);
}

std::unique_ptr<store::PageReader> TieredReads::TakeReader() const {
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    if (!readers_.empty()) {
      std::unique_ptr<store::PageReader> r = std::move(readers_.back());
      readers_.pop_back();
      return r;
    }
  }
  return store::MakePageReader(kQueueDepth, max_read_, /*try_io_uring=*/true);
}

void TieredReads::ReturnReader(std::unique_ptr<store::PageReader> r) const {
  std::lock_guard<std::mutex> lock(readers_mu_);
  readers_.push_back(std::move(r));
}

Status TieredReads::Read(const std::vector<RowPart>& parts, uint64_t* reads,
                         uint64_t* bytes) const {
  *reads = 0;
  *bytes = 0;
  if (parts.empty()) return Status::Ok();
  SR_RETURN_IF_ERROR(ReadFiles(parts, reads, bytes));
  return ReadStores(parts, reads, bytes);
}

Status TieredReads::ReadFiles(const std::vector<RowPart>& parts, uint64_t* reads,
                              uint64_t* bytes) const {
  // The rank files' parts in file order, each widened to the checksum units holding it (their
  // checksums prefetched now, so Check finds them in cache once the reads are back), then runs
  // of them whose units lie less than a page apart merged into reads.
  struct Span {
    int fd;
    uint64_t at, len;  // the part's bytes
    uint64_t lo, hi;   // its units' bytes
    size_t part;
  };
  std::vector<Span> spans;
  for (size_t i = 0; i < parts.size(); ++i) {
    const RowPart& rp = parts[i];
    const int fd = fd_[rp.piece];
    if (fd < 0) continue;
    const checkpoint::Record& rec = pieces_[rp.piece].rec;
    const uint64_t n = rec.row_bytes();
    Span s{fd, rec.offset + static_cast<uint64_t>(rp.row) * n, n, 0, 0, i};
    pieces_[rp.piece].sums.Cover(s.at, s.len, &s.lo, &s.hi);
    pieces_[rp.piece].sums.Prefetch(s.lo, s.hi);
    spans.push_back(s);
  }
  if (spans.empty()) return Status::Ok();
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.fd != b.fd ? a.fd < b.fd : a.at < b.at; });
  std::vector<store::PageRead> page_reads;
  std::vector<size_t> first;  // read j covers spans [first[j], first[j + 1])
  for (size_t k = 0; k < spans.size(); ++k) {
    const Span& s = spans[k];
    if (!page_reads.empty()) {
      store::PageRead& last = page_reads.back();
      const uint64_t end = last.offset + last.len;
      const uint64_t merged = std::max(end, s.hi) - last.offset;
      if (last.fd == s.fd && s.lo <= end + kMergeGap && merged <= max_read_) {
        last.len = static_cast<uint32_t>(merged);
        continue;
      }
    }
    // Through the page cache, so a read need not be page-aligned: a unit at a record's edge is
    // clipped to the record.
    page_reads.push_back(store::PageRead{s.fd, s.lo, static_cast<uint32_t>(s.hi - s.lo)});
    first.push_back(k);
  }
  first.push_back(spans.size());
  std::unique_ptr<store::PageReader> reader = TakeReader();
  const auto prepare = [&](size_t j) { return page_reads[j]; };
  const auto done = [&](size_t j, const uint8_t* data, ssize_t res) -> Status {
    const store::PageRead& pr = page_reads[j];
    const std::string& path = pieces_[parts[spans[first[j]].part].piece].path;
    if (res < 0) return ErrnoStatus(static_cast<int>(-res), "cannot read checkpoint file", path);
    // Every byte asked for lay in the file at open: a short read is a file cut since.
    if (static_cast<uint64_t>(res) < pr.len)
      return Status::Corrupt("checkpoint file ", path,
                             " is shorter than when it was opened (truncated): it ends at byte ",
                             pr.offset + static_cast<uint64_t>(res), ", a read of rows runs to ",
                             pr.offset + pr.len);
    // Each unit once (the spans of a piece come in file order, and units never span pieces),
    // all of them before any part is copied out.
    size_t piece = pieces_.size();
    uint64_t checked = 0;
    for (size_t k = first[j]; k < first[j + 1]; ++k) {
      const Span& s = spans[k];
      const size_t p = parts[s.part].piece;
      const uint64_t lo = p == piece ? std::max(s.lo, checked) : s.lo;
      if (lo < s.hi)
        SR_RETURN_IF_ERROR(pieces_[p].sums.Check(data + (lo - pr.offset), lo, s.hi, pieces_[p].path,
                                                 pieces_[p].rec.key));
      piece = p;
      checked = std::max(lo, s.hi);
    }
    for (size_t k = first[j]; k < first[j + 1]; ++k) {
      const Span& s = spans[k];
      std::memcpy(parts[s.part].dst, data + (s.at - pr.offset), s.len);
    }
    return Status::Ok();
  };
  const Status st = reader->Run(page_reads.size(), prepare, done);
  ReturnReader(std::move(reader));
  SR_RETURN_IF_ERROR(st);
  *reads += page_reads.size();
  for (const store::PageRead& pr : page_reads) *bytes += pr.len;
  return Status::Ok();
}

Status TieredReads::ReadStores(const std::vector<RowPart>& parts, uint64_t* reads,
                               uint64_t* bytes) const {
  // Per store, its distinct keys (a record's row is its store key), one Get for all of them.
  std::vector<int64_t> keys;
  std::vector<size_t> of_part;
  std::vector<uint8_t> values;
  for (size_t si = 0; si < stores_.size(); ++si) {
    keys.clear();
    of_part.clear();
    for (size_t i = 0; i < parts.size(); ++i)
      if (store_[parts[i].piece] == static_cast<int>(si)) {
        of_part.push_back(i);
        keys.push_back(parts[i].row);
      }
    if (keys.empty()) continue;
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    const store::RowStore& st = *stores_[si];
    const size_t vb = st.value_bytes();
    values.resize(keys.size() * vb);
    std::unique_ptr<bool[]> found(new bool[keys.size()]);
    const std::string& path = pieces_[parts[of_part[0]].piece].path;
    const Status s = stores_[si]->Get(keys.data(), keys.size(), values.data(), found.get());
    if (!s.ok())
      return Status(s.code(), StrCat("checkpoint store snapshot ", path, ": ", s.message()));
    for (size_t i : of_part) {
      const RowPart& rp = parts[i];
      const checkpoint::Record& rec = pieces_[rp.piece].rec;
      const size_t k =
          static_cast<size_t>(std::lower_bound(keys.begin(), keys.end(), rp.row) - keys.begin());
      if (!found[k])
        return Status::Corrupt("checkpoint store snapshot ", path, ": record ", rec.key, " row ",
                               rp.row, " is not in the snapshot");
      std::memcpy(rp.dst, values.data() + k * vb + static_cast<size_t>(rec.store_offset),
                  rec.row_bytes());
    }
    *reads += keys.size();
    *bytes += keys.size() * vb;
  }
  return Status::Ok();
}

}  // namespace shardrec::serving
