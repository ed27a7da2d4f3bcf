// A served fixed table whose rows stay in the checkpoint's files (docs/disk-tier.md, "Serving"):
// a lookup gathers the distinct rows of its request into a buffer of its own, from the table's
// row cache (row_cache.h) or, on a miss, from the records of the checkpoint (one read per record
// that holds a part of the row), converted to the table's storage type exactly as the in-memory
// open converts them; the pooled kernel then reads that buffer. Same bytes, same kernel, same
// order: the same bits as the table held in memory.
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

namespace shardrec::serving {

// One weights record of the table and the checkpoint file that holds it (already checked
// against the manifest and verified).
struct DiskPiece {
  std::shared_ptr<const checkpoint::ReadableFile> file;
  std::string path;
  checkpoint::Record rec;
};

struct TieredStats {
  uint64_t cache_bytes = 0;
  int64_t cache_slots = 0;
  int64_t cache_rows = 0;
  uint64_t hits = 0;             // distinct rows of a request found in the cache
  uint64_t misses = 0;           // distinct rows of a request read from the files
  uint64_t disk_reads = 0;       // reads issued to the files (one per record part of a miss)
  uint64_t disk_read_bytes = 0;  // bytes those reads asked for
};

class TieredRows {
 public:
  // A request's scratch (one per lookup call: concurrent lookups share nothing but the cache).
  struct Scratch {
    std::vector<uint8_t> rows;   // the request's distinct rows, stored form
    std::vector<int64_t> local;  // per row of the request: its index in `rows`
    std::vector<int64_t> uniq;   // the distinct rows, in first-seen order
    std::vector<int64_t> slots;  // the dedup table: index into uniq, or -1
    std::vector<size_t> missed;  // indices into uniq not found in the cache
    std::vector<float> staging;  // one fp32 row (quantized storages)
    std::vector<uint8_t> read;   // one record's part of a row as stored in the file
  };

  // `pieces` must cover the rows x dim table exactly once (the caller checked it). kInvalidArgument
  // from RowCache::Create.
  static Status Create(std::string table, int64_t rows, int32_t dim, Storage storage,
                       std::vector<DiskPiece> pieces, uint64_t cache_bytes,
                       std::shared_ptr<const TieredRows>* out);

  // Gathers the stored rows of rows[0..n) (each in [0, rows)) into s->rows, one per distinct
  // row, with s->local[i] the index of rows[i] there. kIo / kCorrupt naming the file when a read
  // fails; kInvalidArgument when a row cannot be stored in the table's storage (as open refuses
  // it in memory).
  Status Gather(const int64_t* rows, size_t n, Scratch* s) const;

  uint64_t row_bytes() const { return row_bytes_; }
  TieredStats Stats() const;

 private:
  TieredRows() = default;
  // Reads row `row` from the files and converts it into `dst` (row_bytes_).
  Status ReadRow(int64_t row, uint8_t* dst, Scratch* s) const;

  std::string table_;
  int64_t rows_ = 0;
  int32_t dim_ = 0;
  Storage storage_ = Storage::kFp32;
  uint64_t row_bytes_ = 0;
  std::vector<DiskPiece> pieces_;
  std::unique_ptr<RowCache> cache_;
  mutable std::atomic<uint64_t> hits_{0}, misses_{0}, disk_reads_{0}, disk_read_bytes_{0};
};

// The statistics of table `table` of `m`. kNotFound for an unknown table; kInvalidArgument for a
// table held in memory.
Status TableTierStats(const Model& m, const std::string& table, TieredStats* out);

}  // namespace shardrec::serving
