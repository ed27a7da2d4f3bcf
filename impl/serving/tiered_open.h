// Opening a checkpoint's table for serving from its files (OpenOptions::tiers): the table's
// weights records are checked against the manifest and verified once, streamed in bounded
// chunks, and the table is served through a row cache (tiered_rows.h) instead of being read
// into memory.
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
// in-memory open). kUnsupported naming the table for a dynamic table (its ids are gathered and
// indexed whole) and for a sequence (NONE pooling) table. Memory: the cache, one chunk of a
// record and, for a quantized storage, a block of about 4 MiB of fp32 rows while verifying.
Status OpenTieredTable(const std::string& dir, const checkpoint::Manifest& m,
                       const sharding::TableConfig& tc, Storage storage, uint64_t cache_bytes,
                       Model* model);

}  // namespace shardrec::serving
