// The rows of a served table read from the checkpoint's files through a row cache
// (tiered_rows.h).
#include "impl/serving/tiered_rows.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <utility>

#include "impl/core/check.h"
#include "impl/core/element.h"
#include "impl/core/fp8.h"
#include "impl/serving/encode.h"

namespace shardrec::serving {
namespace {

// The dtype a non-quantized storage keeps its values in (the in-memory open converts the
// record's elements straight into it, checkpoint's CopyOverlap).
DType StoredDType(Storage s) {
  return s == Storage::kFp16   ? DType::kFloat16
         : s == Storage::kBf16 ? DType::kBFloat16
                               : DType::kFloat32;
}

uint64_t Mix(int64_t row) { return static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull; }

// The dedup table's slot of `row`: where it is, or the empty slot where it goes (linear probing;
// the table is at most half full, so there is one).
uint64_t SlotOf(const TieredRows::Scratch& s, int64_t row, int shift, uint64_t mask) {
  uint64_t h = Mix(row) >> shift;
  while (s.slots[h] >= 0 && s.uniq[static_cast<size_t>(s.slots[h])] != row) h = (h + 1) & mask;
  return h;
}

}  // namespace

Status TieredRows::Create(std::string table, int64_t rows, int32_t dim, Storage storage,
                          std::unique_ptr<TieredReads> reads, std::vector<int64_t> record_rows,
                          bool dynamic, uint64_t cache_bytes,
                          std::shared_ptr<const TieredRows>* out) {
  auto t = std::shared_ptr<TieredRows>(new TieredRows());
  t->table_ = std::move(table);
  t->rows_ = rows;
  t->dim_ = dim;
  t->storage_ = storage;
  t->row_bytes_ = RowBytes(storage, dim);
  t->reads_ = std::move(reads);
  t->record_rows_ = std::move(record_rows);
  t->dynamic_ = dynamic;
  SR_RETURN_IF_ERROR(
      RowCache::Create(t->row_bytes_, cache_bytes, "tier of table " + t->table_, &t->cache_));
  *out = std::move(t);
  return Status::Ok();
}

Status TieredRows::Convert(int64_t row, const uint8_t* raw, uint8_t* dst, Scratch* s) const {
  // A dynamic table's rows go through fp32 and the encoder whatever the storage, as the
  // in-memory open of a dynamic table converts them (open_checkpoint.cc, ReadDynamicTable).
  const bool staged = IsEncodedStorage(storage_) || dynamic_;
  const DType to = staged ? DType::kFloat32 : StoredDType(storage_);
  const size_t to_es = DTypeSize(to);
  uint8_t* out = dst;
  if (staged) {
    s->staging.resize(static_cast<size_t>(dim_));
    out = reinterpret_cast<uint8_t*>(s->staging.data());
  }
  const int64_t rr = dynamic_ ? record_rows_[static_cast<size_t>(row)] : row;
  for (const DiskPiece& p : reads_->pieces()) {
    const checkpoint::Record& r = p.rec;
    if (rr < r.row_offset || rr >= r.row_offset + r.rows) continue;
    const uint64_t n = r.row_bytes();
    uint8_t* col0 = out + static_cast<size_t>(r.col_offset) * to_es;
    const uint8_t* in = raw;
    raw += n;
    if (r.dtype == to) {  // the element bytes are the stored bytes (CopyOverlap's memcpy)
      std::memcpy(col0, in, n);
      continue;
    }
    if (IsFp8DType(r.dtype)) {  // an FP8 table's stored row (checkpoint/format.h): decode it
      float scale;
      std::memcpy(&scale, in, sizeof(scale));
      if (!IsValidFp8Scale(scale))
        return Status::Corrupt("table ", table_, " row ", row, ": stored FP8 scale ", scale,
                               " is not a power of two an FP8 row may carry");
      const Fp8Kind kind = Fp8KindOf(r.dtype);
      for (int64_t c = 0; c < r.cols; ++c)
        StoreElement(to, DecodeFp8(kind, in[kFp8HeaderBytes + c]) * scale, col0 + c * to_es);
      continue;
    }
    const size_t es = DTypeSize(r.dtype);
    for (int64_t c = 0; c < r.cols; ++c)
      StoreElement(to, LoadElement(r.dtype, in + c * es), col0 + c * to_es);
  }
  if (staged)
    SR_RETURN_IF_ERROR(EncodeRows(s->staging.data(), 1, dim_, storage_, dst,
                                  "table " + table_ + " (row " + std::to_string(row) + ")"));
  return Status::Ok();
}

Status TieredRows::ReadMissed(Scratch* s) const {
  // Every missed row's parts (one per record holding a part of it, in piece order) laid out
  // back to back in s->read, then read as one batch.
  const std::vector<DiskPiece>& pieces = reads_->pieces();
  const auto record_row = [&](size_t k) {
    const int64_t row = s->uniq[k];
    return dynamic_ ? record_rows_[static_cast<size_t>(row)] : row;
  };
  const auto holds = [](const checkpoint::Record& r, int64_t rr) {
    return rr >= r.row_offset && rr < r.row_offset + r.rows;
  };
  uint64_t raw_bytes = 0;
  for (size_t k : s->missed)
    for (const DiskPiece& p : pieces)
      if (holds(p.rec, record_row(k))) raw_bytes += p.rec.row_bytes();
  s->read.resize(raw_bytes);
  s->parts.clear();
  uint8_t* at = s->read.data();
  for (size_t k : s->missed) {
    const int64_t rr = record_row(k);
    for (size_t pi = 0; pi < pieces.size(); ++pi) {
      const checkpoint::Record& r = pieces[pi].rec;
      if (!holds(r, rr)) continue;
      s->parts.push_back(RowPart{pi, rr - r.row_offset, at});
      at += r.row_bytes();
    }
  }
  uint64_t reads = 0, bytes = 0;
  const Status st = reads_->Read(s->parts, &reads, &bytes);
  if (!st.ok()) return Status(st.code(), StrCat("table ", table_, ": ", st.message()));
  const uint8_t* raw = s->read.data();
  for (size_t k : s->missed) {
    SR_RETURN_IF_ERROR(Convert(s->uniq[k], raw, s->rows.data() + k * row_bytes_, s));
    const int64_t rr = record_row(k);
    for (const DiskPiece& p : pieces)
      if (holds(p.rec, rr)) raw += p.rec.row_bytes();
  }
  disk_reads_.fetch_add(reads, std::memory_order_relaxed);
  disk_read_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return Status::Ok();
}

Status TieredRows::Gather(const int64_t* rows, size_t n, Scratch* s) const {
  // Distinct rows first (an open-addressing table at most half full, kept over the request's
  // Gathers), so a request reads and copies each row once however often its bags name it.
  const size_t before = s->uniq.size();
  size_t cap = std::max<size_t>(16, s->slots.size());
  while (cap < 2 * (before + n)) cap *= 2;
  const uint64_t mask = cap - 1;
  const int shift = 64 - std::countr_zero(cap);
  if (s->slots.size() != cap) {  // new or grown: the request's earlier rows placed again
    s->slots.assign(cap, -1);
    for (size_t k = 0; k < before; ++k)
      s->slots[SlotOf(*s, s->uniq[k], shift, mask)] = static_cast<int64_t>(k);
  }
  s->local.resize(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t& e = s->slots[SlotOf(*s, rows[i], shift, mask)];
    if (e < 0) {
      e = static_cast<int64_t>(s->uniq.size());
      s->uniq.push_back(rows[i]);
    }
    s->local[i] = e;
  }
  const size_t u = s->uniq.size();
  s->rows.resize(u * row_bytes_);
  s->missed.clear();
  size_t zero = 0;
  for (size_t k = before; k < u; ++k) {
    uint8_t* dst = s->rows.data() + k * row_bytes_;
    if (dynamic_ && s->uniq[k] == rows_) {  // the zero row: all zero bytes, as in memory
      std::memset(dst, 0, row_bytes_);
      ++zero;
    } else if (!cache_->Get(s->uniq[k], dst)) {
      s->missed.push_back(k);
    }
  }
  // A request that fails counts nothing more: the statistics describe the rows that were served.
  if (!s->missed.empty()) {
    SR_RETURN_IF_ERROR(ReadMissed(s));
    for (size_t k : s->missed) cache_->Put(s->uniq[k], s->rows.data() + k * row_bytes_);
  }
  hits_.fetch_add(u - before - zero - s->missed.size(), std::memory_order_relaxed);
  misses_.fetch_add(s->missed.size(), std::memory_order_relaxed);
  return Status::Ok();
}

TieredStats TieredRows::Stats() const {
  TieredStats st;
  st.cache_bytes = cache_->bytes();
  st.cache_slots = cache_->slots();
  st.cache_rows = cache_->rows();
  st.hits = hits_.load(std::memory_order_relaxed);
  st.misses = misses_.load(std::memory_order_relaxed);
  st.disk_reads = disk_reads_.load(std::memory_order_relaxed);
  st.disk_read_bytes = disk_read_bytes_.load(std::memory_order_relaxed);
  return st;
}

Status TableTierStats(const Model& m, const std::string& table, TieredStats* out) {
  for (const Table& t : m.tables) {
    if (t.name != table) continue;
    if (!t.tiered)
      return Status::InvalidArgument("table '", table,
                                     "' is held in memory, not served from the checkpoint's "
                                     "files (options.tiers)");
    *out = t.tiered->Stats();
    return Status::Ok();
  }
  return Status::NotFound("no table named '", table, "'");
}

}  // namespace shardrec::serving
