// A checkpoint's table served from its files (tiered_open.h).
#include "impl/serving/tiered_open.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "impl/checkpoint/fs.h"
#include "impl/core/check.h"
#include "impl/serving/encode.h"
#include "impl/serving/tiered_pass.h"
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

// A quantized storage's refusals at open: every row encoded (and dropped), a block at a time, as
// the in-memory open encodes them.
class EncodeCheck final : public RowBlocks {
 public:
  EncodeCheck(const sharding::TableConfig& tc, Storage storage) : tc_(tc), storage_(storage) {}
  Status Take(int64_t r0, int64_t n, const float* rows) override {
    encoded_.resize(static_cast<size_t>(n) * RowBytes(storage_, tc_.dim));
    return EncodeRows(rows, n, tc_.dim, storage_, encoded_.data(),
                      "table " + tc_.name + " (the block from row " + std::to_string(r0) + ")");
  }

 private:
  const sharding::TableConfig& tc_;
  Storage storage_;
  std::vector<uint8_t> encoded_;
};

}  // namespace

Status OpenTieredTable(checkpoint::FileSystem& fs, const std::string& dir,
                       const checkpoint::Manifest& m, const sharding::TableConfig& tc,
                       Storage storage, uint64_t cache_bytes, Model* model) {
  if (tc.pooling == sharding::PoolingType::kNone)
    return Status::Unsupported("tiers: table ", tc.name,
                               " is a sequence table (pooling NONE); serving from the "
                               "checkpoint's files takes pooled tables only");
  if (tc.dynamic.enabled)
    return OpenTieredDynamicTable(fs, dir, m, tc, storage, cache_bytes, model);
  std::vector<DiskPiece> pieces;
  std::vector<std::unique_ptr<ReadableFile>> owned;  // per rank file with a piece
  std::vector<const ReadableFile*> files;            // per piece, to read it at open
  int64_t area = 0;
  for (const checkpoint::FileEntry& e : m.files) {
    const ReadableFile* file = nullptr;
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
        SR_RETURN_IF_ERROR(checkpoint::OpenRankFile(fs, path, e, &opened));
        file = opened.get();
        owned.push_back(std::move(opened));
      }
      area += rec.rows * rec.cols;
      pieces.push_back(DiskPiece{path, rec, e.is_store, e.store, e.size, {}});
      files.push_back(file);
    }
  }
  if (area != tc.rows * tc.dim)
    return Status::Corrupt("checkpoint ", dir, ": the records of table ", tc.name,
                           " weights cover ", area, " of its ", tc.rows * tc.dim, " elements");
  // Every record read once, a chunk at a time (tiered_pass.h): verified as the in-memory open
  // verifies while it reads, a rank file's units' checksums taken from the same bytes, and for
  // a quantized storage every row encoded, so a row it cannot hold is refused here and not at a
  // lookup.
  std::unique_ptr<RowBlocks> encode;
  if (IsEncodedStorage(storage)) encode = std::make_unique<EncodeCheck>(tc, storage);
  SR_RETURN_IF_ERROR(ReadPiecesOnce(
      files, pieces.data(), 0, tc.rows, tc.dim,
      std::max<int64_t>(1, (int64_t{4} << 20) / (int64_t{4} * tc.dim)), encode.get()));
  Table t;
  t.name = tc.name;
  t.rows = tc.rows;
  t.dim = tc.dim;
  t.pooling = static_cast<Pooling>(tc.pooling);
  t.features = tc.features;
  t.storage = storage;
  t.row_bytes = RowBytes(storage, tc.dim);
  files.clear();
  owned.clear();  // the verifying readers; lookups read through TieredReads
  std::unique_ptr<TieredReads> reads;
  SR_RETURN_IF_ERROR(TieredReads::Open(std::move(pieces), &reads));
  SR_RETURN_IF_ERROR(TieredRows::Create(tc.name, tc.rows, tc.dim, storage, std::move(reads), {},
                                        /*dynamic=*/false, cache_bytes, &t.tiered));
  model->tables.push_back(std::move(t));
  return Status::Ok();
}

}  // namespace shardrec::serving
