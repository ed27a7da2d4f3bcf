// Shrinking a tiered table's local shards to their cache slots (cache_layout.h).
#include "impl/embedding/tiered/cache_layout.h"

#include <algorithm>

#include "impl/core/dtype.h"

namespace shardrec::embedding::tiered {

namespace {

size_t StateFloats(const TableLayout& tl, int64_t cols) {
  size_t n = 0;
  for (const auto& spec : tl.state_specs) n += spec.row_wise ? 1 : static_cast<size_t>(cols);
  return n;
}

// The most non-empty shards of `table` one rank holds.
int64_t MostShardsPerRank(const sharding::Plan& plan, int32_t table) {
  std::vector<int64_t> per_rank(static_cast<size_t>(plan.world_size), 0);
  for (const auto& sh : plan.table_plans[table].shards)
    if (sh.rows > 0 && sh.rank >= 0 && sh.rank < plan.world_size) ++per_rank[sh.rank];
  return std::max<int64_t>(1, *std::max_element(per_rank.begin(), per_rank.end()));
}

}  // namespace

size_t RecordBytes(const Layout& layout, const LocalShard& ls) {
  return static_cast<size_t>(ls.cols) * DTypeSize(ls.dtype) +
         StateFloats(layout.tables[ls.table], ls.cols) * sizeof(float);
}

Status ShrinkToCache(const std::vector<TierConfig>& tiers, bool on_device, Layout* layout,
                     std::vector<TieredShard>* out) {
  out->clear();
  if (tiers.empty()) return Status::Ok();
  if (on_device)
    return Status::Unsupported("table '", tiers[0].table,
                               "' is tiered: GPU collections do not take tiered tables "
                               "(docs/disk-tier.md); create the collection on the host");
  const sharding::Plan& plan = *layout->plan;
  std::vector<int32_t> table_of(tiers.size(), -1);
  for (size_t k = 0; k < tiers.size(); ++k) {
    const TierConfig& tc = tiers[k];
    for (size_t t = 0; t < plan.tables.size(); ++t)
      if (plan.tables[t].name == tc.table) table_of[k] = static_cast<int32_t>(t);
    if (table_of[k] < 0)
      return Status::InvalidArgument("tier ", k, ": no table '", tc.table, "' in the plan");
    if (IsFp8DType(plan.tables[table_of[k]].dtype))
      return Status::Unsupported("table '", tc.table, "' stores ",
                                 DTypeName(plan.tables[table_of[k]].dtype),
                                 " rows: tiered tables do not take FP8 weights yet");
    for (size_t j = 0; j < k; ++j)
      if (table_of[j] == table_of[k])
        return Status::InvalidArgument("tiers ", j, " and ", k, " both name table '", tc.table,
                                       "'");
    const TableLayout& tl = layout->tables[table_of[k]];
    if (tl.data_parallel)
      return Status::Unsupported("table '", tc.table,
                                 "' is data-parallel: every rank holds all of it, so it cannot be "
                                 "tiered (give it another sharding type or keep it in memory)");
    if (tc.dir.empty())
      return Status::InvalidArgument("tier of table '", tc.table, "': dir must not be empty");
    if (tc.cache_bytes <= 0)
      return Status::InvalidArgument("tier of table '", tc.table, "': cache_bytes is ",
                                     tc.cache_bytes, ", must be > 0");
  }
  Layout shrunk = *layout;
  for (size_t k = 0; k < tiers.size(); ++k) {
    const int32_t t = table_of[k];
    const auto& cfg = plan.tables[t];
    LocalShard full_row;
    full_row.table = t;
    full_row.cols = cfg.dim;
    full_row.dtype = cfg.dtype;
    const size_t slot_bytes = RecordBytes(*layout, full_row) + kSlotOverheadBytes;
    const int64_t per_shard =
        tiers[k].cache_bytes / static_cast<int64_t>(slot_bytes) / MostShardsPerRank(plan, t);
    if (per_shard < 1)
      return Status::InvalidArgument(
          "tier of table '", cfg.name, "': cache_bytes ", tiers[k].cache_bytes,
          " holds no row: a cached row costs ", slot_bytes, " bytes (row, optimizer state and ",
          kSlotOverheadBytes, " bytes of metadata) and this rank may hold ",
          MostShardsPerRank(plan, t), " shard(s) of the table");
    for (size_t i = 0; i < shrunk.local.size(); ++i) {
      LocalShard& ls = shrunk.local[i];
      if (ls.table != t) continue;
      TieredShard ts;
      ts.local = static_cast<int32_t>(i);
      ts.rows = ls.rows;
      ts.slots = std::min(per_shard, ls.rows);
      ts.tier = k;
      ls.rows = ts.slots;
      out->push_back(ts);
    }
  }
  LayOutArenas(&shrunk);
  *layout = std::move(shrunk);
  return Status::Ok();
}

}  // namespace shardrec::embedding::tiered
