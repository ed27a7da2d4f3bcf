// C API of the dynamic tables of an embedding collection (shardrec/dynamic.h, "Dynamic
// tables"): the statistics struct's init and the caller's eviction scores (the statistics
// themselves: embedding_keyed_stats.cc).
#include <cstddef>
#include <span>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "impl/embedding/dynamic/tables.h"
#include "shardrec/dynamic.h"

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Exclusive;

extern "C" {

SHARDREC_API shardrec_status_t
shardrec_dynamic_table_stats_init(shardrec_dynamic_table_stats_t* stats, uint32_t version) {
  const shardrec_dynamic_table_stats_t d = SHARDREC_DYNAMIC_TABLE_STATS_INIT;
  // Version 1 ended with metadata_bytes, version 2 with capacity_bytes.
  return shardrec::capi::InitStruct(
      stats, version, SHARDREC_DYNAMIC_TABLE_STATS_VERSION, d, "dynamic table stats",
      {offsetof(shardrec_dynamic_table_stats_t, capacity_bytes),
       offsetof(shardrec_dynamic_table_stats_t, last_admitted), sizeof(d)});
}

SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_set_scores(shardrec_embedding_t* coll,
                                                                     const char* table,
                                                                     const int64_t* ids,
                                                                     const double* scores, size_t n,
                                                                     size_t* num_set) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    if (n > 0) {
      SR_RETURN_IF_ERROR(CheckNotNull(ids, "ids"));
      SR_RETURN_IF_ERROR(CheckNotNull(scores, "scores"));
    }
    int64_t set = 0;
    SR_RETURN_IF_ERROR(coll->impl->SetDynamicScores(table, std::span<const int64_t>(ids, n),
                                                    std::span<const double>(scores, n), &set));
    if (num_set != nullptr) *num_set = static_cast<size_t>(set);
    return Status::Ok();
  });
}

}  // extern "C"
