// Row quantization parameters (row_quant.h): read from the header every int8/int4 row starts
// with (impl/core/row_format.h, kQuantHeaderBytes: the scale, then the bias), or an FP8 row's
// (its scale alone; the bias is 0).
#include "impl/serving/row_quant.h"

#include <cstring>
#include <vector>

#include "impl/core/check.h"
#include "impl/serving/tiered_rows.h"

namespace shardrec::serving {

Status RowQuantization(const Model& m, const std::string& table, const int64_t* ids, size_t n,
                       float* scales, float* biases) {
  const Table* t = nullptr;
  for (const Table& x : m.tables)
    if (x.name == table) t = &x;
  if (t == nullptr) return Status::NotFound("no table named '", table, "'");
  if (!IsEncodedStorage(t->storage))
    return Status::InvalidArgument("table '", table, "' is served as ", StorageName(t->storage),
                                   ", which has no row scale (only int8, int4 and fp8 do)");
  const bool fp8 = t->storage == Storage::kFp8E4M3 || t->storage == Storage::kFp8E5M2;
  // Checked before anything is written.
  if (!t->dynamic)
    for (size_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= t->rows)
        return Status::InvalidArgument("ids[", i, "] = ", ids[i], " is not a row of table '", table,
                                       "' (", t->rows, " rows)");
  // An id of a dynamic table without a row reads the zero row after the live ones (scale 0,
  // bias 0).
  const auto row_of = [&](size_t i) {
    if (!t->dynamic) return ids[i];
    const int64_t found = t->dynamic->index->Find(ids[i]);
    return found >= 0 ? found : t->rows;
  };
  TieredRows::Scratch tiered;  // a table served from disk: its rows through the row cache
  if (t->tiered) {
    std::vector<int64_t> rows(n);
    for (size_t i = 0; i < n; ++i) rows[i] = row_of(i);
    SR_RETURN_IF_ERROR(t->tiered->Gather(rows.data(), n, &tiered));
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t row = row_of(i);
    const uint8_t* p =
        t->tiered ? tiered.rows.data() + static_cast<uint64_t>(tiered.local[i]) * t->row_bytes
                  : t->data + static_cast<uint64_t>(row) * t->row_bytes;
    std::memcpy(&scales[i], p, sizeof(float));
    if (biases != nullptr) {
      if (fp8)
        biases[i] = 0.0f;
      else
        std::memcpy(&biases[i], p + sizeof(float), sizeof(float));
    }
  }
  return Status::Ok();
}

}  // namespace shardrec::serving
