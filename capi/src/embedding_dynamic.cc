// C API of the dynamic tables of an embedding collection (shardrec/dynamic.h, "Dynamic
// tables"): their statistics and the caller's eviction scores.
#include <cstddef>
#include <span>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
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

SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_stats(
    const shardrec_embedding_t* coll, const char* table, shardrec_dynamic_table_stats_t* out) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    SR_RETURN_IF_ERROR(shardrec::capi::CheckStructVersion(
        out->version, SHARDREC_DYNAMIC_TABLE_STATS_VERSION, "dynamic table stats"));
    int32_t t = -1;
    SR_RETURN_IF_ERROR(shardrec::capi::FindTable(*coll->impl, table, &t));
    shardrec::embedding::dynamic::TableStats s;
    if (!coll->impl->dynamic_tables().Stats(t, &s))
      return Status::InvalidArgument("table '", table, "' is not dynamic");
    out->size = s.size;
    out->capacity = s.capacity;
    out->load_factor =
        s.capacity > 0 ? static_cast<double>(s.size) / static_cast<double>(s.capacity) : 0.0;
    out->last_inserted = s.last.inserted;
    out->last_evicted = s.last.evicted;
    out->last_rejected_admission = s.last.rejected_admission;
    out->last_rejected_full = s.last.rejected_full;
    out->total_inserted = s.total.inserted;
    out->total_evicted = s.total.evicted;
    out->total_rejected_admission = s.total.rejected_admission;
    out->total_rejected_full = s.total.rejected_full;
    out->metadata_bytes = s.metadata_bytes;
    if (out->version >= 2) {
      uint64_t bytes = s.metadata_bytes;
      for (const shardrec::embedding::ShardTensor& st : coll->impl->ShardTensors())
        if (st.table == t)
          bytes += static_cast<uint64_t>(st.rows) * static_cast<uint64_t>(st.cols) *
                   shardrec::DTypeSize(st.dtype);
      out->capacity_bytes = bytes;
    }
    if (out->version >= 3) {
      out->last_admitted = s.last.inserted + s.last.rejected_full;
      out->total_admitted = s.total.inserted + s.total.rejected_full;
    }
    return Status::Ok();
  });
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
