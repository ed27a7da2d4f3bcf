// The per-unit checksums of a served rank file's records (tiered_sums.h).
#include "impl/serving/tiered_sums.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "impl/core/check.h"

namespace shardrec::serving {
namespace {

// Reads n bytes at `offset`; *got receives how many there were before the file's end.
Status ReadFully(int fd, const std::string& path, uint64_t offset, uint8_t* out, size_t n,
                 size_t* got) {
  *got = 0;
  while (*got < n) {
    const ssize_t r = ::pread(fd, out + *got, n - *got, static_cast<off_t>(offset + *got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::Io("cannot read checkpoint file ", path, ": ", std::strerror(errno));
    if (r == 0) break;
    *got += static_cast<size_t>(r);
  }
  return Status::Ok();
}

uint32_t Sum(const uint8_t* data, uint64_t n) {
  return static_cast<uint32_t>(checkpoint::Checksum(data, static_cast<size_t>(n)));
}

}  // namespace

uint64_t RecordSums::UnitRows(uint64_t row_bytes) {
  return row_bytes == 0 ? 1 : std::max<uint64_t>(1, (kUnit + row_bytes - 1) / row_bytes);
}

uint64_t RecordSums::UnitEnd(uint64_t at) const {
  return std::min(end_, begin_ + ((at - begin_) / unit_ + 1) * unit_);
}

Status RecordSums::Build(int fd, const std::string& path, const checkpoint::Record& rec,
                         std::vector<uint8_t>* buffer, RecordSums* out) {
  out->begin_ = rec.offset;
  out->end_ = rec.offset + rec.nbytes;
  out->sums_.clear();
  const uint64_t row_bytes = rec.row_bytes();
  out->unit_ = std::max<uint64_t>(1, UnitRows(row_bytes) * row_bytes);
  if (rec.nbytes == 0) return Status::Ok();
  out->sums_.reserve(static_cast<size_t>((rec.nbytes + out->unit_ - 1) / out->unit_));
  // The buffer holds the bytes of the unit not yet complete (they start at `unit`), then the
  // chunk just read: a chunk's edges need not fall on a unit's.
  uint64_t unit = out->begin_;
  size_t held = 0;
  for (int64_t lo = 0, c = 0; lo < rec.rows; lo += rec.chunk_rows, ++c) {
    const int64_t hi = std::min(rec.rows, lo + rec.chunk_rows);
    const size_t n = static_cast<size_t>(hi - lo) * row_bytes;
    const uint64_t at = rec.offset + static_cast<uint64_t>(lo) * row_bytes;
    buffer->resize(held + n);
    size_t got = 0;
    SR_RETURN_IF_ERROR(ReadFully(fd, path, at, buffer->data() + held, n, &got));
    if (got < n)
      return Status::Corrupt(path, " is truncated: it ends at byte ", at + got, ", record ",
                             rec.key, " runs to byte ", out->end_);
    if (!rec.checksums.empty() &&
        checkpoint::Checksum(buffer->data() + held, n) != rec.checksums[static_cast<size_t>(c)])
      return Status::Corrupt(path, ": record ", rec.key, " is corrupt (checksum of rows ",
                             rec.row_offset + lo, "..", rec.row_offset + hi - 1,
                             " does not match the manifest)");
    held += n;
    size_t used = 0;
    for (uint64_t e = out->UnitEnd(unit); unit < out->end_ && e - unit <= held - used;
         e = out->UnitEnd(unit)) {
      out->sums_.push_back(Sum(buffer->data() + used, e - unit));
      used += e - unit;
      unit = e;
    }
    std::memmove(buffer->data(), buffer->data() + used, held - used);
    held -= used;
  }
  return Status::Ok();
}

void RecordSums::Cover(uint64_t at, uint64_t len, uint64_t* lo, uint64_t* hi) const {
  *lo = begin_ + (at - begin_) / unit_ * unit_;
  *hi = std::min(end_, begin_ + (at + len - begin_ + unit_ - 1) / unit_ * unit_);
}

void RecordSums::Prefetch(uint64_t lo, uint64_t hi) const {
  for (uint64_t at = lo; at < hi; at += unit_)
    __builtin_prefetch(sums_.data() + (at - begin_) / unit_, /*rw=*/0, /*locality=*/3);
}

Status RecordSums::Check(const uint8_t* data, uint64_t lo, uint64_t hi, const std::string& path,
                         const std::string& key) const {
  size_t u = static_cast<size_t>((lo - begin_) / unit_);
  for (uint64_t at = lo; at < hi; ++u) {
    const uint64_t e = UnitEnd(at);
    if (Sum(data + (at - lo), e - at) != sums_[u])
      return Status::Corrupt("checkpoint file ", path, " has changed since it was opened: bytes ",
                             at, "..", e - 1, " of record ", key,
                             " do not match their checksum taken at open");
    at = e;
  }
  return Status::Ok();
}

}  // namespace shardrec::serving
