// C API of the delta export of dynamic tables (shardrec/dynamic.h, "Dynamic tables"): the
// mark and the gathered delta since it, with or without its flags (impl/embedding/dynamic/delta.h).
#include <algorithm>
#include <cstddef>

#include "capi/src/embedding_convert.h"
#include "capi/src/embedding_handle.h"
#include "capi/src/guard.h"
#include "impl/embedding/dynamic/delta.h"
#include "shardrec/dynamic.h"

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::ExclusiveUse;
using shardrec::capi::Guard;

namespace {

// Both delta calls; `flags` is null for the one without them.
Status ExportDelta(shardrec_embedding_t* coll, const char* table, int64_t* ids, float* rows,
                   size_t max_rows, int64_t* tombstones, size_t max_tombstones, size_t* num_rows,
                   size_t* num_tombstones, uint32_t* flags) {
  SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
  ExclusiveUse use(coll->busy, "collection");
  SR_RETURN_IF_ERROR(use.status());
  SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
  SR_RETURN_IF_ERROR(CheckNotNull(num_rows, "num_rows"));
  SR_RETURN_IF_ERROR(CheckNotNull(num_tombstones, "num_tombstones"));
  if (max_rows > 0) {
    SR_RETURN_IF_ERROR(CheckNotNull(ids, "ids"));
    SR_RETURN_IF_ERROR(CheckNotNull(rows, "rows"));
  }
  if (max_tombstones > 0) SR_RETURN_IF_ERROR(CheckNotNull(tombstones, "tombstones"));
  int32_t t = -1;
  SR_RETURN_IF_ERROR(shardrec::capi::FindTable(*coll->impl, table, &t));
  // Local checks above are the same on every rank for the same arguments; the gather agrees
  // on the rest, and its result is the same on every rank, so every rank returns alike.
  shardrec::embedding::dynamic::Delta d;
  SR_RETURN_IF_ERROR(shardrec::embedding::dynamic::GatherDelta(*coll->impl, t, &d));
  *num_rows = d.ids.size();
  *num_tombstones = d.tombstones.size();
  if (flags != nullptr) *flags = d.full ? uint32_t{SHARDREC_DELTA_FULL} : 0u;
  if (d.ids.size() > max_rows || d.tombstones.size() > max_tombstones)
    return Status::InvalidArgument("the delta of dynamic table '", table, "' has ", d.ids.size(),
                                   " rows and ", d.tombstones.size(),
                                   " tombstones; the buffers hold ", max_rows, " and ",
                                   max_tombstones, " (num_rows and num_tombstones say the sizes)");
  // The buffers may be NULL when the delta is empty.
  if (!d.ids.empty()) {
    std::copy(d.ids.begin(), d.ids.end(), ids);
    std::copy(d.rows.begin(), d.rows.end(), rows);
  }
  if (!d.tombstones.empty()) std::copy(d.tombstones.begin(), d.tombstones.end(), tombstones);
  return Status::Ok();
}

}  // namespace

extern "C" {

SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_mark(shardrec_embedding_t* coll,
                                                               const char* table) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    ExclusiveUse use(coll->busy, "collection");
    SR_RETURN_IF_ERROR(use.status());
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    int32_t t = -1;
    SR_RETURN_IF_ERROR(shardrec::capi::FindTable(*coll->impl, table, &t));
    return shardrec::embedding::dynamic::MarkDelta(*coll->impl, t);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_delta(
    shardrec_embedding_t* coll, const char* table, int64_t* ids, float* rows, size_t max_rows,
    int64_t* tombstones, size_t max_tombstones, size_t* num_rows, size_t* num_tombstones) {
  return Guard([&] {
    return ExportDelta(coll, table, ids, rows, max_rows, tombstones, max_tombstones, num_rows,
                       num_tombstones, nullptr);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_delta_ext(
    shardrec_embedding_t* coll, const char* table, int64_t* ids, float* rows, size_t max_rows,
    int64_t* tombstones, size_t max_tombstones, size_t* num_rows, size_t* num_tombstones,
    uint32_t* flags) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(flags, "flags"));
    return ExportDelta(coll, table, ids, rows, max_rows, tombstones, max_tombstones, num_rows,
                       num_tombstones, flags);
  });
}

}  // extern "C"
