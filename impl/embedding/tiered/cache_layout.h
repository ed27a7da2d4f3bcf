// A tiered table's local shards hold cache slots, not rows (docs/disk-tier.md): the layout's
// LocalShard::rows of such a shard becomes its slot count and every arena offset is recomputed,
// so the parameter store allocates the cache and no more. The shard's rows (the plan's) stay in
// TieredShard::rows; the tiered resolver turns rows into slots before the kernels run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/core/status.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/tiered/tier_config.h"

namespace shardrec::embedding::tiered {

// One local shard of a tiered table.
struct TieredShard {
  int32_t local = 0;  // index into Layout::local
  int64_t rows = 0;   // the shard's rows in the plan (keys 0 .. rows-1 in its store)
  int64_t slots = 0;  // cache slots (the shard's LocalShard::rows after ShrinkToCache)
  size_t tier = 0;    // index into the tiers given
};

// DRAM a cache slot costs beyond its record (the slot's row, reference, dirty and pin marks and
// its entry in the row-to-slot map), counted against cache_bytes.
constexpr size_t kSlotOverheadBytes = 32;

// Bytes of one row's record of `ls`: its weights at the storage dtype, then its optimizer state
// (element-wise states cols floats, row-wise ones one float), in the table's StateSpecs order.
size_t RecordBytes(const Layout& layout, const LocalShard& ls);

// Checks `tiers` against the layout's plan (a GPU collection, `on_device`, takes none:
// kUnsupported naming the table; every table named once and held as rows: not
// data-parallel; a directory; cache_bytes > 0 and worth one slot) and shrinks each
// tiered local shard to its slots. A table's slots per local shard are cache_bytes divided among
// the most shards of the table any rank holds, at a full-width row's cost, at most the shard's
// rows: so the column shards of one row block get the same slot count on every rank given the
// same cache_bytes (their row statistics travel in slot order). On failure `layout` is unchanged
// and the message names the table.
Status ShrinkToCache(const std::vector<TierConfig>& tiers, bool on_device, Layout* layout,
                     std::vector<TieredShard>* out);

}  // namespace shardrec::embedding::tiered
