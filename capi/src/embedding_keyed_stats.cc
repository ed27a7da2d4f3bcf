// C API of a dynamic table's statistics (shardrec/dynamic.h): this rank's part, and the whole
// table's, summed over ranks by one all-reduce after the ranks agree on their arguments.
#include <array>
#include <cstddef>
#include <cstring>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/keyed_stats.h"
#include "capi/src/versioned.h"
#include "impl/comm/agree.h"

namespace shardrec::capi {

Status LocalDynamicStats(embedding::EmbeddingCollection& coll, int32_t t, const char* table,
                         shardrec_dynamic_table_stats_t* full) {
  embedding::dynamic::TableStats s;
  if (!coll.storage().KeyedStats(t, &s))
    return Status::InvalidArgument("table '", table, "' is not dynamic");
  full->size = s.size;
  full->capacity = s.capacity;
  full->load_factor =
      s.capacity > 0 ? static_cast<double>(s.size) / static_cast<double>(s.capacity) : 0.0;
  full->last_inserted = s.last.inserted;
  full->last_evicted = s.last.evicted;
  full->last_rejected_admission = s.last.rejected_admission;
  full->last_rejected_full = s.last.rejected_full;
  full->total_inserted = s.total.inserted;
  full->total_evicted = s.total.evicted;
  full->total_rejected_admission = s.total.rejected_admission;
  full->total_rejected_full = s.total.rejected_full;
  full->metadata_bytes = s.metadata_bytes;
  uint64_t bytes = s.metadata_bytes;
  for (const embedding::ShardTensor& st : coll.ShardTensors())
    if (st.table == t)
      bytes +=
          static_cast<uint64_t>(st.rows) * static_cast<uint64_t>(st.cols) * DTypeSize(st.dtype);
  full->capacity_bytes = bytes;
  full->last_admitted = s.last.inserted + s.last.rejected_full;
  full->total_admitted = s.total.inserted + s.total.rejected_full;
  return Status::Ok();
}

void CopyDynamicStats(const shardrec_dynamic_table_stats_t& full,
                      shardrec_dynamic_table_stats_t* out) {
  // Version 1 ended with metadata_bytes, version 2 with capacity_bytes.
  const size_t end = out->version >= 3   ? sizeof(full)
                     : out->version == 2 ? offsetof(shardrec_dynamic_table_stats_t, last_admitted)
                                         : offsetof(shardrec_dynamic_table_stats_t, capacity_bytes);
  const size_t begin = offsetof(shardrec_dynamic_table_stats_t, size);
  std::memcpy(reinterpret_cast<char*>(out) + begin, reinterpret_cast<const char*>(&full) + begin,
              end - begin);
}

namespace {

// The summed fields, in one all-reduce's order (load_factor is derived from two of them).
constexpr size_t kSummed = 14;

std::array<int64_t, kSummed> Pack(const shardrec_dynamic_table_stats_t& s) {
  return {s.size,
          s.capacity,
          s.last_inserted,
          s.last_evicted,
          s.last_rejected_admission,
          s.last_rejected_full,
          s.total_inserted,
          s.total_evicted,
          s.total_rejected_admission,
          s.total_rejected_full,
          static_cast<int64_t>(s.metadata_bytes),
          static_cast<int64_t>(s.capacity_bytes),
          s.last_admitted,
          s.total_admitted};
}

void Unpack(const std::array<int64_t, kSummed>& v, shardrec_dynamic_table_stats_t* s) {
  s->size = v[0];
  s->capacity = v[1];
  s->last_inserted = v[2];
  s->last_evicted = v[3];
  s->last_rejected_admission = v[4];
  s->last_rejected_full = v[5];
  s->total_inserted = v[6];
  s->total_evicted = v[7];
  s->total_rejected_admission = v[8];
  s->total_rejected_full = v[9];
  s->metadata_bytes = static_cast<uint64_t>(v[10]);
  s->capacity_bytes = static_cast<uint64_t>(v[11]);
  s->last_admitted = v[12];
  s->total_admitted = v[13];
  s->load_factor =
      s->capacity > 0 ? static_cast<double>(s->size) / static_cast<double>(s->capacity) : 0.0;
}

}  // namespace
}  // namespace shardrec::capi

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Exclusive;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_stats(
    const shardrec_embedding_t* coll, const char* table, shardrec_dynamic_table_stats_t* out) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    SR_RETURN_IF_ERROR(shardrec::capi::CheckStructVersion(
        out->version, SHARDREC_DYNAMIC_TABLE_STATS_VERSION, "dynamic table stats"));
    int32_t t = -1;
    SR_RETURN_IF_ERROR(shardrec::capi::FindTable(*coll->impl, table, &t));
    shardrec_dynamic_table_stats_t full = SHARDREC_DYNAMIC_TABLE_STATS_INIT;
    SR_RETURN_IF_ERROR(shardrec::capi::LocalDynamicStats(*coll->impl, t, table, &full));
    shardrec::capi::CopyDynamicStats(full, out);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_stats_global(
    shardrec_embedding_t* coll, const char* table, shardrec_dynamic_table_stats_t* out) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    int32_t t = -1;
    shardrec_dynamic_table_stats_t full = SHARDREC_DYNAMIC_TABLE_STATS_INIT;
    const Status args = [&]() -> Status {
      SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
      SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
      SR_RETURN_IF_ERROR(shardrec::capi::CheckStructVersion(
          out->version, SHARDREC_DYNAMIC_TABLE_STATS_VERSION, "dynamic table stats"));
      SR_RETURN_IF_ERROR(shardrec::capi::FindTable(*coll->impl, table, &t));
      return shardrec::capi::LocalDynamicStats(*coll->impl, t, table, &full);
    }();
    // A rank refusing its arguments still meets the others here, so none waits in the sums for
    // it; ranks naming different tables would add one table's counts to another's.
    const int64_t same[] = {t};
    SR_RETURN_IF_ERROR(shardrec::comm::AgreeOnArguments(
        coll->impl->comm(), args, "dynamic table stats", same,
        shardrec::StrCat("they named different tables (this rank: '", table,
                         "'); every rank must name the same table")));
    std::array<int64_t, shardrec::capi::kSummed> sums = shardrec::capi::Pack(full);
    SR_RETURN_IF_ERROR(coll->impl->comm().AllReduce(sums.data(), sums.data(), sums.size(),
                                                    shardrec::DType::kInt64,
                                                    shardrec::comm::ReduceOp::kSum));
    shardrec::capi::Unpack(sums, &full);
    shardrec::capi::CopyDynamicStats(full, out);
    return Status::Ok();
  });
}

}  // extern "C"
