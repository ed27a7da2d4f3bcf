// The project's log-structured record store behind RowStore (row_store.h; design in
// docs/disk-tier.md, "The store"): an in-memory KeyIndex, append-only segment files of 4 KiB
// pages (format.h), a MANIFEST written by each Flush as the only durable state, batched reads
// through io_uring or pread, and a compaction thread. White-box tests open it through
// OpenLogStore to set what the public options leave fixed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "impl/store/format.h"
#include "impl/store/key_index.h"
#include "impl/store/page_reader.h"
#include "impl/store/row_store.h"

namespace shardrec::store {

// What OpenRowStore fixes and tests vary.
struct LogTuning {
  uint64_t segment_bytes = uint64_t{64} << 20;  // a segment is sealed at this size
  size_t write_chunk = size_t{256} << 10;       // full pages are written in chunks of this
  bool try_io_uring = true;                     // false: the pread reader
  int compact_interval_ms = 200;                // how often the compaction thread looks
};

class LogStore;
Status OpenLogStore(const StoreOptions& o, const LogTuning& t, std::unique_ptr<LogStore>* out);

class LogStore final : public RowStore {
 public:
  ~LogStore() override;

  size_t value_bytes() const override { return geo_.value_bytes; }
  Status Get(const int64_t* keys, size_t n, uint8_t* out, bool* found) override;
  Status Put(const int64_t* keys, const uint8_t* values, size_t n) override;
  Status Contains(const int64_t* keys, size_t n, bool* found) override;
  Status Erase(const int64_t* keys, size_t n) override;
  Status Flush() override;
  Status Snapshot(const std::string& dir) override;
  Status Scan(int64_t* cursor, size_t max, std::vector<int64_t>* keys,
              std::vector<uint8_t>* values) override;
  StoreStats stats() const override;

  // For tests and the benchmark: whether Gets go through io_uring; and one compaction pass now
  // (what the thread does), returning how many segments it rewrote.
  bool uses_io_uring() const;
  Status CompactNow(int* rewritten);
  // The last error the compaction thread met (OK when none).
  Status compaction_error() const;

 private:
  friend Status OpenLogStore(const StoreOptions&, const LogTuning&, std::unique_ptr<LogStore>*);
  struct Segment;
  struct Mark;
  class Tail;

  LogStore(const StoreOptions& o, const LogTuning& t);

  // store_open.cc
  Status Open();
  Status Recover(const Manifest& m);
  Status RemoveStoreFiles();
  Status OpenSegment(uint32_t id, uint64_t slots, std::shared_ptr<Segment>* out);

  // store_write.cc; the *Locked ones need mu_ held exclusively.
  Status CreateSegmentLocked(std::shared_ptr<Segment>* out);
  Status AppendLocked(const int64_t* keys, const uint8_t* values, size_t n, uint64_t* locs);
  Status WriteTailLocked(bool pad);
  // A write call marks the state first (cheap) and rolls back to it on failure; the tail's
  // content is copied only when the call first writes pages (what a rollback cannot rebuild).
  void MarkLocked(Mark* m);
  void RollbackLocked(Mark* m);
  // The index entry of a key moved from `from` (0: none) to `to`: the segments' live counts.
  void MoveLocked(uint64_t from, uint64_t to);

  // store_flush.cc
  Status FlushImpl(bool seal);
  // Needs flush_mu_; with `seal` the active segment is closed to appends, so every segment the
  // manifest names is immutable from then on (what a snapshot links).
  Status FlushLocked(bool seal, Manifest* made);
  Status WriteManifest(const Manifest& m);
  std::string SegmentPath(uint32_t id) const;
  // store_verify.cc. Needs flush_mu_: reads back the live records (those `m` names) of each
  // sealed segment of `m` not checked before, kCorrupt naming the first that fails its checksum
  // (the snapshot is then refused), and remembers the segments that passed.
  Status VerifyForSnapshot(const Manifest& m);

  // store_compact.cc
  void CompactionLoop();
  Status CompactPass(int* rewritten);
  Status CompactSegment(const std::shared_ptr<Segment>& seg, bool* done);

  // Reads the records of keys[j] at (segs[j], slots[j]) into out + out_index[j] * value_bytes,
  // checking each; store_read.cc.
  // The caller holds every segment named (reads run outside mu_).
  Status ReadRecords(const std::vector<const Segment*>& segs, const std::vector<uint32_t>& slots,
                     const std::vector<int64_t>& keys, const std::vector<size_t>& out_index,
                     uint8_t* out, bool* found);
  std::unique_ptr<PageReader> TakeReader();
  void ReturnReader(std::unique_ptr<PageReader> r);

  StoreOptions o_;
  LogTuning t_;
  RecordGeometry geo_;
  uint64_t idh_ = 0;
  uint64_t slots_per_segment_ = 0;
  int dir_fd_ = -1;  // holds the directory's flock

  mutable std::shared_mutex mu_;  // the index, the segment table and the tail
  KeyIndex index_;
  std::map<uint32_t, std::shared_ptr<Segment>> segs_;  // every segment the index may name
  std::vector<std::shared_ptr<Segment>> retired_;      // emptied by compaction, not yet unlinked
  std::shared_ptr<Segment> active_;                    // null: the next append makes one
  uint32_t next_segment_ = 1;
  std::unique_ptr<Tail> tail_;
  Mark* mark_ = nullptr;  // the running write call's mark, while it runs
  uint64_t generation_ = 0;

  std::mutex flush_mu_;          // one Flush or Snapshot at a time
  std::set<uint32_t> verified_;  // sealed segments a snapshot has read back (under flush_mu_)
  std::mutex scan_mu_;
  std::shared_ptr<std::vector<int64_t>> scan_keys_;  // the sorted keys of the running scan

  mutable std::mutex readers_mu_;
  std::vector<std::unique_ptr<PageReader>> readers_;
  std::atomic<int> uring_state_{-1};  // -1 unknown, 0 pread, 1 io_uring
  std::atomic<bool> direct_ok_{false};

  std::atomic<int64_t> reads_{0}, read_bytes_{0}, writes_{0}, write_bytes_{0}, compactions_{0};

  std::mutex pass_mu_;             // one compaction pass at a time
  mutable std::mutex compact_mu_;  // the thread's wake-up and its error
  std::condition_variable compact_cv_;
  bool stop_ = false;
  std::atomic<bool> stopping_{false};
  Status compaction_error_;
  std::thread compactor_;
};

}  // namespace shardrec::store
