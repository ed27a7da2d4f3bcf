// A collection's tiered tables on one rank (tables.h).
#include "impl/embedding/tiered/tables.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <utility>

#include "impl/embedding/tiered/record.h"
#include "impl/store/log_store.h"

namespace shardrec::embedding::tiered {

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// A table name as one path component.
std::string PathSafe(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

// The rows of a shard's runs, in place (the ids a resolver rewrites).
template <typename F>
void ForEachRow(const ShardRuns& runs, F&& f) {
  for (const kernels::BagRun& run : runs.runs) {
    const int64_t begin = run.offsets != nullptr ? run.offsets[0] : 0;
    auto* rows = const_cast<int64_t*>(run.rows) + begin;
    const int64_t n = run.num_ids();
    for (int64_t i = 0; i < n; ++i) f(rows[i]);
  }
}

// ForEachRow of a cache's lookups: before f(row) it hints the cache to load the row-to-slot map
// entry of the row 16 ids later in the run and the slot of the row 8 later (whose map entry is
// loaded by then), so that a batch's lookups, each a few dependent cache misses, overlap.
template <typename F>
void ForEachRowHinted(const ShardRuns& runs, const SlotCache& cache, F&& f) {
  constexpr int64_t kFar = 16, kNear = 8;
  for (const kernels::BagRun& run : runs.runs) {
    const int64_t begin = run.offsets != nullptr ? run.offsets[0] : 0;
    auto* rows = const_cast<int64_t*>(run.rows) + begin;
    const int64_t n = run.num_ids();
    for (int64_t i = 0; i < n; ++i) {
      if (i + kFar < n) cache.Prefetch(rows[i + kFar]);
      if (i + kNear < n) cache.PrefetchSlot(rows[i + kNear]);
      f(rows[i]);
    }
  }
}

// Opens a tier's store. SHARDREC_TIER_TEST_SEGMENT_KIB (a test switch, like the benchmarks'
// SHARDREC_TIER_DIRECT_IO_BENCH) seals segments at that many KiB, compacts those a quarter dead
// and looks for that work every few milliseconds, so that a short C API run compacts
// (capi_tiered_kill_test kills a process during it); unset, the store's own tuning.
Status OpenTierStore(store::StoreOptions so, std::unique_ptr<store::RowStore>* out) {
  const char* env = std::getenv("SHARDREC_TIER_TEST_SEGMENT_KIB");
  const long kib = env != nullptr ? std::strtol(env, nullptr, 10) : 0;
  if (kib <= 0) return store::OpenRowStore(so, out);
  so.compact_dead_ratio = 0.25;
  store::LogTuning t;
  t.segment_bytes = static_cast<uint64_t>(kib) << 10;
  t.write_chunk = std::min<size_t>(t.write_chunk, size_t{16} << 10);
  t.compact_interval_ms = 2;
  std::unique_ptr<store::LogStore> s;
  SR_RETURN_IF_ERROR(store::OpenLogStore(so, t, &s));
  *out = std::move(s);
  return Status::Ok();
}

}  // namespace

TieredTables::~TieredTables() {
  if (pf_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(pf_mu_);
      pf_stop_ = true;
    }
    pf_cv_.notify_all();
    pf_thread_.join();
  }
  queue_.reset();  // stops the writer before the stores close
}

Status TieredTables::Open(const Layout* layout, ParamStore* params, std::vector<TieredShard> shards,
                          const std::vector<TierConfig>& tiers, uint64_t seed,
                          const StoreOpener& opener) {
  layout_ = layout;
  params_ = params;
  seed_ = seed;
  shard_of_.assign(layout->local.size(), -1);
  if (shards.empty()) return Status::Ok();
  // Every store of this run gets an identity no earlier run had, so whatever a directory holds
  // from before is rebuilt (emptied), never read: the stores are scratch.
  std::random_device rd;
  const uint64_t nonce =
      (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  size_t total_slots = 0;
  for (const TieredShard& ts : shards) {
    const LocalShard& ls = layout->local[ts.local];
    const auto& cfg = layout->plan->tables[ls.table];
    const TierConfig& tier = tiers[ts.tier];
    Shard sh;
    sh.spec = ts;
    sh.record_bytes = RecordBytes(*layout, ls);
    std::error_code ec;
    std::filesystem::create_directories(tier.dir, ec);
    if (ec)
      return Status::Io("tiered table '", cfg.name, "': cannot create directory '", tier.dir,
                        "': ", ec.message());
    sh.path = (std::filesystem::path(tier.dir) /
               (PathSafe(cfg.name) + ".shard" + std::to_string(ls.shard)))
                  .string();
    store::StoreOptions so;
    so.dir = sh.path;
    so.identity = StrCat("shardrec tiered table '", cfg.name, "' shard ", ls.shard, " rows ",
                         ts.rows, " cols ", ls.cols, " record ", sh.record_bytes, " run ", nonce);
    so.value_bytes = sh.record_bytes;
    so.rebuild = true;
    // A forward's misses go out in one Get; 64 reads in flight measured ~15 % more random 4 KiB
    // reads per second than 32 on the virtio disk this was tuned on (docs/disk-tier.md).
    so.queue_depth = 64;
    // Buffered reads (the page cache), no readahead: the write-back's writes go through the page
    // cache anyway, so a row missed soon after it was written back is a page the kernel still
    // holds, where an O_DIRECT read would first wait for that page's writeback (measured in
    // docs/disk-tier.md, Performance). The page cache is the kernel's reclaimable memory, not
    // this process's resident memory. The variable is the benchmarks' switch to compare the two.
    so.direct_io = std::getenv("SHARDREC_TIER_DIRECT_IO_BENCH") != nullptr;
    const Status s = opener ? opener(so, &sh.store) : OpenTierStore(so, &sh.store);
    if (!s.ok()) return Status(s.code(), StrCat("tiered table '", cfg.name, "': ", s.message()));
    sh.cache = std::make_unique<SlotCache>(ts.slots);
    sh.keys.resize(static_cast<size_t>(ts.slots));
    for (int64_t k = 0; k < ts.slots; ++k) sh.keys[k] = ls.row_offset + k;
    params->SetRowKeys(ts.local, sh.keys.data(), ts.slots);
    sh.stats.cache_slots = ts.slots;
    sh.stats.cache_bytes = ts.slots * static_cast<int64_t>(sh.record_bytes + kSlotOverheadBytes);
    total_slots += static_cast<size_t>(ts.slots);
    shard_of_[ts.local] = static_cast<int32_t>(shards_.size());
    shards_.push_back(std::move(sh));
  }
  // Room for a cache's worth of evictions in flight: a step evicts at most what its cache holds.
  queue_ = std::make_unique<WriteBackQueue>(total_slots);
  pf_rows_.resize(shards_.size());
  pf_fetched_.resize(shards_.size());
  pf_spare_.resize(shards_.size());
  pf_unclaimed_.resize(shards_.size());
  pf_seen_.resize(shards_.size());
  pf_thread_ = std::thread([this] { RunPrefetches(); });
  return Status::Ok();
}

int32_t TieredTables::ShardOf(int32_t local) const {
  return local >= 0 && static_cast<size_t>(local) < shard_of_.size() ? shard_of_[local] : -1;
}

bool TieredTables::IsTieredTable(int32_t table) const {
  for (const Shard& sh : shards_)
    if (layout_->local[sh.spec.local].table == table) return true;
  return false;
}

Status TieredTables::Fetch(Shard& sh, const int64_t* rows, size_t n, Fetched* f) {
  const size_t rb = sh.record_bytes;
  f->rows.assign(rows, rows + n);
  f->records.resize(n * rb);
  f->found.resize(n);
  f->queue_reads = f->disk_reads = 0;
  f->installed_slots.clear();
  f->initialised = f->write_backs = 0;
  if (n == 0) return Status::Ok();
  f->queue_reads = static_cast<int64_t>(
      queue_->FindMany(sh.store.get(), rows, n, f->records.data(), f->found.data()));
  if (f->got_found_size < n) {
    f->got_found.reset(new bool[n]);
    f->got_found_size = n;
  }
  bool* got_found = f->got_found.get();
  if (f->queue_reads == 0) {
    // The common case: every row from the store, straight into the records.
    SR_RETURN_IF_ERROR(sh.store->Get(rows, n, f->records.data(), got_found));
    // Through locals: byte stores through f->found may alias f's fields, which the loop would
    // otherwise load and store again each iteration.
    uint8_t* found = f->found.data();
    int64_t reads = 0;
    for (size_t i = 0; i < n; ++i) {
      found[i] = got_found[i] ? 1 : 0;
      reads += got_found[i] ? 1 : 0;
    }
    f->disk_reads = reads;
    return Status::Ok();
  }
  f->from_store.clear();
  f->index.clear();
  for (size_t i = 0; i < n; ++i) {
    if (f->found[i]) continue;
    f->from_store.push_back(rows[i]);
    f->index.push_back(i);
  }
  if (f->from_store.empty()) return Status::Ok();
  const size_t m = f->from_store.size();
  f->got.resize(m * rb);
  SR_RETURN_IF_ERROR(sh.store->Get(f->from_store.data(), m, f->got.data(), got_found));
  for (size_t j = 0; j < m; ++j) {
    if (!got_found[j]) continue;
    std::memcpy(f->records.data() + f->index[j] * rb, f->got.data() + j * rb, rb);
    f->found[f->index[j]] = 1;
    ++f->disk_reads;
  }
  return Status::Ok();
}

void TieredTables::Misses(Shard& sh, const RoutedBatch& rb, uint32_t pin, RowSet* seen,
                          std::vector<int64_t>* out) {
  out->clear();
  const ShardRuns& runs = rb.shards[sh.spec.local];
  size_t ids = 0;
  for (const kernels::BagRun& run : runs.runs) ids += static_cast<size_t>(run.num_ids());
  seen->Reset(ids);
  SlotCache& cache = *sh.cache;
  ForEachRowHinted(runs, cache, [&](int64_t row) {
    if (row < 0 || row >= sh.spec.rows) return;
    const int32_t slot = cache.Find(row);
    if (slot >= 0) {
      // The prefetch thread's installs must not evict a row this batch will hit.
      cache.Pin(slot, pin);
      return;
    }
    if (seen->Insert(row)) out->push_back(row);
  });
}

uint32_t TieredTables::NextEpoch() {
  // Far from uint32's end the pins are renumbered from the oldest epoch a floor can still name
  // (the last Resolve's), so no pin that matters reads as older than it is after a wrap.
  constexpr uint32_t kRebaseAt = 0xF0000000u;
  if (epoch_ >= kRebaseAt) {
    const uint32_t from = resolve_epoch_ != 0 ? resolve_epoch_ : epoch_;
    for (Shard& sh : shards_) sh.cache->Rebase(from);
    auto moved = [from](uint32_t e) { return e >= from ? e - from + 1 : 0u; };
    epoch_ = moved(epoch_);
    resolve_epoch_ = moved(resolve_epoch_);
    pf_epoch_ = moved(pf_epoch_);
    pf_floor_ = std::max<uint32_t>(moved(pf_floor_), 1);
  }
  return ++epoch_;
}

void TieredTables::Prefetch(const RoutedBatch& rb) {
  if (shards_.empty()) return;
  std::unique_lock<std::mutex> lock(pf_mu_);
  pf_cv_.wait(lock, [&] { return !pf_busy_; });
  {
    // The misses as of now: the caches change only in Resolve, which waits for this job.
    std::lock_guard<std::mutex> cache_lock(cache_mu_);
    pf_epoch_ = NextEpoch();
    // The prefetch thread keeps the rows of the last Resolve's batch (a backward may be training
    // them now) and this scan's.
    pf_floor_ = std::max<uint32_t>(resolve_epoch_, 1);
    for (size_t j = 0; j < shards_.size(); ++j) {
      Shard& sh = shards_[j];
      std::vector<int64_t>& rows = pf_rows_[j];
      rows.clear();
      if (sh.keyed || static_cast<size_t>(sh.spec.local) >= rb.shards.size()) continue;
      Misses(sh, rb, pf_epoch_, &pf_seen_[j], &rows);
    }
    pf_generation_ = generation_;
  }
  pf_valid_ = false;
  pf_busy_ = true;
  lock.unlock();
  pf_cv_.notify_all();
}

void TieredTables::RunPrefetches() {
  std::unique_lock<std::mutex> lock(pf_mu_);
  for (;;) {
    pf_cv_.wait(lock, [&] { return pf_stop_ || (pf_busy_ && !pf_valid_); });
    if (pf_stop_) return;
    lock.unlock();
    Status s;
    for (size_t j = 0; j < shards_.size() && s.ok(); ++j) {
      s = Fetch(shards_[j], pf_rows_[j].data(), pf_rows_[j].size(), &pf_fetched_[j]);
      if (!s.ok()) break;
      InstallPrefetched(shards_[j], &pf_fetched_[j]);
    }
    lock.lock();
    pf_status_ = s;
    pf_valid_ = true;
    pf_busy_ = false;
    pf_cv_.notify_all();
  }
}

bool TieredTables::TakePrefetch(double* waited, std::vector<Fetched>* out) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(pf_mu_);
  pf_cv_.wait(lock, [&] { return !pf_busy_; });
  *waited += Seconds(t0);
  if (!pf_valid_) return false;
  pf_valid_ = false;
  for (size_t j = 0; j < shards_.size(); ++j) {
    // What the job did counts whether or not a forward uses it: its rows are cached either way.
    shards_[j].stats.queue_reads += pf_fetched_[j].queue_reads;
    shards_[j].stats.disk_reads += pf_fetched_[j].disk_reads;
    shards_[j].stats.initialised += pf_fetched_[j].initialised;
    shards_[j].stats.write_backs += pf_fetched_[j].write_backs;
  }
  // generation_ changes only in Resolve, on this thread.
  if (out == nullptr || !pf_status_.ok() || pf_generation_ != generation_) {
    // pf_mu_ before cache_mu_, the prefetch thread's order.
    std::lock_guard<std::mutex> cache_lock(cache_mu_);
    for (size_t j = 0; j < shards_.size(); ++j) {
      for (int32_t v : pf_fetched_[j].installed_slots)
        pf_unclaimed_[j].emplace_back(v, shards_[j].cache->row_of(v));
      pf_fetched_[j].installed_slots.clear();
    }
    return false;
  }
  out->swap(pf_fetched_);
  pf_fetched_.swap(pf_spare_);
  pf_fetched_.resize(shards_.size());
  return true;
}

Status TieredTables::Resolve(RoutedBatch& rb, const RoutedBatch* in_flight, bool training) {
  if (shards_.empty()) return Status::Ok();
  double exposed = 0;
  std::vector<Fetched> fetched;
  const bool prefetched = TakePrefetch(&exposed, &fetched);
  Status s;
  {
    std::lock_guard<std::mutex> cache_lock(cache_mu_);
    const uint32_t epoch = NextEpoch();
    // A scan since the last Resolve was this batch's (a forward waits for its input
    // distribution, which scans): the rows it pinned and its job installed are not evicted. The
    // floor depends on the calls only, not on timing, so column shards keep the same slots.
    const uint32_t floor = pf_epoch_ > resolve_epoch_ ? pf_epoch_ : epoch;
    resolve_epoch_ = epoch;
    for (size_t j = 0; j < shards_.size() && s.ok(); ++j)
      s = ResolveShard(j, rb, in_flight, training, epoch, floor, prefetched ? &fetched : nullptr,
                       &exposed);
    // A dropped job's rows were this batch's or no batch's.
    for (auto& unclaimed : pf_unclaimed_) unclaimed.clear();
    ++generation_;
  }
  if (prefetched) {
    // The buffers go back for the next job (the prefetch thread never touches pf_spare_).
    // cache_mu_ is released first: Prefetch takes pf_mu_ then cache_mu_, never the reverse.
    std::lock_guard<std::mutex> lock(pf_mu_);
    pf_spare_.swap(fetched);
  }
  // A forward that failed resolved nothing: it is not a step of the statistics.
  if (s.ok()) {
    for (Shard& sh : shards_) {
      ++sh.stats.steps;
      sh.stats.exposed_fetch_seconds += exposed;
      sh.stats.last_exposed_fetch_seconds = exposed;
    }
  }
  return s;
}

Status TieredTables::MakeRoom(Shard& sh, const int64_t* rows, size_t n, uint32_t floor,
                              uint32_t fallback, uint32_t pin, bool all, int32_t* slots,
                              size_t* installed, size_t* queued) {
  const LocalShard& ls = layout_->local[sh.spec.local];
  SlotCache& cache = *sh.cache;
  // The record of a row a backward may have changed since it was read is packed now and queued
  // for write-back with the others below (the queue's lock and a wake of the writer once per 256
  // records, not per row); the slots' values stay as they are until the caller copies the new
  // rows in, so a failed queueing can put those rows back.
  const size_t rbytes = sh.record_bytes;
  sh.evicted_rows.clear();
  sh.evicted_for.clear();
  size_t k = 0;
  for (; k < n; ++k) {
    int32_t v = cache.Victim(floor);
    if (v < 0 && fallback != floor) {
      floor = fallback;
      v = cache.Victim(floor);
    }
    if (v < 0) break;
    const int64_t old = cache.row_of(v);
    if (old >= 0) {
      if (cache.dirty(v)) {
        const size_t e = sh.evicted_rows.size();
        // Grown record by record (amortised by the vector), so it holds only what was evicted.
        if (sh.evicted.size() < (e + 1) * rbytes) sh.evicted.resize((e + 1) * rbytes);
        PackSlot(*params_, *layout_, ls, v, sh.evicted.data() + e * rbytes);
        sh.evicted_rows.push_back(old);
        sh.evicted_for.push_back(k);
      }
      cache.Remove(v);
    }
    cache.Install(v, rows[k]);
    cache.Pin(v, pin);
    slots[k] = v;
    sh.keys[v] = ls.row_offset + rows[k];
  }
  *installed = k;
  *queued = 0;
  Status room = all && k < n ? Status::Internal("no cache slot to evict") : Status::Ok();
  if (room.ok() && !sh.evicted_rows.empty())
    room = queue_->PushMany(sh.store.get(), sh.evicted_rows.data(), sh.evicted.data(),
                            sh.evicted_rows.size(), queued);
  if (room.ok()) return room;
  // Undone newest first, so each slot is the free list's last when it is filled again: the
  // new rows leave, and a dirty row whose record was not queued returns to its slot as it was.
  size_t e = sh.evicted_rows.size();
  for (size_t i = k; i-- > 0;) {
    cache.Remove(slots[i]);
    if (e > 0 && sh.evicted_for[e - 1] == i) {
      --e;
      if (e < *queued) continue;
      cache.Install(slots[i], sh.evicted_rows[e]);
      cache.set_dirty(slots[i], true);
      sh.keys[slots[i]] = ls.row_offset + sh.evicted_rows[e];
    }
  }
  *installed = 0;
  return room;
}

int64_t TieredTables::FillSlots(Shard& sh, const Fetched& f, const int32_t* slots) {
  const LocalShard& ls = layout_->local[sh.spec.local];
  const size_t rb = sh.record_bytes;
  sh.init_slots.clear();
  sh.init_keys.clear();
  for (size_t i = 0; i < f.rows.size(); ++i) {
    if (f.found[i] != 0) {
      UnpackSlot(*params_, *layout_, ls, slots[i], f.records.data() + i * rb);
    } else {
      sh.init_slots.push_back(slots[i]);
      sh.init_keys.push_back(ls.row_offset + f.rows[i]);
    }
  }
  // A row never written reads as the in-memory table's initial row: the same counter RNG,
  // keyed by the global row, and zero optimizer state (all drawn in one call).
  if (!sh.init_slots.empty()) params_->InitRowsForIds(ls, sh.init_slots, sh.init_keys, seed_);
  return static_cast<int64_t>(sh.init_slots.size());
}

void TieredTables::InstallPrefetched(Shard& sh, Fetched* f) {
  const size_t n = f->rows.size();
  if (n == 0) return;
  std::lock_guard<std::mutex> cache_lock(cache_mu_);
  f->installed_slots.resize(n);
  size_t installed = 0, queued = 0;
  // All or nothing: a batch whose misses do not all fit beside the rows kept is left to its
  // forward, which refuses it before anything is evicted when the cache cannot hold it.
  const Status room = MakeRoom(sh, f->rows.data(), n, pf_floor_, pf_floor_, pf_epoch_, true,
                               f->installed_slots.data(), &installed, &queued);
  f->write_backs = static_cast<int64_t>(queued);
  if (!room.ok()) {
    f->installed_slots.clear();
    return;
  }
  // These slots hold no row of the batch a backward may be training (pinned at pf_floor_ or
  // later): writing them races with nothing.
  f->initialised = FillSlots(sh, *f, f->installed_slots.data());
  // The records are kept at their size: the next Fetch overwrites what it reads, where a
  // resize from empty would first zero them all.
  f->rows.clear();
  f->found.clear();
}

Status TieredTables::ResolveShard(size_t j, RoutedBatch& rb, const RoutedBatch* in_flight,
                                  bool training, uint32_t epoch, uint32_t floor,
                                  const std::vector<Fetched>* prefetched, double* fetch_seconds) {
  Shard& sh = shards_[j];
  const int32_t local = sh.spec.local;
  const LocalShard& ls = layout_->local[local];
  const auto& name = layout_->plan->tables[ls.table].name;
  if (static_cast<size_t>(local) >= rb.shards.size()) return Status::Ok();
  SlotCache& cache = *sh.cache;
  int64_t pinned = 0;
  // The batch a backward may still train keeps its slots (its rows are slots already).
  if (in_flight != nullptr && static_cast<size_t>(local) < in_flight->shards.size()) {
    ForEachRow(in_flight->shards[local], [&](int64_t slot) {
      if (slot < 0 || slot >= cache.slots()) return;
      const auto sl = static_cast<int32_t>(slot);
      if (!cache.Pinned(sl, epoch)) {
        cache.Pin(sl, epoch);
        ++pinned;
      }
    });
  }
  std::vector<int64_t>& misses = sh.misses;
  misses.clear();
  size_t ids = 0;
  for (const kernels::BagRun& run : rb.shards[local].runs)
    ids += static_cast<size_t>(run.num_ids());
  sh.seen.Reset(ids);
  // One pass over the ids: a hit's id becomes its slot here (and dirty for a training batch); a
  // miss's id is kept, with its miss, until the misses have slots. A resolve that fails leaves
  // the batch part rewritten (the collection drops a batch whose forward failed) and clears the
  // dirty marks it set, so the write-backs are those of a run without that forward.
  std::vector<int64_t*>& miss_ids = sh.miss_ids;
  std::vector<int32_t>& id_miss = sh.id_miss;
  std::vector<int32_t>& dirtied = sh.dirtied;
  miss_ids.clear();
  id_miss.clear();
  dirtied.clear();
  auto failed = [&](Status s) {
    for (int32_t v : dirtied) cache.set_dirty(v, false);
    return s;
  };
  Status bad;
  int64_t hits = 0;  // counted once the batch is known to fit (a refused batch counts nothing)
  ForEachRowHinted(rb.shards[local], cache, [&](int64_t& row) {
    if (row < 0 || row >= sh.spec.rows) {
      if (bad.ok())
        bad = Status::Internal("tiered table '", name, "': row ", row, " outside its shard of ",
                               sh.spec.rows, " rows");
      return;
    }
    const int32_t slot = cache.Find(row);
    if (slot >= 0) {
      if (!cache.Pinned(slot, epoch)) {
        cache.Pin(slot, epoch);
        cache.Touch(slot);
        ++pinned;
        ++hits;
      }
      if (training && !cache.dirty(slot)) {
        cache.set_dirty(slot, true);
        dirtied.push_back(slot);
      }
      row = slot;
      return;
    }
    const auto next = static_cast<int32_t>(misses.size());
    const int32_t miss = sh.seen.InsertOrFind(row, next);
    if (miss < 0) misses.push_back(row);
    miss_ids.push_back(&row);
    id_miss.push_back(miss < 0 ? next : miss);
  });
  if (!bad.ok()) return failed(bad);
  if (pinned + static_cast<int64_t>(misses.size()) > cache.slots())
    return failed(Status::InvalidArgument(
        "tiered table '", name, "' shard ", ls.shard, ": this forward needs ",
        pinned + static_cast<int64_t>(misses.size()), " distinct rows resident",
        in_flight != nullptr ? " (with those of the batch a backward may still train)" : "",
        " but its cache holds ", cache.slots(), " rows; give the tier more cache_bytes"));
  // The rows the prefetch thread installed for this batch were its misses, not hits, whether
  // this forward took the job or an accessor dropped it (its rows stayed cached).
  int64_t ahead = 0;
  if (prefetched != nullptr)
    for (int32_t v : (*prefetched)[j].installed_slots) ahead += cache.Pinned(v, epoch) ? 1 : 0;
  for (const auto& [v, row] : pf_unclaimed_[j])
    ahead += cache.row_of(v) == row && cache.Pinned(v, epoch) ? 1 : 0;
  hits -= ahead;
  sh.stats.misses += ahead;
  sh.stats.prefetched += ahead;
  sh.stats.hits += hits;
  sh.stats.misses += static_cast<int64_t>(misses.size());
  // Room first: each miss takes a free slot or evicts a row pinned before `floor`.
  std::vector<int32_t>& slots = sh.slots;
  slots.assign(misses.size(), -1);
  size_t installed = 0, queued = 0;
  const Status room = MakeRoom(sh, misses.data(), misses.size(), floor, epoch, epoch, true,
                               slots.data(), &installed, &queued);
  sh.stats.write_backs += static_cast<int64_t>(queued);
  if (!room.ok())
    return failed(Status(room.code(), StrCat("tiered table '", name, "': ", room.message())));
  // Then the misses' records: this batch's prefetch when it read exactly them (it did when no
  // other Resolve ran since: the same batch against the same caches), else read now.
  const Fetched* f = nullptr;
  if (prefetched != nullptr && (*prefetched)[j].rows == misses) {
    f = &(*prefetched)[j];
    sh.stats.prefetched += static_cast<int64_t>(misses.size());
  } else if (!misses.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = Fetch(sh, misses.data(), misses.size(), &sh.now);
    *fetch_seconds += Seconds(t0);
    sh.stats.queue_reads += sh.now.queue_reads;
    sh.stats.disk_reads += sh.now.disk_reads;
    if (!s.ok()) {
      for (int32_t v : slots) cache.Remove(v);
      return failed(Status(s.code(), StrCat("tiered table '", name, "': ", s.message())));
    }
    f = &sh.now;
  }
  if (f != nullptr) sh.stats.initialised += FillSlots(sh, *f, slots.data());
  // Every row resident and pinned: the misses' ids become slots too.
  for (size_t k = 0; k < miss_ids.size(); ++k) {
    const int32_t slot = slots[static_cast<size_t>(id_miss[k])];
    if (training) cache.set_dirty(slot, true);
    *miss_ids[k] = slot;
  }
  return Status::Ok();
}

bool TieredTables::Stats(int32_t table, TierStats* out) const {
  // The prefetch thread installs rows (the caches' resident counts) while a step may ask.
  std::lock_guard<std::mutex> cache_lock(cache_mu_);
  *out = TierStats{};
  bool any = false;
  for (const Shard& sh : shards_) {
    if (layout_->local[sh.spec.local].table != table) continue;
    any = true;
    const TierStats& s = sh.stats;
    out->cache_bytes += s.cache_bytes;
    out->cache_slots += s.cache_slots;
    out->cache_rows += sh.cache->resident();
    out->hits += s.hits;
    out->misses += s.misses;
    out->disk_reads += s.disk_reads;
    out->queue_reads += s.queue_reads;
    out->initialised += s.initialised;
    out->prefetched += s.prefetched;
    out->write_backs += s.write_backs;
    const store::StoreStats st = sh.store->stats();
    out->disk_read_bytes += st.read_bytes;
    out->disk_bytes += st.disk_bytes;
    out->steps = s.steps;
    out->exposed_fetch_seconds = s.exposed_fetch_seconds;
    out->last_exposed_fetch_seconds = s.last_exposed_fetch_seconds;
  }
  if (any && queue_ != nullptr) {
    out->written = queue_->written();
    out->queue_depth = static_cast<int64_t>(queue_->depth());
    out->queue_max_depth = static_cast<int64_t>(queue_->max_depth());
  }
  return any;
}

}  // namespace shardrec::embedding::tiered
