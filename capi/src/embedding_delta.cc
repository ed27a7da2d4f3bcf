// C API of the delta export of dynamic tables (shardrec/dynamic.h, "Dynamic tables"): the
// mark and the gathered delta since it, with or without its flags (impl/embedding/dynamic/delta.h).
#include <algorithm>
#include <cstddef>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "impl/comm/agree.h"
#include "impl/embedding/dynamic/delta.h"
#include "shardrec/dynamic.h"

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Exclusive;

namespace {

// Both delta calls, on a collection held for the call; `flags` is null for the one without them
// (flags_missing: the _ext call was given NULL flags, refused like its other arguments).
Status ExportDelta(shardrec_embedding_t* coll, const char* table, int64_t* ids, float* rows,
                   size_t max_rows, int64_t* tombstones, size_t max_tombstones, size_t* num_rows,
                   size_t* num_tombstones, uint32_t* flags, bool flags_missing) {
  int32_t t = -1;
  const Status args = [&]() -> Status {
    if (flags_missing) return Status::InvalidArgument("flags must not be NULL");
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    SR_RETURN_IF_ERROR(CheckNotNull(num_rows, "num_rows"));
    SR_RETURN_IF_ERROR(CheckNotNull(num_tombstones, "num_tombstones"));
    if (max_rows > 0) {
      SR_RETURN_IF_ERROR(CheckNotNull(ids, "ids"));
      SR_RETURN_IF_ERROR(CheckNotNull(rows, "rows"));
    }
    if (max_tombstones > 0) SR_RETURN_IF_ERROR(CheckNotNull(tombstones, "tombstones"));
    SR_RETURN_IF_ERROR(shardrec::capi::FindTable(*coll->impl, table, &t));
    if (!coll->impl->plan().tables[static_cast<size_t>(t)].dynamic.enabled)
      return Status::InvalidArgument("table '", table, "' is not dynamic");
    return Status::Ok();
  }();
  // A rank refusing its arguments still meets the others here (they fail at once, naming it),
  // and every rank must name the same table: the gather's sizes follow from it (another table's
  // rows, perhaps wider, would fill this one's delta). The gather agrees on the rest, and its
  // result is the same on every rank.
  const int64_t same[] = {t};
  SR_RETURN_IF_ERROR(shardrec::comm::AgreeOnArguments(
      coll->impl->comm(), args, "dynamic table delta export", same,
      shardrec::StrCat("they named different tables (this rank: '", table,
                       "'); every rank must name the same table")));
  shardrec::embedding::dynamic::Delta d;
  SR_RETURN_IF_ERROR(coll->impl->storage().GatherDelta(t, &d));
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
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    int32_t t = -1;
    SR_RETURN_IF_ERROR(shardrec::capi::FindTable(*coll->impl, table, &t));
    return coll->impl->storage().MarkDelta(t);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_delta(
    shardrec_embedding_t* coll, const char* table, int64_t* ids, float* rows, size_t max_rows,
    int64_t* tombstones, size_t max_tombstones, size_t* num_rows, size_t* num_tombstones) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    return ExportDelta(coll, table, ids, rows, max_rows, tombstones, max_tombstones, num_rows,
                       num_tombstones, nullptr, false);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_delta_ext(
    shardrec_embedding_t* coll, const char* table, int64_t* ids, float* rows, size_t max_rows,
    int64_t* tombstones, size_t max_tombstones, size_t* num_rows, size_t* num_tombstones,
    uint32_t* flags) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    return ExportDelta(coll, table, ids, rows, max_rows, tombstones, max_tombstones, num_rows,
                       num_tombstones, flags, flags == nullptr);
  });
}

}  // extern "C"
