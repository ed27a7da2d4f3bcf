// Tiered dynamic tables (docs/disk-tier.md, "Tiered dynamic tables"): a dynamic shard's slots
// (and its zero row, the last) are the rows of a tiered shard. The dynamic shard keeps its
// metadata (the id index, last-seen forwards, counts, scores, admission counts) in memory for
// every slot; the tier keeps the slots' weights and optimizer state in its store under its cache.
// A dynamic eviction gives the slot to a new id in the same forward, so the slot's row is
// overwritten, wherever it lives, with the new id's initial row: that is the eviction from the
// store and the cache. These are the tier's parts of a dynamic forward, around
// TieredTables::Resolve; they run on the collection's thread.
#pragma once

#include "impl/core/status.h"
#include "impl/embedding/dynamic/tables.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/tiered/tables.h"

namespace shardrec::embedding::tiered {

class DynamicTier {
 public:
  // Hands `tiers`' shards of dynamic tables to `dyn` as tiered (DynamicTables::SetTiered) and
  // keeps them out of the prefetch (a pipelined batch's dynamic ids become slots only when its
  // forward translates them). Both must outlive this object.
  DynamicTier(TieredTables* tiers, dynamic::DynamicTables* dyn);
  bool empty() const { return locals_.empty(); }

  // Before a training translation of `rb` (raw ids): kInvalidArgument naming the table and
  // counts when a tiered dynamic shard's cache cannot hold the batch's distinct ids together with
  // the slots of `in_flight` (null: none). The ids of a batch take at most that many rows, so the
  // tier's own check after the translation then passes, and a refused forward has changed no
  // table.
  Status CheckFits(const RoutedBatch& rb, const RoutedBatch* in_flight) const;

  // After the translation of `rb` (ids are slots, before the tier resolves them): the rows it
  // created get the in-memory table's initial row of their id and zero optimizer state, and the
  // zero row (where the batch reads it) zeros: in their cache slots where cached, else as
  // records through the write-back queue, which the tier's miss then reads. The queue's errors.
  Status WriteCreated(const RoutedBatch& rb);

  // After the tier resolved `rb` (rows are cache slots): keys the stochastic rounding of each
  // cache slot the batch reads by the id its slot holds (the zero row by its row), as the
  // in-memory table keys a slot's rounding.
  void KeyRounding(const RoutedBatch& rb);

 private:
  TieredTables& tiers_;
  dynamic::DynamicTables& dyn_;
  std::vector<int32_t> locals_;  // the tiered dynamic local shards
};

}  // namespace shardrec::embedding::tiered
