// The tier's parts of a dynamic forward (dynamic_tier.h).
#include "impl/embedding/tiered/dynamic_tier.h"

#include <algorithm>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "impl/core/check.h"
#include "impl/embedding/tiered/record.h"

namespace shardrec::embedding::tiered {

namespace {

// The rows (ids, slots or cache slots) of a shard's runs, in place.
template <typename F>
void ForEachRow(const ShardRuns& runs, F&& f) {
  for (const kernels::BagRun& run : runs.runs) {
    const int64_t begin = run.offsets != nullptr ? run.offsets[0] : 0;
    const int64_t* rows = run.rows + begin;
    const int64_t n = run.num_ids();
    for (int64_t i = 0; i < n; ++i) f(rows[i]);
  }
}

}  // namespace

DynamicTier::DynamicTier(TieredTables* tiers, dynamic::DynamicTables* dyn)
    : tiers_(*tiers), dyn_(*dyn) {
  for (TieredTables::Shard& sh : tiers_.shards_) {
    const int32_t local = sh.spec.local;
    if (!tiers_.layout_->tables[tiers_.layout_->local[local].table].dynamic) continue;
    dyn_.SetTiered(local);
    sh.keyed = true;
    locals_.push_back(local);
  }
}

Status DynamicTier::CheckFits(const RoutedBatch& rb, const RoutedBatch* in_flight) const {
  for (int32_t local : locals_) {
    if (static_cast<size_t>(local) >= rb.shards.size()) continue;
    const TieredTables::Shard& sh = tiers_.shards_[tiers_.ShardOf(local)];
    std::unordered_set<int64_t> ids, pinned;
    ForEachRow(rb.shards[local], [&](int64_t id) { ids.insert(id); });
    if (in_flight != nullptr && static_cast<size_t>(local) < in_flight->shards.size())
      ForEachRow(in_flight->shards[local], [&](int64_t slot) { pinned.insert(slot); });
    const auto need = static_cast<int64_t>(ids.size() + pinned.size());
    if (need <= sh.cache->slots()) continue;
    const LocalShard& ls = tiers_.layout_->local[local];
    return Status::InvalidArgument(
        "tiered dynamic table '", tiers_.layout_->plan->tables[ls.table].name, "' shard ", ls.shard,
        ": this forward has ", ids.size(), " distinct ids for the shard",
        pinned.empty()
            ? ""
            : StrCat(" and the batch a backward may still train ", pinned.size(), " rows"),
        ", but its cache holds ", sh.cache->slots(),
        " rows (a tiered dynamic table's cache must hold a forward's distinct ids); give the tier "
        "more cache_bytes");
  }
  return Status::Ok();
}

Status DynamicTier::WriteCreated(const RoutedBatch& rb) {
  ParamStore& params = *tiers_.params_;
  const Layout& layout = *tiers_.layout_;
  // The prefetch's scan reads the caches' maps under this lock (it skips keyed shards, but the
  // maps are shared state all the same).
  std::lock_guard<std::mutex> lock(tiers_.cache_mu_);
  for (int32_t local : locals_) {
    if (static_cast<size_t>(local) >= rb.shards.size()) continue;
    TieredTables::Shard& sh = tiers_.shards_[tiers_.ShardOf(local)];
    const LocalShard& ls = layout.local[local];
    const auto& name = layout.plan->tables[ls.table].name;
    const dynamic::DynamicTables::Created* created = dyn_.CreatedRows(local);
    const int64_t zero_row = sh.spec.rows - 1;  // the dynamic shard's slots(), its last row
    bool reads_zero = false;
    ForEachRow(rb.shards[local], [&](int64_t row) { reads_zero = reads_zero || row == zero_row; });
    std::vector<uint8_t> record(sh.record_bytes);
    std::vector<float> values(static_cast<size_t>(ls.cols));
    // The zero row (zeros), or else id `id`'s initial row; either with zero state.
    auto write = [&](int64_t row, bool zero, int64_t id) -> Status {
      const int32_t v = sh.cache->Find(row);
      if (v >= 0) {
        if (zero) {
          params.ClearRow(ls, v);
        } else {
          const int32_t slot = v;
          params.InitRowsForIds(ls, std::span<const int32_t>(&slot, 1),
                                std::span<const int64_t>(&id, 1), tiers_.seed_);
          sh.cache->set_dirty(v, true);
        }
        return Status::Ok();
      }
      // The record: the weights (InitialValues rounds them as the arena stores them), then
      // zero state.
      std::fill(record.begin(), record.end(), 0);
      if (!zero) {
        params.InitialValues(ls, static_cast<uint64_t>(id), tiers_.seed_, values.data());
        FloatsToRecord(layout, ls, values.data(), -1, record.data());
      }
      const Status s = tiers_.queue_->Push(sh.store.get(), row, record.data());
      if (!s.ok()) return Status(s.code(), StrCat("tiered table '", name, "': ", s.message()));
      return Status::Ok();
    };
    if (created != nullptr)
      for (size_t i = 0; i < created->slots.size(); ++i)
        SR_RETURN_IF_ERROR(write(created->slots[i], false, created->ids[i]));
    if (reads_zero) SR_RETURN_IF_ERROR(write(zero_row, true, 0));
  }
  return Status::Ok();
}

void DynamicTier::KeyRounding(const RoutedBatch& rb) {
  for (int32_t local : locals_) {
    if (static_cast<size_t>(local) >= rb.shards.size()) continue;
    TieredTables::Shard& sh = tiers_.shards_[tiers_.ShardOf(local)];
    const dynamic::DynamicShard& d = *dyn_.Shard(local);
    const int64_t row_offset = tiers_.layout_->local[local].row_offset;
    ForEachRow(rb.shards[local], [&](int64_t slot) {
      if (slot < 0 || slot >= sh.cache->slots()) return;
      const int64_t row = sh.cache->row_of(static_cast<int32_t>(slot));
      sh.keys[static_cast<size_t>(slot)] =
          row >= 0 && row < d.size() ? d.id(row) : row_offset + row;
    });
  }
}

}  // namespace shardrec::embedding::tiered
