// A collection's tiered tables on one rank (docs/disk-tier.md): per tiered local shard a record
// store (impl/store/row_store.h) holding every row written back, a cache of slots in the
// parameter store's arenas holding the hot rows, and one write-back queue and one prefetch thread
// for all of them. Resolve is the tiered row resolver's work: it makes every row of a batch
// resident and pinned, and turns the batch's rows into slots, so lookups, the backward and the
// fused optimizer touch cached slots only and give the bits of the same table in memory.
//
// Thread-safety: Resolve, ReadShard and Stats run on the collection's thread; Prefetch runs on
// the input distribution's worker while the collection's thread may train the previous batch
// (which touches slot values, never the caches' maps), and hands the batch's misses to the
// prefetch thread, which reads them and installs them in the caches under cache_mu_: it evicts
// only rows pinned before the last Resolve, so the slots of the batch being trained and of the
// prefetched batch's hits are never touched.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "impl/core/status.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/param_store.h"
#include "impl/embedding/tiered/cache_layout.h"
#include "impl/embedding/tiered/row_set.h"
#include "impl/embedding/tiered/slot_cache.h"
#include "impl/embedding/tiered/tier_config.h"
#include "impl/embedding/tiered/tier_stats.h"
#include "impl/embedding/tiered/write_back.h"
#include "impl/store/row_store.h"

namespace shardrec::embedding::tiered {

// Opens a store; store::OpenRowStore unless a test gives another.
using StoreOpener =
    std::function<Status(const store::StoreOptions&, std::unique_ptr<store::RowStore>*)>;

class TieredTables {
 public:
  TieredTables() = default;
  ~TieredTables();
  TieredTables(const TieredTables&) = delete;
  TieredTables& operator=(const TieredTables&) = delete;

  // Opens an empty store per shard of `shards` (ShrinkToCache's) under its tier's directory,
  // emptying whatever an earlier run left there (the stores are scratch), and gives the
  // parameter store each shard's slot-to-row keys for stochastic rounding. `layout` and `params`
  // must outlive this object. kIo / kInvalidArgument naming the table and path.
  Status Open(const Layout* layout, ParamStore* params, std::vector<TieredShard> shards,
              const std::vector<TierConfig>& tiers, uint64_t seed, const StoreOpener& opener = {});

  bool empty() const { return shards_.empty(); }
  // The entry of `local` in shards_, or -1 when that local shard is not tiered.
  int32_t ShardOf(int32_t local) const;

  // Turns the rows of `rb`'s tiered shards into cache slots: misses are taken from this batch's
  // prefetch, else the write-back queue, else the store (one batched Get per shard), else
  // initialised like the in-memory table's row; evicted dirty rows go to the write-back queue.
  // The slots of `in_flight` (the batch a backward may still train, null if none) and of `rb`
  // are not evicted. A training batch's rows become dirty. kInvalidArgument (naming the table
  // and the counts) when a batch needs more rows resident than the cache holds: nothing is
  // evicted then; the store's errors otherwise. Either way the rows' values are all kept.
  Status Resolve(RoutedBatch& rb, const RoutedBatch* in_flight, bool training);

  // Starts reading `rb`'s misses on the prefetch thread (the pipelined input distribution calls
  // it once the batch's ids arrived) and pins its hits: that thread reads the misses and installs
  // them in the caches (evicting, queueing dirty victims, copying the records into the slots),
  // so the next Resolve finds them cached; it waits for the job first. Misses that do not all
  // fit are only read, and handed to that Resolve when no other Resolve ran between.
  void Prefetch(const RoutedBatch& rb);

  // Weights (state < 0) or optimizer state `state` of tiered local shard `local`, all its rows as
  // fp32 in row order (ParamStore::ReadShard's format): cached rows from their slots, the others
  // from the queue, the store or their initial values.
  Status ReadShard(int32_t local, int32_t state, float* out);

  // Replaces the weights (state < 0) or optimizer state `state` of every row of tiered local
  // shard `local` (ReadShard's format; 16-bit weights rounded to nearest even): cached rows in
  // their slots (then dirty), the others through the write-back queue, so no older queued record
  // of theirs overwrites them later.
  Status WriteShard(int32_t local, int32_t state, const float* in);
  // ReadShard and WriteShard of rows [first, first + count) only (shard-local rows, `out` / `in`
  // holding just them): checkpoints stream a tiered shard in bounded chunks through these.
  Status ReadRows(int32_t local, int32_t state, int64_t first, int64_t count, float* out);
  Status WriteRows(int32_t local, int32_t state, int64_t first, int64_t count, const float* in);
  // Makes the store of tiered local shard `local` hold every row's current value (the
  // write-back queue drained, the dirty and the never-stored cached rows written, the rows never
  // written at all written once with their initial values; the cache unchanged), then
  // snapshots it into `dir` (RowStore::Snapshot: hard links of its sealed segments and a
  // manifest; `dir` must not exist). A dynamic shard's rows that matter are its live slots,
  // [0, `keyed_rows`) (ignored for a fixed shard), each written by the forward or load that
  // created it (kInternal if not). `usable` is asked between chunks: its error (an abort) ends
  // the call. The store's errors (kIo naming the table); `dir` then does not exist.
  Status SnapshotShard(int32_t local, const std::string& dir, int64_t keyed_rows,
                       const std::function<Status()>& usable);
  // The plan's rows of tiered local shard `local`.
  int64_t Rows(int32_t local) const { return shards_[shard_of_[local]].spec.rows; }

  // Waits until the write-back queue is empty.
  Status Drain() { return queue_ != nullptr ? queue_->Drain() : Status::Ok(); }

  // This rank's counters of table `table`; false when it has no tiered shard here.
  bool Stats(int32_t table, TierStats* out) const;

  // dynamic_tier.h writes a dynamic shard's created rows and rounding keys into the shards.
  friend class DynamicTier;
  // Whether `table` is tiered (on any rank: the tiers name tables, so every rank that holds a
  // shard of it tiers it only if its own tiers say so).
  bool IsTieredTable(int32_t table) const;

 private:
  // What one read of a shard's rows got (a prefetch's or a forward's own). Its buffers are kept
  // from batch to batch, so a forward allocates nothing in the steady state.
  struct Fetched {
    std::vector<int64_t> rows;  // the rows read, in the order asked
    std::vector<uint8_t> records;
    std::vector<uint8_t> found;  // per row: 1 a record was read, 0 not (never written)
    int64_t queue_reads = 0;     // records found in the write-back queue
    int64_t disk_reads = 0;      // records the store had
    // What the prefetch thread installed: the slots of the rows it took out of `rows` (pinned at
    // pf_epoch_), how many of them it initialised and how many victims it queued.
    std::vector<int32_t> installed_slots;
    int64_t initialised = 0;
    int64_t write_backs = 0;
    // Scratch of Fetch: the rows not in the queue and where they go.
    std::vector<int64_t> from_store;
    std::vector<size_t> index;
    std::vector<uint8_t> got;
    std::unique_ptr<bool[]> got_found;
    size_t got_found_size = 0;
  };
  struct Shard {
    TieredShard spec;
    std::string path;
    std::unique_ptr<store::RowStore> store;
    std::unique_ptr<SlotCache> cache;
    std::vector<int64_t> keys;  // per slot: the global row its rounding bits are keyed by
    size_t record_bytes = 0;
    TierStats stats;
    bool keyed = false;  // a dynamic table's: not prefetched (its ids are not rows yet)
    // Scratch of ResolveShard, kept between batches.
    RowSet seen;  // the batch's misses, each with its index in `misses`
    std::vector<int64_t> misses;
    std::vector<int32_t> slots;
    // The ids of the batch that missed (pointers into its runs) and each one's miss.
    std::vector<int64_t*> miss_ids;
    std::vector<int32_t> id_miss;
    std::vector<int32_t> dirtied;  // the hits' slots this forward marked dirty (undone on error)
    // FillSlots' scratch (the rows never written), used under cache_mu_ by whichever thread
    // fills this shard's slots: the prefetch thread's install or the forward's.
    std::vector<int32_t> init_slots;
    std::vector<int64_t> init_keys;
    // The rows evicted dirty, their records (packed back to back) and the miss that took each
    // one's slot: queued together once the batch has its slots.
    std::vector<int64_t> evicted_rows;
    std::vector<uint8_t> evicted;
    std::vector<size_t> evicted_for;
    Fetched now;
  };
  // Reads `n` rows of `sh` from the queue or the store into `f` (rows, found flags, records,
  // counts): all of them in one batched Get, whose reads the store keeps in flight together.
  // Runs on either thread; touches no counter of `sh`.
  Status Fetch(Shard& sh, const int64_t* rows, size_t n, Fetched* f);
  // ReadRows' and WriteRows' walk (row_access.cc): waits out the prefetch job, holds the cache
  // lock, and calls visit(r, slot, record) for rows [first, first + count) of `sh` in order,
  // fetching the uncached ones a chunk at a time: slot >= 0 for a cached row, else `record` is
  // its stored record, or null for a row never written. Stops at visit's first error.
  Status VisitRows(Shard& sh, int64_t first, int64_t count,
                   const std::function<Status(int64_t, int32_t, const uint8_t*)>& visit);
  // The rows of local shard `local` in `rb` that are not cached, each once, in order of first
  // occurrence, into `out` (using `seen`); the cached ones are pinned at `pin`.
  void Misses(Shard& sh, const RoutedBatch& rb, uint32_t pin, RowSet* seen,
              std::vector<int64_t>* out);
  // Gives rows[i] (none of them cached) slot slots[i], pinned at `pin`, in order: a free slot or
  // the victim of a row pinned before `floor` (before `fallback` when `floor` leaves none). The
  // records of dirty victims are queued for write-back together (`queued` of them were).
  // With `all`, fewer slots than rows is an error; else `installed` says how many got one. On an
  // error the caches are as they were, but for the victims already queued. Slot values are not
  // touched: the caller copies the rows in.
  Status MakeRoom(Shard& sh, const int64_t* rows, size_t n, uint32_t floor, uint32_t fallback,
                  uint32_t pin, bool all, int32_t* slots, size_t* installed, size_t* queued);
  // Fills slots[i] of `sh` with what `f` read for f.rows[i]: its record when one was found, else
  // the in-memory table's initial row. Returns how many were initialised. The caller holds
  // cache_mu_ and has pinned the slots, so no backward writes them meanwhile.
  int64_t FillSlots(Shard& sh, const Fetched& f, const int32_t* slots);
  // The prefetch thread's second half: installs what `f` read in slots of `sh` (the rows never
  // written initialised in theirs), evicting rows pinned before pf_floor_, and empties `f`;
  // installs nothing when they do not all fit or the queueing fails (Resolve meets either).
  void InstallPrefetched(Shard& sh, Fetched* f);
  // The next epoch, renumbering every cache's pins first when the epochs near uint32's end.
  uint32_t NextEpoch();
  Status ResolveShard(size_t j, RoutedBatch& rb, const RoutedBatch* in_flight, bool training,
                      uint32_t epoch, uint32_t floor, const std::vector<Fetched>* prefetched,
                      double* fetch_seconds);
  // Waits for the prefetch job in flight (adding the wait to `waited`), counts its reads, and
  // moves them to `out` when they were read for the caches as they are now (returns true). With
  // `out` null (an accessor's take, which must not leave records a write may make stale) or when
  // they were not, the job's reads are dropped and the rows it installed, which stay cached, go
  // to pf_unclaimed_.
  bool TakePrefetch(double* waited, std::vector<Fetched>* out);
  void RunPrefetches();

  const Layout* layout_ = nullptr;
  ParamStore* params_ = nullptr;
  uint64_t seed_ = 0;
  std::vector<Shard> shards_;
  std::vector<int32_t> shard_of_;  // per local shard: index into shards_, or -1
  std::unique_ptr<WriteBackQueue> queue_;
  // Pins: every Resolve and every prefetch scan takes the next epoch. A Resolve evicts rows
  // pinned before its own epoch (before the scan's when a scan ran since the last Resolve: the
  // rows prefetched for this batch stay); the prefetch thread evicts rows pinned before the last
  // Resolve's (the batch a backward may be training, and the scan's hits and installs, stay).
  uint32_t epoch_ = 0;
  uint32_t resolve_epoch_ = 0;  // the last Resolve's
  uint32_t pf_epoch_ = 0;       // the last scan's
  uint32_t pf_floor_ = 1;       // the last scan's floor for the prefetch thread's victims
  uint64_t generation_ = 0;     // Resolves so far

  // The prefetch: a job (rows per shard, at a generation) and what it read.
  std::mutex pf_mu_;
  std::condition_variable pf_cv_;
  bool pf_stop_ = false;
  bool pf_busy_ = false;  // a job is queued or running
  uint64_t pf_generation_ = 0;
  std::vector<std::vector<int64_t>> pf_rows_;
  std::vector<Fetched> pf_fetched_;
  std::vector<Fetched> pf_spare_;  // the buffers of the job a Resolve took, given back after it
  // Per shard, the (slot, row) pairs a dropped job installed: the next Resolve counts those its
  // batch reads as the prefetched misses they were, not as hits. Under cache_mu_.
  std::vector<std::vector<std::pair<int32_t, int64_t>>> pf_unclaimed_;
  std::vector<RowSet> pf_seen_;
  Status pf_status_;
  bool pf_valid_ = false;  // pf_fetched_ holds a finished job's reads
  std::thread pf_thread_;
  // Guards the caches' maps and the epochs between Resolve, a Prefetch's scan, the prefetch
  // thread's installs and Stats. Never taken before pf_mu_.
  mutable std::mutex cache_mu_;
};

}  // namespace shardrec::embedding::tiered
