// Delta export of a dynamic table (docs/dynamic-tables.md, "Delta export"): the rows changed
// since each shard's mark, as (id, fp32 row) pairs, and the ids evicted since, gathered from every
// rank, for an online serving copy that replays them.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::embedding {
struct Layout;
class TableStorage;
}  // namespace shardrec::embedding

namespace shardrec::embedding::dynamic {

class DynamicTables;

struct Delta {
  std::vector<int64_t> ids;         // ascending
  std::vector<float> rows;          // [ids.size(), dim], widened to fp32
  std::vector<int64_t> tombstones;  // ascending; ids gone since the mark that have no row now
  // A full snapshot: a checkpoint load replaced the table since the mark (DynamicShard::replaced
  // on some shard), so `ids` are every row it holds and a copy in any state may take them as the
  // whole table (SHARDREC_DELTA_FULL). Always true for GatherRows.
  bool full = false;
};

// The collection runs these through its storage seam (TableStorage::MarkDelta, GatherDelta):
// `storage` is its, `tables` its dynamic tables.

// Marks every local shard of dynamic table `table` (not collective: communicates nothing; call
// on every rank between the same two steps). kInvalidArgument when the table is not dynamic.
Status MarkDelta(const Layout& layout, DynamicTables& tables, int32_t table);

// Collective over the collection's communicator: every rank gets the whole table's delta since
// the marks. Every rank fails alike (kInvalidUsage) when a rank has not marked the table or has
// an input distribution pending; kInvalidArgument when the table is not dynamic (decided by the
// plan); a failed exchange.
Status GatherDelta(TableStorage& storage, const DynamicTables& tables, int32_t table, Delta* out);

// Collective, as GatherDelta: every row of the table (no mark needed, no tombstones), for table
// exports.
Status GatherRows(TableStorage& storage, const DynamicTables& tables, int32_t table, Delta* out);

}  // namespace shardrec::embedding::dynamic
