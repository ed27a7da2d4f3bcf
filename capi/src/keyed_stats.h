// A dynamic table's statistics as the C struct, shared by the per-rank call
// (shardrec_embedding_dynamic_stats) and the table-wide collective
// (shardrec_embedding_dynamic_stats_global).
#pragma once

#include <cstdint>

#include "impl/core/status.h"
#include "impl/embedding/collection.h"
#include "shardrec/dynamic.h"

namespace shardrec::capi {

// This rank's part of table `t` (named `table` in messages) in every field of the current
// struct version; kInvalidArgument when the table is not dynamic. Reads only (ShardTensors is
// not const).
Status LocalDynamicStats(embedding::EmbeddingCollection& coll, int32_t t, const char* table,
                         shardrec_dynamic_table_stats_t* full);

// Copies the fields of `full` that exist in out->version (a caller built against an older
// header has a shorter struct), the version itself untouched.
void CopyDynamicStats(const shardrec_dynamic_table_stats_t& full,
                      shardrec_dynamic_table_stats_t* out);

}  // namespace shardrec::capi
