// Delta export (delta.h): each rank serialises its shards' dirty rows (each column shard its
// columns) and its column-0 shards' tombstones, every rank gathers every rank's part and merges
// the columns of each id's row.
#include "impl/embedding/dynamic/delta.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "impl/comm/gather_bytes.h"
#include "impl/core/element.h"
#include "impl/embedding/dynamic/tables.h"
#include "impl/embedding/storage/table_storage.h"

namespace shardrec::embedding::dynamic {

Status MarkDelta(const Layout& layout, DynamicTables& tables, int32_t table) {
  if (!layout.tables[table].dynamic)
    return Status::InvalidArgument("table '", layout.plan->tables[table].name, "' is not dynamic");
  for (size_t i = 0; i < layout.local.size(); ++i)
    if (layout.local[i].table == table) tables.Shard(static_cast<int32_t>(i))->Mark();
  return Status::Ok();
}

namespace {

// Every row, or the changed ones and the tombstones since the marks.
Status Gather(TableStorage& storage, const DynamicTables& tables, int32_t table, bool every_row,
              Delta* out) {
  const Layout& layout = storage.layout();
  const std::string& name = layout.plan->tables[table].name;
  if (!layout.tables[table].dynamic)
    return Status::InvalidArgument("table '", name, "' is not dynamic");
  const int64_t dim = layout.plan->tables[table].dim;
  comm::Communicator& comm = storage.comm();
  // This rank's part: per entry (id, first column, columns, values), then the tombstones.
  Status local = Status::Ok();
  if (storage.input_dist_pending())
    local = Status::InvalidUsage("cannot export rows of dynamic table '", name,
                                 "' while an input distribution is pending");
  std::vector<uint8_t> mine;
  int64_t entries = 0;
  std::vector<int64_t> tombs;
  int32_t replaced = 0;
  const std::vector<ShardTensor> tensors = storage.ShardTensors();
  for (size_t i = 0; i < layout.local.size() && local.ok(); ++i) {
    const LocalShard& ls = layout.local[i];
    if (ls.table != table) continue;
    // A data-parallel table's copies are the same: rank 0's is sent (every rank still checks its
    // mark, so a rank that forgot it fails every rank alike).
    const bool copy = layout.tables[table].data_parallel && layout.rank != 0;
    const DynamicShard* shard = tables.Shard(static_cast<int32_t>(i));
    if (!every_row && !shard->tracking()) {
      local = Status::InvalidUsage("dynamic table '", name,
                                   "' has no mark on this rank: call "
                                   "shardrec_embedding_dynamic_mark on every rank first");
      break;
    }
    // Every rank's shards were loaded alike, a data-parallel copy's included; any one says so.
    if (shard->replaced()) replaced = 1;
    if (copy) continue;
    const uint8_t* weights = nullptr;
    bool tiered = false;
    for (const ShardTensor& t : tensors)
      if (t.table == table && t.shard == ls.shard && t.kind == ParamKind::kWeights) {
        weights = static_cast<const uint8_t*>(t.data);
        tiered = t.streamed;
      }
    const size_t es = DTypeSize(ls.dtype);
    // A tiered shard's rows (docs/disk-tier.md) are read through the storage a chunk at a time.
    constexpr int64_t kChunk = 4096;
    std::vector<float> chunk;
    for (int64_t s = 0; s < shard->size() && local.ok(); ++s) {
      if (tiered && s % kChunk == 0) {
        const int64_t n = std::min(kChunk, shard->size() - s);
        chunk.resize(static_cast<size_t>(n * ls.cols));
        local = storage.ReadTieredRows(static_cast<int32_t>(i), -1, s, n, chunk.data());
        if (!local.ok()) break;
      }
      if (!every_row && !shard->dirty(s)) continue;
      PutValue<int64_t>(&mine, shard->id(s));
      PutValue<int32_t>(&mine, ls.col_offset);
      PutValue<int32_t>(&mine, ls.cols);
      if (tiered) {
        const float* row = chunk.data() + (s % kChunk) * ls.cols;
        for (int32_t c = 0; c < ls.cols; ++c) PutValue<float>(&mine, row[c]);
      } else {
        const uint8_t* row = weights + static_cast<size_t>(s) * ls.cols * es;
        for (int32_t c = 0; c < ls.cols; ++c)
          PutValue<float>(&mine, LoadElement(ls.dtype, row + c * es));
      }
      ++entries;
    }
    if (!every_row && ls.col_offset == 0)
      tombs.insert(tombs.end(), shard->tombstones().begin(), shard->tombstones().end());
  }
  // Agree first, so no rank waits in the exchange for a rank that failed; the same reduction
  // tells every rank whether some shard was replaced (a rank may hold no shard of the table).
  int32_t agreed[2] = {local.ok() ? 0 : 1, replaced};
  SR_RETURN_IF_ERROR(comm.AllReduce(agreed, agreed, 2, DType::kInt32, comm::ReduceOp::kMax));
  const int32_t failed = agreed[0];
  SR_RETURN_IF_ERROR(local);
  if (failed != 0)
    return Status::InvalidUsage("another rank could not export the delta of dynamic table '", name,
                                "' (see its error)");
  std::vector<uint8_t> blob;
  PutValue<int64_t>(&blob, entries);
  PutValue<int64_t>(&blob, static_cast<int64_t>(tombs.size()));
  blob.insert(blob.end(), mine.begin(), mine.end());
  for (int64_t x : tombs) PutValue<int64_t>(&blob, x);

  std::vector<uint8_t> all;
  std::vector<size_t> sizes;
  SR_RETURN_IF_ERROR(comm::AllGatherBytes(comm, blob.data(), blob.size(), &all, &sizes));

  std::map<int64_t, std::vector<float>> rows;
  std::set<int64_t> evicted;
  const uint8_t* p = all.data();
  for (size_t r = 0; r < sizes.size(); ++r) {
    const int64_t ne = GetValue<int64_t>(p), nt = GetValue<int64_t>(p);
    for (int64_t e = 0; e < ne; ++e) {
      const int64_t id = GetValue<int64_t>(p);
      const int32_t c0 = GetValue<int32_t>(p), nc = GetValue<int32_t>(p);
      std::vector<float>& row = rows[id];
      row.resize(static_cast<size_t>(dim));
      std::memcpy(row.data() + c0, p, static_cast<size_t>(nc) * sizeof(float));
      p += static_cast<size_t>(nc) * sizeof(float);
    }
    for (int64_t t = 0; t < nt; ++t) evicted.insert(GetValue<int64_t>(p));
  }
  out->ids.clear();
  out->rows.clear();
  out->tombstones.clear();
  out->full = every_row || agreed[1] != 0;
  for (const auto& [id, row] : rows) {
    out->ids.push_back(id);
    out->rows.insert(out->rows.end(), row.begin(), row.end());
  }
  // An id evicted and then given a row again is a changed row, not a tombstone.
  for (int64_t id : evicted)
    if (!rows.count(id)) out->tombstones.push_back(id);
  return Status::Ok();
}

}  // namespace

Status GatherDelta(TableStorage& storage, const DynamicTables& tables, int32_t table, Delta* out) {
  return Gather(storage, tables, table, false, out);
}

Status GatherRows(TableStorage& storage, const DynamicTables& tables, int32_t table, Delta* out) {
  return Gather(storage, tables, table, true, out);
}

}  // namespace shardrec::embedding::dynamic
