// The dynamic tables of a collection (tables.h).
#include "impl/embedding/dynamic/tables.h"

#include "impl/core/host_memory.h"

namespace shardrec::embedding::dynamic {

namespace {

int64_t SlotsOf(const Layout& layout, const LocalShard& ls) {
  return layout.plan->table_plans[ls.table].shards[ls.shard].rows;
}

}  // namespace

Status DynamicTables::Init(const Layout& layout) {
  layout_ = &layout;
  shards_.clear();
  dp_ = DataParallel{};
  // The plan's rows of a dynamic shard are its slots (the layout adds the zero row; a tiered
  // shard's layout rows are its cache's).
  uint64_t bytes = 0;
  for (const LocalShard& ls : layout.local) {
    if (layout.tables[ls.table].dynamic)
      bytes += DynamicShard::MetadataBytesAtReset(layout.plan->tables[ls.table].dynamic,
                                                  SlotsOf(layout, ls));
  }
  // Held until Build has written the shards (their pages then show in MemAvailable).
  if (Status s = claim_.Claim(bytes,
                              "this rank's dynamic tables' metadata (index, per-slot "
                              "records and admission counts)");
      !s.ok())
    return Status(s.code(), StrCat(s.message(),
                                   "; lower the tables' capacity or use more ranks "
                                   "or hosts"));
  return Status::Ok();
}

void DynamicTables::Build() {
  const Layout& layout = *layout_;
  for (size_t i = 0; i < layout.local.size(); ++i) {
    const LocalShard& ls = layout.local[i];
    if (!layout.tables[ls.table].dynamic) continue;
    Entry e;
    e.local = static_cast<int32_t>(i);
    e.shard.Reset(layout.plan->tables[ls.table].dynamic, SlotsOf(layout, ls));
    shards_.push_back(std::move(e));
  }
  claim_.Release();
}

void DynamicTables::Translate(const ExecContext& ctx, RoutedBatch& rb, ParamStore& params,
                              uint64_t seed) {
  ctx.ParallelFor(0, static_cast<int64_t>(shards_.size()), 1, [&](int64_t e0, int64_t e1) {
    for (int64_t k = e0; k < e1; ++k) {
      Entry& e = shards_[static_cast<size_t>(k)];
      const LocalShard& ls = layout_->local[e.local];
      if (layout_->tables[ls.table].data_parallel) continue;  // dp_agree.h translates it
      // The zero row, which the last backward trained (a tiered shard's: by the tier).
      if (!e.tiered) params.ClearRow(ls, e.shard.slots());
      e.created.slots.clear();
      e.created.ids.clear();
      e.spans.clear();
      for (const kernels::BagRun& run : rb.shards[e.local].runs) {
        // The runs point into this batch's own receive (or send) buffer, which nothing else reads
        // until the lookup: the ids are rewritten where they arrived.
        const int64_t begin = run.offsets != nullptr ? run.offsets[0] : 0;
        int64_t* rows = const_cast<int64_t*>(run.rows) + begin;
        e.spans.emplace_back(rows, static_cast<size_t>(run.num_ids()));
      }
      e.shard.Translate(e.spans, [&](std::span<const int32_t> slots, std::span<const int64_t> ids) {
        if (!e.tiered) {
          params.InitRowsForIds(ls, slots, ids, seed);
          return;
        }
        e.created.slots.assign(slots.begin(), slots.end());
        e.created.ids.assign(ids.begin(), ids.end());
      });
    }
  });
}

void DynamicTables::Lookup(const ExecContext& ctx, RoutedBatch& rb, ParamStore& params) {
  ctx.ParallelFor(0, static_cast<int64_t>(shards_.size()), 1, [&](int64_t e0, int64_t e1) {
    for (int64_t k = e0; k < e1; ++k) {
      Entry& e = shards_[static_cast<size_t>(k)];
      const LocalShard& ls = layout_->local[e.local];
      if (layout_->tables[ls.table].data_parallel) continue;  // dp_agree.h looks it up
      // The zero row must read zeros whatever the last backward did to it; it holds no id (a
      // tiered shard's is cleared by the tier).
      if (!e.tiered) params.ClearRow(ls, e.shard.slots());
      e.created.slots.clear();
      e.created.ids.clear();
      e.spans.clear();
      for (const kernels::BagRun& run : rb.shards[e.local].runs) {
        // As in Translate: the ids are rewritten where they arrived.
        const int64_t begin = run.offsets != nullptr ? run.offsets[0] : 0;
        int64_t* rows = const_cast<int64_t*>(run.rows) + begin;
        e.spans.emplace_back(rows, static_cast<size_t>(run.num_ids()));
      }
      e.shard.Lookup(e.spans);
    }
  });
}

int64_t DynamicTables::SetScores(int32_t table, std::span<const int64_t> ids,
                                 std::span<const double> scores) {
  int64_t set = 0;
  if (layout_->tables[table].data_parallel) {
    // Which entries name a row of this copy: Lookup turns an id into its slot or slots().
    std::vector<int64_t> slots(ids.begin(), ids.end());
    for (Entry& e : shards_) {
      if (layout_->local[e.local].table != table) continue;
      const IdSpan span(slots);
      e.shard.Lookup(std::span<const IdSpan>(&span, 1));
      auto& pending = dp_.pending_scores[table];
      for (size_t i = 0; i < slots.size(); ++i) {
        if (slots[i] == e.shard.slots()) continue;
        pending.emplace_back(ids[i], scores[i]);
        ++set;
      }
    }
    return set;
  }
  for (Entry& e : shards_) {
    const LocalShard& ls = layout_->local[e.local];
    if (ls.table != table) continue;
    const int64_t n = e.shard.SetScores(ids, scores);
    if (ls.col_offset == 0) set += n;  // sibling column shards hold the same ids
  }
  return set;
}

void DynamicTables::SetTiered(int32_t local) {
  for (Entry& e : shards_)
    if (e.local == local) e.tiered = true;
}

const DynamicTables::Created* DynamicTables::CreatedRows(int32_t local) const {
  for (const Entry& e : shards_)
    if (e.local == local && e.tiered) return &e.created;
  return nullptr;
}

const DynamicShard* DynamicTables::Shard(int32_t local) const {
  for (const Entry& e : shards_)
    if (e.local == local) return &e.shard;
  return nullptr;
}

bool DynamicTables::Stats(int32_t table, TableStats* out) const {
  if (!layout_->tables[table].dynamic) return false;
  *out = TableStats{};
  for (const Entry& e : shards_) {
    const LocalShard& ls = layout_->local[e.local];
    if (ls.table != table) continue;
    out->metadata_bytes += e.shard.metadata_bytes();
    if (ls.col_offset != 0) continue;  // a sibling column shard of a counted block
    // A data-parallel table is counted once, by rank 0 of the collection: every copy is the same,
    // and the table's totals stay the sums over the ranks.
    if (layout_->tables[table].data_parallel && layout_->rank != 0) continue;
    out->size += e.shard.size();
    out->capacity += e.shard.slots();
    out->last.Add(e.shard.last());
    out->total.Add(e.shard.total());
  }
  return true;
}

}  // namespace shardrec::embedding::dynamic
