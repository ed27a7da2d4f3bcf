// A tiered shard's store made whole and snapshotted for a checkpoint (tables.h,
// SnapshotShard; docs/disk-tier.md, Checkpoints). The snapshot must hold every row as the table
// has it, so that a reader of the snapshot alone (a load into any collection, serving) gets the
// bits ReadRows would give: queued records reach the store first (the queue is drained), then
// the cached rows the store lacks or holds an older value of. Rows never written are written
// once with their initial values rather than described as "initial": a reader would otherwise
// need this table's initialiser, seed and row keys, in this library version, to rebuild them,
// and a served checkpoint has no collection at all. Each such row is written by the first
// snapshot only (a fixed store never drops a key), so later saves write only what changed.
// Cached dirty rows stay dirty: a backward of the batch just resolved may still change them.
// A dynamic shard's store is keyed by slot, and its live rows are slots [0, size): those alone
// are made whole (the checkpoint's "ids" record says whose each is; the slots beyond hold rows of
// evicted or replaced ids, which no reader asks for). Each was written when its id got the slot
// (DynamicTier::WriteCreated, or a load), so none is left to initialise here.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "impl/core/check.h"
#include "impl/embedding/tiered/record.h"
#include "impl/embedding/tiered/tables.h"

namespace shardrec::embedding::tiered {

namespace {

// Rows asked of the store's index, and records put, at once.
constexpr int64_t kSnapshotChunk = 4096;

}  // namespace

Status TieredTables::SnapshotShard(int32_t local, const std::string& dir, int64_t keyed_rows,
                                   const std::function<Status()>& usable) {
  const int32_t j = ShardOf(local);
  if (j < 0) return Status::Internal("local shard ", local, " is not tiered");
  Shard& sh = shards_[j];
  const LocalShard& ls = layout_->local[local];
  const auto& name = layout_->plan->tables[ls.table].name;
  // The zero row (the last) is no slot.
  if (sh.keyed && (keyed_rows < 0 || keyed_rows >= sh.spec.rows))
    return Status::Internal("tiered table '", name, "': ", keyed_rows, " live rows of ",
                            sh.spec.rows - 1, " slots");
  const int64_t rows_end = sh.keyed ? keyed_rows : sh.spec.rows;
  const auto named = [&name](const Status& s) {
    return s.ok() ? s : Status(s.code(), StrCat("tiered table '", name, "': ", s.message()));
  };
  // A prefetch read before these writes would hand the next forward stale records: drop it, as
  // the accessors do.
  double waited = 0;
  TakePrefetch(&waited, nullptr);
  std::lock_guard<std::mutex> cache_lock(cache_mu_);
  // After the drain no older queued record of a row can land on what is written here.
  SR_RETURN_IF_ERROR(named(queue_->Drain()));
  const size_t rb = sh.record_bytes;
  std::vector<int64_t> rows, keys;
  std::unique_ptr<bool[]> stored(new bool[kSnapshotChunk]);
  std::vector<uint8_t> records;
  std::vector<float> init(static_cast<size_t>(ls.cols));
  for (int64_t r0 = 0; r0 < rows_end; r0 += kSnapshotChunk) {
    // A first snapshot writes every row of the shard: gigabytes, which an abort must not wait for.
    SR_RETURN_IF_ERROR(usable());
    const int64_t r1 = std::min(rows_end, r0 + kSnapshotChunk);
    rows.clear();
    for (int64_t r = r0; r < r1; ++r) rows.push_back(r);
    SR_RETURN_IF_ERROR(named(sh.store->Contains(rows.data(), rows.size(), stored.get())));
    keys.clear();
    records.clear();
    for (size_t i = 0; i < rows.size(); ++i) {
      const int32_t slot = sh.cache->Find(rows[i]);
      if (slot >= 0 ? !sh.cache->dirty(slot) && stored[i] : stored[i]) continue;
      keys.push_back(rows[i]);
      records.resize(keys.size() * rb);
      uint8_t* rec = records.data() + (keys.size() - 1) * rb;
      if (slot >= 0) {
        PackSlot(*params_, *layout_, ls, slot, rec);
        continue;
      }
      if (sh.keyed)
        return Status::Internal("tiered table '", name, "': live slot ", rows[i],
                                " is neither cached nor stored");
      // Never written: its initial weights (the draw a miss initialises in its slot) and zero
      // state.
      std::memset(rec, 0, rb);
      params_->InitialValues(ls, static_cast<uint64_t>(ls.row_offset + rows[i]), seed_,
                             init.data());
      FloatsToRecord(*layout_, ls, init.data(), -1, rec);
    }
    if (!keys.empty())
      SR_RETURN_IF_ERROR(named(sh.store->Put(keys.data(), records.data(), keys.size())));
  }
  SR_RETURN_IF_ERROR(usable());
  return named(sh.store->Snapshot(dir));
}

}  // namespace shardrec::embedding::tiered
