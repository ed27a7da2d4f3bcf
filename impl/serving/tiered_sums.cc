// The per-unit checksums of a served rank file's records (tiered_sums.h).
#include "impl/serving/tiered_sums.h"

#include <algorithm>
#include <cstring>

#include "impl/core/check.h"

namespace shardrec::serving {
namespace {

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

RecordSums::Builder::Builder(const checkpoint::Record& rec, RecordSums* out) : out_(out) {
  out->begin_ = rec.offset;
  out->end_ = rec.offset + rec.nbytes;
  out->sums_.clear();
  const uint64_t row_bytes = rec.row_bytes();
  out->unit_ = std::max<uint64_t>(1, UnitRows(row_bytes) * row_bytes);
  out->sums_.reserve(static_cast<size_t>((rec.nbytes + out->unit_ - 1) / out->unit_));
  unit_ = out->begin_;
}

Status RecordSums::Builder::Visit(const checkpoint::Record& rec, int64_t lo, int64_t hi,
                                  const uint8_t* data) {
  const uint64_t row_bytes = rec.row_bytes();
  SR_CHECK(rec.offset == out_->begin_ &&
           rec.offset + static_cast<uint64_t>(lo) * row_bytes == unit_ + held_.size());
  const uint8_t* p = data;
  uint64_t n = static_cast<uint64_t>(hi - lo) * row_bytes;
  // A chunk's edges need not fall on a unit's: the unit begun in the last chunk ends here.
  if (!held_.empty()) {
    const uint64_t e = out_->UnitEnd(unit_);
    const uint64_t take = std::min<uint64_t>(n, e - unit_ - held_.size());
    held_.insert(held_.end(), p, p + take);
    p += take;
    n -= take;
    if (unit_ + held_.size() < e) return Status::Ok();
    out_->sums_.push_back(Sum(held_.data(), held_.size()));
    held_.clear();
    unit_ = e;
  }
  while (n > 0) {
    const uint64_t e = out_->UnitEnd(unit_);
    if (e - unit_ > n) {
      held_.assign(p, p + n);
      break;
    }
    out_->sums_.push_back(Sum(p, e - unit_));
    p += e - unit_;
    n -= e - unit_;
    unit_ = e;
  }
  return Status::Ok();
}

void RecordSums::Builder::Finish() const { SR_CHECK(unit_ == out_->end_ && held_.empty()); }

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
