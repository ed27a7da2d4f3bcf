// Table export and import of dynamic tables, rows keyed by id through the storage seam
// (docs/checkpoint-format.md#table-export): rows keyed by id, with their optimizer state on
// request; an import inserts or overwrites rows by id on the shards that own them under this plan,
// all or nothing.
#pragma once

#include <cstdint>
#include <string>

#include "impl/checkpoint/fs.h"
#include "impl/core/status.h"
#include "impl/embedding/storage/table_storage.h"

namespace shardrec::checkpoint {

// Collective over the collection's communicator: gathers dynamic table `t`'s live rows on every
// rank (fp32 weights and, with `with_state`, every optimizer state, fp32) and rank 0 writes
// `path` atomically: "ids" (I64 [n], ascending), "weights" (F32 [n, dim]) and each state by name
// (F32 [n] or [n, dim]), metadata format "shardrec-dynamic-table". kInvalidUsage (every rank)
// while an input distribution is pending.
Status ExportKeyedTable(embedding::TableStorage& storage, FileSystem& fs, const std::string& path,
                        int32_t t, bool with_state);

// Collective: every rank reads the file's "ids" and "weights" (and with `with_state` the states
// named like the table's, F32 of the right shape), keeps the ids whose row block under this plan
// is one of its shards, and stages them: an id with a row takes the file's row (and state when
// read), a new id takes a free slot with the file's row, the state read or zeros, last seen now
// and count and score 0. kInvalidArgument when a shard would hold more rows than its slots, for
// a repeated id, a missing "ids" tensor or a shape or dtype mismatch; kCorrupt, kIo; a peer's
// failure. Every rank decides before anything changes; the commit is memory copies.
Status ImportKeyedTable(embedding::TableStorage& storage, FileSystem& fs, const std::string& path,
                        int32_t t, bool with_state);

}  // namespace shardrec::checkpoint
