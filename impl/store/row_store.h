// The disk tier's storage seam (docs/disk-tier.md): a store of fixed-size records keyed by a
// 64-bit key, on local disk, one per table shard and rank. A tiered table keeps its rows and
// their optimizer state here and only the hot rows in a DRAM cache above it
// (impl/embedding/tiered); a record is the cache's row image (the row in its storage type, then
// its optimizer state), opaque to the store. The engine behind the interface is the project's own
// log-structured store (docs/disk-tier.md says why); the interface is kept small (batched get and
// put, erase, flush, snapshot, scan) so that another engine can be measured behind it.
//
// Durability: a record put is readable at once by Get, and survives a crash only after Flush
// returned OK (destroying the store does not flush: what was put since the last Flush is gone
// at the next open; a background compaction's own flush may make some of it durable earlier).
// The working files of a store are scratch: only a snapshot that a checkpoint names is a state a
// restart may load (OpenRowStore refuses or rebuilds anything else, never reads it as valid).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::store {

// What a store is for; a directory holding a store made with other values is another job's or
// another plan's and is refused (or, with `rebuild`, emptied), never read.
struct StoreOptions {
  std::string dir;         // created if missing; one store per directory (locked while open)
  std::string identity;    // table, shard and plan fingerprint, written into the store's header
  size_t value_bytes = 0;  // every record's size, > 0
  bool rebuild = false;    // a directory of another identity, or a torn one, is emptied
  bool read_only = false;  // serving: a snapshot's files, never written
  // Reads bypass the page cache (O_DIRECT) where the file system allows it; the store falls back
  // to buffered reads where it does not, and says so in its stats.
  bool direct_io = true;
  int queue_depth = 32;             // reads in flight per batched Get
  double compact_dead_ratio = 0.5;  // a segment whose dead share exceeds it is rewritten
};

// Counters since open; a snapshot of them, consistent per field.
struct StoreStats {
  int64_t live_records = 0;
  int64_t disk_bytes = 0;   // bytes of segment files on disk
  int64_t index_bytes = 0;  // memory of the in-memory index
  int64_t reads = 0;        // records read from disk
  int64_t read_bytes = 0;   // bytes read from disk (whole pages)
  int64_t writes = 0;       // records written
  int64_t write_bytes = 0;
  int64_t compactions = 0;
  bool direct_io = false;  // whether reads really bypass the page cache
};

// Thread-safe: Get, Put and Erase may run concurrently from different threads (a prefetch and a
// write-back thread); the order of two writes of one key is the order their calls returned in.
// Flush, Snapshot and Scan may run beside them.
class RowStore {
 public:
  virtual ~RowStore() = default;

  virtual size_t value_bytes() const = 0;

  // Reads the records of `keys[0..n)` into `out + i * value_bytes()`; found[i] says whether key i
  // has a record (where it has none, that slot of `out` is left as it was). kCorrupt when a
  // record's checksum fails (naming the file); kIo naming the file on a read error.
  virtual Status Get(const int64_t* keys, size_t n, uint8_t* out, bool* found) = 0;

  // Writes the records `values + i * value_bytes()` of `keys[0..n)` (a later put of a key
  // replaces its record). kIo naming the directory when the disk is full: then no record of this
  // call is visible and the store is as before the call.
  virtual Status Put(const int64_t* keys, const uint8_t* values, size_t n) = 0;

  // found[i] says whether key keys[i] has a record, without reading it (the index only, where
  // the engine has one; this default reads the records). A checkpoint's save asks it to find the
  // rows it must write once before a snapshot (docs/disk-tier.md, Checkpoints).
  virtual Status Contains(const int64_t* keys, size_t n, bool* found) {
    std::vector<uint8_t> scratch(value_bytes());
    for (size_t i = 0; i < n; ++i) {
      Status s = Get(keys + i, 1, scratch.data(), found + i);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  // Removes the records of `keys` (absent keys are ignored).
  virtual Status Erase(const int64_t* keys, size_t n) = 0;

  // Makes every record put before the call durable.
  virtual Status Flush() = 0;

  // Flushes, then makes `dir` (which must not exist) a read-only copy of the store's state at the
  // call that shares the segment files by hard link where the file system allows it (and copies
  // them where it does not). The store goes on being written beside it.
  virtual Status Snapshot(const std::string& dir) = 0;

  // Streams the live records in key order, at most `max` per call from `*cursor` (0 to start);
  // sets `*cursor` to where the next call starts, or -1 after the last record. Records put or
  // erased during a scan may or may not be seen.
  virtual Status Scan(int64_t* cursor, size_t max, std::vector<int64_t>* keys,
                      std::vector<uint8_t>* values) = 0;

  virtual StoreStats stats() const = 0;
};

// Opens (or creates) the store in `o.dir`. kInvalidArgument for bad options, naming them;
// kCorrupt for a directory holding another identity or a torn store when `o.rebuild` is false;
// kIo naming the path for a file-system error; kInvalidUsage while another open store holds the
// directory (shared among read-only opens); kNotFound for a read-only open of a directory
// without a store. Nothing in `o.dir` is changed on failure unless `o.rebuild` is set.
Status OpenRowStore(const StoreOptions& o, std::unique_ptr<RowStore>* out);

}  // namespace shardrec::store
