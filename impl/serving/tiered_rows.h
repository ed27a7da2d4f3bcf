// A served table whose rows stay in the checkpoint's files (docs/disk-tier.md, "Serving"): a
// lookup gathers the distinct rows of its request into a buffer of its own, from the table's row
// cache (row_cache.h) or, for the request's misses together, from the records of the checkpoint
// (tiered_reads.h: one batch of reads per request), converted to the table's storage type
// exactly as the in-memory open converts them; the pooled kernel then reads that buffer. Same
// bytes, same kernel, same order: the same bits as the table held in memory. A dynamic table's
// rows are its live ids in ascending order (the in-memory open's order), each mapped to its row
// in the saved records, and the row after them is the zero row unknown ids read.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/core/status.h"
#include "impl/serving/model.h"
#include "impl/serving/row_cache.h"
#include "impl/serving/tiered_reads.h"

namespace shardrec::serving {

struct TieredStats {
  uint64_t cache_bytes = 0;
  int64_t cache_slots = 0;
  int64_t cache_rows = 0;
  uint64_t hits = 0;             // distinct rows of a request found in the cache
  uint64_t misses = 0;           // distinct rows of a request read from the files
  uint64_t disk_reads = 0;       // reads issued (TieredReads: merged file reads, store records)
  uint64_t disk_read_bytes = 0;  // bytes those reads asked for
};

class TieredRows {
 public:
  // A request's scratch for this table (one per lookup call: concurrent lookups share nothing
  // but the cache). It starts empty and accumulates the request's distinct rows over its Gathers.
  struct Scratch {
    std::vector<uint8_t> rows;   // the request's distinct rows so far, stored form
    std::vector<int64_t> local;  // per row of the last Gather: its index in `rows`
    std::vector<int64_t> uniq;   // the distinct rows, in first-seen order
    std::vector<int64_t> slots;  // the dedup table: index into uniq, or -1
    std::vector<size_t> missed;  // indices into uniq the last Gather did not find in the cache
    std::vector<float> staging;  // one fp32 row (quantized storages, dynamic tables)
    std::vector<uint8_t> read;   // the missed rows' parts as stored in the files
    std::vector<RowPart> parts;  // where each part comes from and goes
  };

  // `reads`' pieces must cover the rows x dim table exactly once (the caller checked it): for a
  // fixed table, `record_rows` is empty and row r is the records' row r; for a dynamic one, row
  // r is the records' row record_rows[r] (r < rows), and row `rows` is the zero row.
  // kInvalidArgument from RowCache::Create.
  static Status Create(std::string table, int64_t rows, int32_t dim, Storage storage,
                       std::unique_ptr<TieredReads> reads, std::vector<int64_t> record_rows,
                       bool dynamic, uint64_t cache_bytes, std::shared_ptr<const TieredRows>* out);

  // Gathers the stored rows of rows[0..n) (each in [0, rows), or `rows` for a dynamic table's
  // zero row) into s->rows, one per distinct row of every Gather on `s` so far, with s->local[i]
  // the index of rows[i] there: a row an earlier Gather of the request brought is neither looked
  // up nor counted again (a row that several features of a request read counts once). The new
  // misses are read as one batch, and their bytes checked (tiered_reads.h) before any is
  // converted. kIo / kCorrupt naming the table and the file when a read fails, a checksum does
  // not match or the file is shorter than at open; kInvalidArgument when a row cannot be stored
  // in the table's storage (as open refuses it in memory). On any error nothing is cached, the
  // statistics are unchanged and `s` is unusable (the request fails).
  Status Gather(const int64_t* rows, size_t n, Scratch* s) const;

  uint64_t row_bytes() const { return row_bytes_; }
  TieredStats Stats() const;

 private:
  TieredRows() = default;
  // Reads the rows s->uniq[k] of every k in s->missed from the files, as one batch, into
  // s->rows in the table's storage.
  Status ReadMissed(Scratch* s) const;
  // Converts row `row`'s parts (its pieces' stored bytes, in piece order, at `raw`) into `dst`.
  Status Convert(int64_t row, const uint8_t* raw, uint8_t* dst, Scratch* s) const;

  std::string table_;
  int64_t rows_ = 0;
  int32_t dim_ = 0;
  Storage storage_ = Storage::kFp32;
  uint64_t row_bytes_ = 0;
  std::unique_ptr<TieredReads> reads_;
  std::vector<int64_t> record_rows_;  // a dynamic table's row -> its records' row
  bool dynamic_ = false;
  std::unique_ptr<RowCache> cache_;
  mutable std::atomic<uint64_t> hits_{0}, misses_{0}, disk_reads_{0}, disk_read_bytes_{0};
};

// The statistics of table `table` of `m`. kNotFound for an unknown table; kInvalidArgument for a
// table held in memory.
Status TableTierStats(const Model& m, const std::string& table, TieredStats* out);

}  // namespace shardrec::serving
