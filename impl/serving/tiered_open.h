// Opening a checkpoint's table for serving from its files (OpenOptions::tiers): the table's
// weights records are checked against the manifest and verified once, streamed in bounded
// chunks, and the table is served through a row cache (tiered_rows.h) instead of being read
// into memory. A dynamic table's ids are read and indexed in memory (tiered_dynamic_open.cc);
// its rows stay in the files.
#pragma once

#include <cstdint>
#include <string>

#include "impl/checkpoint/format.h"
#include "impl/core/status.h"
#include "impl/serving/model.h"
#include "impl/sharding/types.h"

namespace shardrec::serving {

// Adds table `tc` of the checkpoint in `dir` (manifest `m`) to `model`, stored as `storage` (a
// resolved storage) and served through a row cache of `cache_bytes`. Verifies every chunk of the
// table's weights records (kCorrupt naming the file and the record, as the in-memory open) and,
// for int8/int4/fp8, that every row can be quantized (kInvalidArgument naming the row, as the
// in-memory open). kUnsupported naming the table for a sequence (NONE pooling) table. Memory:
// the cache, a rank file's page checksums (tiered_sums.h: 4 bytes per 512), one chunk of a
// record and, for a quantized storage, a block of about 4 MiB of fp32 rows while verifying; a
// dynamic table also its ids (OpenTieredDynamicTable).
Status OpenTieredTable(const std::string& dir, const checkpoint::Manifest& m,
                       const sharding::TableConfig& tc, Storage storage, uint64_t cache_bytes,
                       Model* model);

// OpenTieredTable of a dynamic table: every row block's ids record is read, checked and indexed
// as the in-memory open does (kCorrupt with its messages: two ids records of one block, weights
// without ids, an id saved twice, weights not covering their block), every row is verified and
// encoded once in blocks of about 4 MiB of fp32 rows (kInvalidArgument for a row the storage
// cannot hold, as in memory), and the rows stay in the files. Memory per live id: its id (8
// bytes), its records' row (8) and the id index (32 to 64), besides the cache.
Status OpenTieredDynamicTable(const std::string& dir, const checkpoint::Manifest& m,
                              const sharding::TableConfig& tc, Storage storage,
                              uint64_t cache_bytes, Model* model);

}  // namespace shardrec::serving
