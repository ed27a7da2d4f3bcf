// Fixed rows in checkpoints (fixed_rows.h).
#include "impl/checkpoint/fixed_rows.h"

#include <algorithm>

#include "impl/core/element.h"
#include "impl/core/fp8.h"

namespace shardrec::checkpoint {

using embedding::ShardTensor;

Status ReadTieredChunk(embedding::TableStorage& storage, const ShardTensor& t, int64_t lo,
                       int64_t hi, std::vector<float>* out) {
  out->resize(static_cast<size_t>((hi - lo) * t.cols));
  return storage.ReadTieredRows(t.local, t.state, lo, hi - lo, out->data());
}

RowSource FixedSource(embedding::TableStorage& storage, const ShardTensor& t) {
  RowSource s;
  Record& r = s.rec;
  r.table = t.table_name;
  r.tensor = t.name;
  r.dtype = t.dtype;
  r.vector = t.kind == embedding::ParamKind::kOptimizerState && t.full_cols == 1 && t.cols == 1 &&
             t.name != "weights";
  r.full_rows = t.full_rows;
  r.full_cols = t.full_cols;
  r.row_offset = t.row_offset;
  r.col_offset = t.col_offset;
  r.rows = t.rows;
  r.cols = t.cols;
  r.key = StrCat(t.table_name, "/", t.name, "/r", t.row_offset, "_c", t.col_offset);
  s.data = static_cast<const uint8_t*>(t.data);
  s.row_stride_bytes = t.row_stride * static_cast<int64_t>(DTypeSize(t.dtype));
  s.device = t.device;
  const DType table_dtype = storage.plan().tables[static_cast<size_t>(t.table)].dtype;
  if (t.streamed && t.state < 0 && IsFp8DType(table_dtype)) {
    // FP8 weights (handed out as fp32 rows, collection_storage.cc) are stored as their rows'
    // bytes (format.h's FP8 records): each decoded row encodes to the bytes it was decoded from.
    r.dtype = table_dtype;
    s.read = [&storage, t, table_dtype, floats = std::vector<float>()](
                 int64_t lo, int64_t hi, uint8_t* out) mutable -> Status {
      SR_RETURN_IF_ERROR(ReadTieredChunk(storage, t, lo, hi, &floats));
      const Fp8Kind kind = Fp8KindOf(table_dtype);
      for (int64_t k = 0; k < hi - lo; ++k)
        EncodeFp8Row(kind, floats.data() + k * t.cols, t.cols, out + k * Fp8RowBytes(t.cols));
      return Status::Ok();
    };
  } else if (t.streamed) {
    // The chunk as fp32, stored in the tensor's dtype: 16-bit weights widen exactly, so the
    // record holds the bits an in-memory table's would.
    s.read = [&storage, t, floats = std::vector<float>()](int64_t lo, int64_t hi,
                                                          uint8_t* out) mutable -> Status {
      SR_RETURN_IF_ERROR(ReadTieredChunk(storage, t, lo, hi, &floats));
      const size_t es = DTypeSize(t.dtype);
      for (size_t k = 0; k < floats.size(); ++k) StoreElement(t.dtype, floats[k], out + k * es);
      return Status::Ok();
    };
  }
  return s;
}

Status WriteTieredRead(embedding::TableStorage& storage, const FixedRead& rd,
                       const std::vector<OverlapSource>& sources, std::vector<uint8_t>* buffer) {
  const Target& d = rd.dst;
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / (d.cols * 4));
  std::vector<float> rows;
  for (int64_t lo = 0; lo < d.rows; lo += chunk) {
    const int64_t hi = std::min(d.rows, lo + chunk);
    rows.assign(static_cast<size_t>((hi - lo) * d.cols), 0.0f);
    const Target part{DType::kFloat32, d.row_offset + lo, d.col_offset, hi - lo,
                      d.cols,          rows.data(),       d.cols};
    for (const OverlapSource& src : sources)
      SR_RETURN_IF_ERROR(CopyOverlap(*src.file, src.path, *src.rec, part, buffer));
    SR_RETURN_IF_ERROR(storage.WriteTieredRows(rd.local, rd.state, lo, hi - lo, rows.data()));
  }
  return Status::Ok();
}

Status PlanFixedReads(embedding::TableStorage& storage, const Manifest& m,
                      const std::set<std::string>& reset, std::vector<FixedRead>* reads,
                      std::vector<FixedRead>* zero) {
  for (const ShardTensor& t : storage.ShardTensors()) {
    if (storage.layout().tables[t.table].dynamic) continue;  // rows by id: KeyedLoad
    FixedRead rd;
    rd.dst = {t.dtype, t.row_offset, t.col_offset, t.rows, t.cols, t.data, t.row_stride};
    rd.device = t.device;
    rd.streamed = t.streamed;
    rd.local = t.local;
    rd.state = t.state;
    if (t.rows == 0 || t.cols == 0) continue;
    if (t.kind != embedding::ParamKind::kWeights && reset.count(t.table_name)) {
      zero->push_back(rd);
      continue;
    }
    rd.what = StrCat("table ", t.table_name, " ", t.name, " rows ", t.row_offset, "..",
                     t.row_offset + t.rows - 1, " columns ", t.col_offset, "..",
                     t.col_offset + t.cols - 1);
    int64_t covered = 0;
    for (size_t f = 0; f < m.files.size(); ++f) {
      for (size_t r = 0; r < m.files[f].records.size(); ++r) {
        const Record& rec = m.files[f].records[r];
        if (rec.table != t.table_name || rec.tensor != t.name) continue;
        if (rec.full_rows != t.full_rows || rec.full_cols != t.full_cols)
          return Status::Corrupt(m.files[f].name, ": record ", rec.key,
                                 " has a full shape that does not match its table");
        const int64_t area = OverlapArea(rec, rd.dst);
        if (area == 0) continue;
        covered += area;
        rd.records.push_back({f, r});
      }
    }
    if (covered != t.rows * t.cols)
      return Status::Corrupt("the checkpoint's records do not cover ", rd.what, " exactly (",
                             covered, " of ", t.rows * t.cols, " elements)");
    reads->push_back(std::move(rd));
  }
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
