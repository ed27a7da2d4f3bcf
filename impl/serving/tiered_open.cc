// A checkpoint's table served from its files (tiered_open.h).
#include "impl/serving/tiered_open.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "impl/checkpoint/fs.h"
#include "impl/checkpoint/record_copy.h"
#include "impl/core/check.h"
#include "impl/serving/encode.h"
#include "impl/serving/tiered_rows.h"

namespace shardrec::serving {
namespace {

using checkpoint::ReadableFile;
using checkpoint::Record;

// The weight records a tier reads: float elements, or an FP8 table's stored rows (TieredRows
// decodes them).
bool FloatDType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || IsFp8DType(t);
}

}  // namespace

Status OpenTieredTable(const std::string& dir, const checkpoint::Manifest& m,
                       const sharding::TableConfig& tc, Storage storage, uint64_t cache_bytes,
                       Model* model) {
  if (tc.pooling == sharding::PoolingType::kNone)
    return Status::Unsupported("tiers: table ", tc.name,
                               " is a sequence table (pooling NONE); serving from the "
                               "checkpoint's files takes pooled tables only");
  if (tc.dynamic.enabled) return OpenTieredDynamicTable(dir, m, tc, storage, cache_bytes, model);
  static const std::shared_ptr<checkpoint::FileSystem> fs = checkpoint::PosixFileSystem();
  std::vector<DiskPiece> pieces;
  std::vector<std::shared_ptr<const ReadableFile>> files;  // per piece, to verify it
  int64_t area = 0;
  for (const checkpoint::FileEntry& e : m.files) {
    std::shared_ptr<const ReadableFile> file;
    const std::string path = dir + "/" + e.name;
    for (const Record& rec : e.records) {
      if (rec.table != tc.name || rec.tensor != "weights") continue;
      if (rec.full_rows != tc.rows || rec.full_cols != tc.dim || rec.vector ||
          !FloatDType(rec.dtype))
        return Status::Corrupt("checkpoint file ", path, ": record ", rec.key, " belongs to a ",
                               rec.full_rows, " x ", rec.full_cols, " ", DTypeName(rec.dtype),
                               " tensor, the plan says table ", tc.name, " is ", tc.rows, " x ",
                               tc.dim);
      if (rec.row_offset < 0 || rec.col_offset < 0 || rec.rows < 0 || rec.cols < 0 ||
          rec.row_offset + rec.rows > tc.rows || rec.col_offset + rec.cols > tc.dim ||
          rec.nbytes != static_cast<uint64_t>(rec.rows) * rec.row_bytes())
        return Status::Corrupt("checkpoint file ", path, ": record ", rec.key,
                               " lies outside table ", tc.name);
      if (!file) {
        std::unique_ptr<ReadableFile> opened;
        SR_RETURN_IF_ERROR(checkpoint::OpenRankFile(*fs, path, e, &opened));
        file = std::move(opened);
      }
      area += rec.rows * rec.cols;
      pieces.push_back(DiskPiece{path, rec, e.is_store, e.store, e.size});
      files.push_back(file);
    }
  }
  if (area != tc.rows * tc.dim)
    return Status::Corrupt("checkpoint ", dir, ": the records of table ", tc.name,
                           " weights cover ", area, " of its ", tc.rows * tc.dim, " elements");
  // Verified once, a bounded block at a time, as the in-memory open verifies while it reads: a
  // rank file's records by TieredReads::Open below (which keeps their units' checksums from the
  // bytes it verifies), a snapshot's here. Quantized storages also encode every row, so a row
  // they cannot hold is refused here and not at a lookup.
  checkpoint::Target whole;
  whole.rows = tc.rows;
  whole.cols = tc.dim;
  std::vector<uint8_t> buffer;
  if (!IsEncodedStorage(storage)) {
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].is_store)
        SR_RETURN_IF_ERROR(
            checkpoint::VerifyOverlap(*files[i], pieces[i].path, pieces[i].rec, whole, &buffer));
  } else {
    const int64_t block = std::max<int64_t>(1, (int64_t{4} << 20) / (int64_t{4} * tc.dim));
    std::vector<float> staging;
    std::vector<uint8_t> encoded(static_cast<size_t>(block) * RowBytes(storage, tc.dim));
    for (int64_t r0 = 0; r0 < tc.rows; r0 += block) {
      const int64_t n = std::min(block, tc.rows - r0);
      staging.assign(static_cast<size_t>(n * tc.dim), 0.0f);
      const checkpoint::Target dst{DType::kFloat32, r0, 0, n, tc.dim, staging.data(), tc.dim};
      for (size_t i = 0; i < pieces.size(); ++i)
        SR_RETURN_IF_ERROR(
            checkpoint::CopyOverlap(*files[i], pieces[i].path, pieces[i].rec, dst, &buffer));
      SR_RETURN_IF_ERROR(
          EncodeRows(staging.data(), n, tc.dim, storage, encoded.data(),
                     "table " + tc.name + " (the block from row " + std::to_string(r0) + ")"));
    }
  }
  Table t;
  t.name = tc.name;
  t.rows = tc.rows;
  t.dim = tc.dim;
  t.pooling = static_cast<Pooling>(tc.pooling);
  t.features = tc.features;
  t.storage = storage;
  t.row_bytes = RowBytes(storage, tc.dim);
  files.clear();  // the verifying readers; lookups read through TieredReads
  std::unique_ptr<TieredReads> reads;
  SR_RETURN_IF_ERROR(TieredReads::Open(std::move(pieces), &reads));
  SR_RETURN_IF_ERROR(TieredRows::Create(tc.name, tc.rows, tc.dim, storage, std::move(reads), {},
                                        /*dynamic=*/false, cache_bytes, &t.tiered));
  model->tables.push_back(std::move(t));
  return Status::Ok();
}

}  // namespace shardrec::serving
