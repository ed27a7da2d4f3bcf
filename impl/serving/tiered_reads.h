// The batched reads of a served tiered table's missed rows (tiered_rows.h): a request hands over
// all its misses at once, and they are read together instead of one synchronous read a row. A
// rank file's row parts, in file order, become reads of the whole checksum units (tiered_sums.h:
// whole rows, at least 512 bytes, clipped to the record) that hold them (units less than a page
// apart merged into one read), issued through the store's page reader (io_uring, up to
// kQueueDepth in flight; pread where liburing or the kernel refuses a ring), and each unit is
// checked against its checksum taken at open before any part is copied out; a store snapshot's
// rows become one batched Get of the snapshot's store, which reads its pages the same way and
// checks each record's checksum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/core/status.h"
#include "impl/serving/tiered_sums.h"
#include "impl/store/page_reader.h"
#include "impl/store/row_store.h"

namespace shardrec::serving {

// One weights record of the table and where its bytes are (already checked against the manifest
// and verified at open): a rank file (`path`) or a store snapshot's directory (`is_store`).
struct DiskPiece {
  std::string path;
  checkpoint::Record rec;
  bool is_store = false;
  checkpoint::StoreRef store;   // a snapshot's store and
  uint64_t manifest_bytes = 0;  // its MANIFEST's size (the file entry's)
  RecordSums sums;              // a rank file's record: its units' checksums, taken at open
};

// One row's part in one piece: piece `piece`, the record's row `row` (0 .. rec.rows), its
// stored bytes (rec.row_bytes()) wanted at `dst`.
struct RowPart {
  size_t piece = 0;
  int64_t row = 0;
  uint8_t* dst = nullptr;
};

class TieredReads {
 public:
  // Reads in flight per request (the store's default queue depth).
  static constexpr int kQueueDepth = 32;

  // Opens every piece's file: a rank file by its path (its record verified and its units'
  // checksums taken by the open's pass, tiered_pass.h: nothing of it is read here); a snapshot as
  // a read-only store (its MANIFEST checked against the entry, as checkpoint's OpenStoreSnapshot
  // checks it). kCorrupt / kIo naming the path.
  static Status Open(std::vector<DiskPiece> pieces, std::unique_ptr<TieredReads>* out);
  ~TieredReads();

  const std::vector<DiskPiece>& pieces() const { return pieces_; }

  // Reads every part (any order; parts may repeat a row). `reads` and `bytes` get what was asked
  // of the disk: reads and their (whole units') bytes for rank files, records and their bytes for
  // snapshots. kIo naming the file for a failed read; kCorrupt naming the file for a unit or
  // record whose checksum fails or a file shorter than at open; on failure some `dst` may have
  // been written. Thread-safe: concurrent calls take readers from a pool.
  Status Read(const std::vector<RowPart>& parts, uint64_t* reads, uint64_t* bytes) const;

 private:
  TieredReads() = default;
  Status ReadFiles(const std::vector<RowPart>& parts, uint64_t* reads, uint64_t* bytes) const;
  Status ReadStores(const std::vector<RowPart>& parts, uint64_t* reads, uint64_t* bytes) const;
  std::unique_ptr<store::PageReader> TakeReader() const;
  void ReturnReader(std::unique_ptr<store::PageReader> r) const;

  std::vector<DiskPiece> pieces_;
  std::vector<int> fd_;       // per piece: its rank file's descriptor, or -1 (a snapshot)
  std::vector<int> store_;    // per piece: index into stores_, or -1 (a rank file)
  std::vector<int> own_fds_;  // the descriptors to close (one per rank file)
  std::vector<std::unique_ptr<store::RowStore>> stores_;
  size_t max_read_ = 0;  // one read's most bytes (each pooled reader's buffer size)
  mutable std::mutex readers_mu_;
  mutable std::vector<std::unique_ptr<store::PageReader>> readers_;
};

}  // namespace shardrec::serving
