// Applying a delta: the named table is rebuilt beside the served one (a fixed table copied and
// patched, a dynamic one merged in id order, or built from a full delta's rows alone, and
// re-indexed), then put into a copy of the model whose other tables still point at the served
// version's memory.
#include "impl/serving/delta.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/extent.h"
#include "impl/serving/encode.h"

namespace shardrec::serving {
namespace {

// Positions of `ids` in ascending id order; kInvalidArgument for an id given twice.
Status SortedOrder(const int64_t* ids, size_t n, const std::string& table, const char* what,
                   std::vector<size_t>* order) {
  order->resize(n);
  for (size_t i = 0; i < n; ++i) (*order)[i] = i;
  std::sort(order->begin(), order->end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  for (size_t i = 1; i < n; ++i)
    if (ids[(*order)[i]] == ids[(*order)[i - 1]])
      return Status::InvalidArgument("delta of table ", table, ": ", what, " name id ",
                                     ids[(*order)[i]], " twice");
  return Status::Ok();
}

Status Patch(const Table& t, const Delta& d, const uint8_t* encoded, Table* next) {
  if (d.full)
    return Status::InvalidArgument("delta of table ", t.name, ": a fixed table keeps all its ",
                                   t.rows,
                                   " rows, so it takes no full delta (SHARDREC_DELTA_FULL: the "
                                   "delta's rows replace a dynamic table's)");
  if (d.num_tombstones != 0)
    return Status::InvalidArgument("delta of table ", t.name, ": a fixed table keeps all its ",
                                   t.rows, " rows, so it takes no tombstones (", d.num_tombstones,
                                   " given)");
  for (size_t i = 0; i < d.num_rows; ++i)
    if (d.ids[i] < 0 || d.ids[i] >= t.rows)
      return Status::InvalidArgument("delta of table ", t.name, ": id ", d.ids[i], " at position ",
                                     i, " is outside its rows [0, ", t.rows, ")");
  const uint64_t bytes = static_cast<uint64_t>(t.rows) * t.row_bytes;
  std::shared_ptr<uint8_t> buf = AlignedBuffer(bytes);
  if (!buf) return Status::OutOfMemory("delta of table ", t.name, ": ", bytes, " bytes");
  std::memcpy(buf.get(), t.data, bytes);
  for (size_t i = 0; i < d.num_rows; ++i)
    std::memcpy(buf.get() + static_cast<uint64_t>(d.ids[i]) * t.row_bytes,
                encoded + i * t.row_bytes, t.row_bytes);
  next->data = buf.get();
  next->own = std::move(buf);
  return Status::Ok();
}

Status Merge(const Table& t, const Delta& d, const uint8_t* encoded, Table* next) {
  std::vector<size_t> up, gone;
  SR_RETURN_IF_ERROR(SortedOrder(d.ids, d.num_rows, t.name, "the rows", &up));
  SR_RETURN_IF_ERROR(SortedOrder(d.tombstones, d.num_tombstones, t.name, "the tombstones", &gone));
  // Both lists are sorted: one pass finds an id both upserted and removed.
  for (size_t i = 0, j = 0; i < up.size() && j < gone.size();) {
    const int64_t a = d.ids[up[i]], b = d.tombstones[gone[j]];
    if (a == b)
      return Status::InvalidArgument("delta of table ", t.name, ": id ", a,
                                     " is both upserted and removed");
    if (a < b)
      ++i;
    else
      ++j;
  }
  // A full delta is the whole table: nothing served is kept, so its ghosts (ids the trainer no
  // longer holds, which no tombstone may name) go too.
  static const std::vector<int64_t> kNone;
  const std::vector<int64_t>& old_ids = d.full ? kNone : t.dynamic->ids;
  auto nd = std::make_shared<DynamicIds>();
  std::vector<const uint8_t*> sources;
  try {
    nd->ids.reserve(old_ids.size() + up.size());
    sources.reserve(old_ids.size() + up.size());
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("delta of table ", t.name, ": ids");
  }
  // Merge the served ids (less the removed ones) with the upserted ones, in ascending order; an
  // upserted id that is served takes the delta's row.
  size_t i = 0, u = 0, g = 0;
  while (i < old_ids.size() || u < up.size()) {
    const bool take_old = u == up.size() || (i < old_ids.size() && old_ids[i] < d.ids[up[u]]);
    if (take_old) {
      const int64_t id = old_ids[i];
      while (g < gone.size() && d.tombstones[gone[g]] < id) ++g;
      if (g == gone.size() || d.tombstones[gone[g]] != id) {
        nd->ids.push_back(id);
        sources.push_back(t.data + i * t.row_bytes);
      }
      ++i;
      continue;
    }
    const int64_t id = d.ids[up[u]];
    if (i < old_ids.size() && old_ids[i] == id) ++i;  // replaced
    nd->ids.push_back(id);
    sources.push_back(encoded + up[u] * t.row_bytes);
    ++u;
  }
  const uint64_t n = nd->ids.size();
  std::shared_ptr<uint8_t> buf = AlignedBuffer((n + 1) * t.row_bytes);  // zeroed: the zero row
  if (!buf) return Status::OutOfMemory("delta of table ", t.name, ": ", n + 1, " rows");
  for (uint64_t r = 0; r < n; ++r)
    std::memcpy(buf.get() + r * t.row_bytes, sources[r], t.row_bytes);
  SR_RETURN_IF_ERROR(IdIndex::Build(nd->ids.data(), static_cast<int64_t>(n), t.name, &nd->index));
  next->rows = static_cast<int64_t>(n);
  next->data = buf.get();
  next->own = std::move(buf);
  next->dynamic = std::move(nd);
  return Status::Ok();
}

}  // namespace

Status ApplyDelta(const Model& served, size_t table, const Delta& d, std::shared_ptr<Model>* out) {
  const Table& t = served.tables.at(table);
  if (t.tiered)
    return Status::Unsupported("delta of table ", t.name,
                               ": the table is served from the checkpoint's files (tiers), which "
                               "a delta does not change; reload a newer checkpoint instead");
  if ((d.num_rows > 0 && (d.ids == nullptr || d.rows == nullptr)) ||
      (d.num_tombstones > 0 && d.tombstones == nullptr))
    return Status::InvalidArgument("delta of table ", t.name,
                                   ": ids, rows or tombstones are NULL but their count is not 0");
  // Counts whose rows (as given, fp32, or as stored) no buffer could hold: their byte counts
  // would wrap around and the rows be encoded into a buffer too small for them.
  const size_t row_max = std::max<size_t>(t.row_bytes, sizeof(float) * static_cast<size_t>(t.dim));
  if (!core::BufferItems(d.num_rows, row_max, 1))
    return Status::InvalidArgument("delta of table ", t.name, ": ", d.num_rows,
                                   " rows are more than any buffer holds");
  if (!core::BufferItems(d.num_tombstones, 1, sizeof(int64_t)))
    return Status::InvalidArgument("delta of table ", t.name, ": ", d.num_tombstones,
                                   " tombstones are more than any buffer holds");
  // The delta's rows in the table's storage, validated before anything is built.
  std::vector<uint8_t> encoded;
  try {
    encoded.resize(d.num_rows * t.row_bytes);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("delta of table ", t.name, ": ", d.num_rows, " rows");
  }
  SR_RETURN_IF_ERROR(EncodeRows(d.rows, static_cast<int64_t>(d.num_rows), t.dim, t.storage,
                                encoded.data(), "delta of table " + t.name, NonFinite::kRefuse));
  auto next = std::make_shared<Model>(served);
  Table& nt = next->tables[table];
  if (t.dynamic) {
    SR_RETURN_IF_ERROR(Merge(t, d, encoded.data(), &nt));
  } else {
    std::vector<size_t> order;
    SR_RETURN_IF_ERROR(SortedOrder(d.ids, d.num_rows, t.name, "the rows", &order));
    SR_RETURN_IF_ERROR(Patch(t, d, encoded.data(), &nt));
  }
  *out = std::move(next);
  return Status::Ok();
}

}  // namespace shardrec::serving
