// The write-back queue of a collection's tiered tables (docs/disk-tier.md): a dirty row evicted
// from a cache is queued here and written to its store by the queue's own thread, so an eviction
// does not wait for the disk. Bounded: a push waits while `capacity` records are queued. A record
// is never lost: until its store has it, Find returns the newest queued record of its row (a
// later miss of that row reads it from here), and a failed write keeps it queued. The next Push
// or Drain meets the failure: it has the writer try the failed records once more and waits for
// that attempt, going on when it succeeds (the disk has room again, the directory is back) and
// returning the new error when it does not, so a passing condition costs the calls made while it
// lasts and nothing after it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "impl/core/status.h"
#include "impl/store/row_store.h"

namespace shardrec::embedding::tiered {

class WriteBackQueue {
 public:
  // `capacity` >= 1 records; starts the writer thread.
  explicit WriteBackQueue(size_t capacity);
  // Stops the writer; records still queued are dropped (the stores are scratch until a
  // checkpoint names them, and a checkpoint drains the queue first).
  ~WriteBackQueue();
  WriteBackQueue(const WriteBackQueue&) = delete;
  WriteBackQueue& operator=(const WriteBackQueue&) = delete;

  // Queues `record` (the store's value_bytes()) as row `key` of `store`, replacing an older queued
  // record of the row. Waits while the queue is full. After a failed write, first retries it
  // (see above); its error, or one the writer meets while this waits, queues nothing more.
  Status Push(store::RowStore* store, int64_t key, const uint8_t* record);
  // Push of `n` rows of `store`, taking the lock and waking the writer once per writer's batch
  // (256 records) instead of per record: record i (value_bytes() long) at
  // records + i * value_bytes() as row keys[i], in order. Waits for room record by record. On an
  // error (the writer's, found before, while waiting or between two batches) the records from the
  // first one not queued on are not queued; `*queued` (not null) says how many were.
  Status PushMany(store::RowStore* store, const int64_t* keys, const uint8_t* records, size_t n,
                  size_t* queued);

  // Copies the newest queued record of (store, key) into `out` and returns true; false when none
  // is queued.
  bool Find(store::RowStore* store, int64_t key, uint8_t* out) const;
  // Find of `n` rows of `store` under one lock: found[i] says whether row keys[i]'s record was
  // copied to out + i * value_bytes. Returns how many were.
  size_t FindMany(store::RowStore* store, const int64_t* keys, size_t n, uint8_t* out,
                  uint8_t* found) const;

  // Waits until every queued record is in its store (after a failed write, retrying it first);
  // the writer's error if a write failed.
  Status Drain();

  size_t depth() const;      // records queued now
  int64_t written() const;   // records the writer has put
  size_t max_depth() const;  // the most records queued at once

 private:
  using Key = std::pair<store::RowStore*, int64_t>;
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return static_cast<size_t>(
          (static_cast<uint64_t>(k.second) ^ reinterpret_cast<uintptr_t>(k.first)) *
          0x9E3779B97F4A7C15ull);
    }
  };
  struct Pending {
    std::vector<uint8_t> record;
    uint64_t seq = 0;
  };
  using Pendings = std::unordered_map<Key, Pending, KeyHash>;
  void Run();
  // After a failed write: clears the error, wakes the writer and waits for its next attempt (the
  // failed records are first in the order); that attempt's error, or OK. Called with mu_ held.
  Status RetryLocked(std::unique_lock<std::mutex>& lock);
  // Queues one record under mu_ (room already checked), reusing a spare node.
  void Enqueue(const Key& k, const uint8_t* record, size_t bytes);

  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  Pendings pending_;  // newest record per row
  // Nodes of written records, kept (with their record buffers) for later pushes so that a
  // steady stream of evictions allocates nothing; at most kSpareNodes.
  std::vector<Pendings::node_type> spare_;
  std::deque<std::pair<Key, uint64_t>> order_;  // writes in push order (seq of each)
  uint64_t next_seq_ = 1;
  size_t in_flight_ = 0;  // records the writer took and has not finished
  Status error_;
  uint64_t retries_asked_ = 0;  // RetryLocked calls
  uint64_t retries_done_ = 0;   // the value of retries_asked_ when the writer last finished a batch
  bool stop_ = false;
  int64_t written_ = 0;
  size_t max_depth_ = 0;
  std::thread writer_;
};

}  // namespace shardrec::embedding::tiered
