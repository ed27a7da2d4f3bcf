// All-or-nothing loading through host staging (staged_load.h).
#include "impl/checkpoint/staged_load.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "impl/core/check.h"
#include "impl/embedding/device_copy.h"

namespace shardrec::checkpoint {
namespace {

// True when the sources' overlaps with `dst` tile it: areas add up and no two overlap. The
// loaders check the areas; a hostile manifest could still overlap two records and leave a gap,
// which must not reach the collection as uninitialised staging memory.
bool ExactCover(const Target& dst, const std::vector<OverlapSource>& sources) {
  // Pairwise is quadratic: past a few dozen sources (never from a save; a hostile manifest could
  // list millions) the caller prefills instead, which is always correct.
  if (sources.size() > 64) return false;
  struct Rect {
    int64_t r0, r1, c0, c1;
  };
  std::vector<Rect> rects;
  int64_t area = 0;
  for (const OverlapSource& s : sources) {
    Rect q;
    if (!Overlap(*s.rec, dst, &q.r0, &q.r1, &q.c0, &q.c1)) continue;
    for (const Rect& p : rects)
      if (std::max(p.r0, q.r0) < std::min(p.r1, q.r1) &&
          std::max(p.c0, q.c0) < std::min(p.c1, q.c1))
        return false;
    area += (q.r1 - q.r0) * (q.c1 - q.c0);
    rects.push_back(q);
  }
  return area == dst.rows * dst.cols;
}

}  // namespace

Status StagedLoad::Add(const Device& device, const Target& dst,
                       std::vector<OverlapSource> sources) {
  Dest d{device, dst, std::move(sources), nullptr};
  const size_t es = DTypeSize(dst.dtype);
  const uint64_t row_bytes = static_cast<uint64_t>(dst.cols) * es;
  const uint64_t bytes = static_cast<uint64_t>(dst.rows) * row_bytes;
  if (!device.is_host()) {
    SR_CHECK(dst.row_stride == dst.cols);
    commit_can_fail_ = true;
  }
  // Fresh memory, not kept between loads: its page faults (and the kernel's zeroing) are most of
  // what staging costs over a straight read (tests/bench/RESULTS.md, "Checkpoints").
  if (bytes > 0 && staged_ + bytes <= limit_)
    d.staged.reset(new (std::nothrow) uint8_t[static_cast<size_t>(bytes)]);
  if (d.staged == nullptr) {
    // Beyond the limit (or no memory for it): verify now, read again while committing.
    commit_can_fail_ = commit_can_fail_ || bytes > 0;
    for (const OverlapSource& s : d.sources)
      SR_RETURN_IF_ERROR(VerifyOverlap(*s.file, s.path, *s.rec, dst, &buffer_));
    dests_.push_back(std::move(d));
    return Status::Ok();
  }
  staged_ += bytes;
  Target host = dst;
  host.data = d.staged.get();
  host.row_stride = dst.cols;
  if (!ExactCover(dst, d.sources)) {
    // Elements no source holds keep the destination's values.
    if (!device.is_host()) {
      SR_RETURN_IF_ERROR(
          embedding::CopyToHost(device, host.data, dst.data, static_cast<size_t>(bytes)));
    } else {
      for (int64_t r = 0; r < dst.rows; ++r)
        std::memcpy(d.staged.get() + static_cast<size_t>(r) * row_bytes,
                    static_cast<const uint8_t*>(dst.data) +
                        static_cast<size_t>(r) * static_cast<size_t>(dst.row_stride) * es,
                    static_cast<size_t>(row_bytes));
    }
  }
  for (const OverlapSource& s : d.sources)
    SR_RETURN_IF_ERROR(CopyOverlap(*s.file, s.path, *s.rec, host, &buffer_));
  dests_.push_back(std::move(d));
  return Status::Ok();
}

Status StagedLoad::Commit() {
  for (Dest& d : dests_) {
    const Target& dst = d.dst;
    const size_t es = DTypeSize(dst.dtype);
    const size_t row_bytes = static_cast<size_t>(dst.cols) * es;
    const size_t bytes = static_cast<size_t>(dst.rows) * row_bytes;
    if (bytes == 0) continue;
    if (d.staged == nullptr) {
      if (!d.device.is_host()) {
        SR_RETURN_IF_ERROR(CopyOverlapsToDevice(d.device, dst, d.sources, &staging_, &buffer_));
      } else {
        for (const OverlapSource& s : d.sources)
          SR_RETURN_IF_ERROR(CopyOverlap(*s.file, s.path, *s.rec, dst, &buffer_));
      }
      continue;
    }
    if (!d.device.is_host()) {
      SR_RETURN_IF_ERROR(embedding::CopyToDevice(d.device, dst.data, d.staged.get(), bytes));
    } else if (dst.row_stride == dst.cols) {
      std::memcpy(dst.data, d.staged.get(), bytes);
    } else {
      for (int64_t r = 0; r < dst.rows; ++r)
        std::memcpy(static_cast<uint8_t*>(dst.data) +
                        static_cast<size_t>(r) * static_cast<size_t>(dst.row_stride) * es,
                    d.staged.get() + static_cast<size_t>(r) * row_bytes, row_bytes);
    }
    d.staged.reset();  // give the memory back as soon as it is copied
  }
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
