// A dynamic table of a checkpoint served from its files (tiered_open.h, OpenTieredDynamicTable):
// the ids in memory, the rows on disk. Its checks and its order of rows are the in-memory open's
// (open_checkpoint.cc, ReadDynamicTable), so that both serve the same bits for every id.
#include <algorithm>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "impl/checkpoint/fs.h"
#include "impl/checkpoint/record_copy.h"
#include "impl/core/check.h"
#include "impl/serving/encode.h"
#include "impl/serving/tiered_open.h"
#include "impl/serving/tiered_rows.h"

namespace shardrec::serving {
namespace {

using checkpoint::ReadableFile;
using checkpoint::Record;

// One saved row block: its ids record and its weights records (one per column shard), each with
// the file entry that holds it.
struct Block {
  const Record* ids = nullptr;
  size_t ids_file = 0;
  std::vector<std::pair<size_t, const Record*>> weights;
};

// The checkpoint's files, each opened once on first use (checked against the manifest).
class Opened {
 public:
  Opened(const std::string& dir, const checkpoint::Manifest& m)
      : dir_(dir), m_(m), files_(m.files.size()) {}
  std::string Path(size_t fi) const { return dir_ + "/" + m_.files[fi].name; }
  Status Get(size_t fi, const ReadableFile** out) {
    static const std::shared_ptr<checkpoint::FileSystem> fs = checkpoint::PosixFileSystem();
    if (!files_[fi])
      SR_RETURN_IF_ERROR(checkpoint::OpenRankFile(*fs, Path(fi), m_.files[fi], &files_[fi]));
    *out = files_[fi].get();
    return Status::Ok();
  }

 private:
  const std::string& dir_;
  const checkpoint::Manifest& m_;
  std::vector<std::unique_ptr<ReadableFile>> files_;
};

}  // namespace

Status OpenTieredDynamicTable(const std::string& dir, const checkpoint::Manifest& m,
                              const sharding::TableConfig& tc, Storage storage,
                              uint64_t cache_bytes, Model* model) {
  Opened files(dir, m);
  std::map<int64_t, Block> blocks;
  for (size_t fi = 0; fi < m.files.size(); ++fi) {
    for (const Record& rec : m.files[fi].records) {
      if (rec.table != tc.name) continue;
      Block& b = blocks[rec.row_offset];
      if (rec.tensor == "ids") {
        if (b.ids != nullptr)
          return Status::Corrupt("checkpoint file ", files.Path(fi), ": dynamic table ", tc.name,
                                 " has two ids records for the row block at row ", rec.row_offset);
        b.ids = &rec;
        b.ids_file = fi;
      } else if (rec.tensor == "weights") {
        b.weights.push_back({fi, &rec});
      }
    }
  }
  std::vector<int64_t> ids;          // in the blocks' order
  std::vector<int64_t> record_rows;  // of ids[i]: its row in the records (block offset + k)
  std::vector<DiskPiece> pieces;
  std::vector<uint8_t> buffer;
  std::vector<float> staging;
  std::vector<uint8_t> encoded;
  // Rows verified and encoded a block of about 4 MiB of fp32 at a time, as the in-memory open
  // reads them (its checksums and its encoder's refusals), without holding the table.
  const int64_t chunk = std::max<int64_t>(1, (int64_t{4} << 20) / (int64_t{4} * tc.dim));
  for (const auto& [offset, b] : blocks) {
    if (b.ids == nullptr) {
      if (!b.weights.empty())
        return Status::Corrupt("checkpoint: dynamic table ", tc.name, ": the row block at row ",
                               offset, " has weights but no ids record");
      continue;  // an empty block writes only its metadata
    }
    const Record& ir = *b.ids;
    const std::string ipath = files.Path(b.ids_file);
    if (ir.dtype != DType::kInt64 || ir.cols != 1 || ir.rows < 0)
      return Status::Corrupt("checkpoint file ", ipath, ": record ", ir.key,
                             " is not an I64 vector");
    const ReadableFile* f = nullptr;
    SR_RETURN_IF_ERROR(files.Get(b.ids_file, &f));
    const size_t first = ids.size();
    const auto n = static_cast<size_t>(ir.rows);
    try {
      ids.resize(first + n);
      record_rows.resize(first + n);
    } catch (const std::bad_alloc&) {
      return Status::OutOfMemory("table ", tc.name, ": the ids of ", first + n, " rows");
    }
    const checkpoint::Target id_dst{
        DType::kInt64, ir.row_offset, ir.col_offset, ir.rows, 1, ids.data() + first, 1};
    SR_RETURN_IF_ERROR(checkpoint::CopyOverlap(*f, ipath, ir, id_dst, &buffer));
    for (size_t k = 0; k < n; ++k) record_rows[first + k] = offset + static_cast<int64_t>(k);
    const checkpoint::Target block{DType::kFloat32, offset, 0, ir.rows, tc.dim, nullptr, tc.dim};
    int64_t area = 0;
    for (const auto& [wfi, wr] : b.weights) {
      if (wr->rows != ir.rows)
        return Status::Corrupt("checkpoint file ", files.Path(wfi), ": record ", wr->key, " has ",
                               wr->rows, " rows, its row block ", ir.rows, " ids");
      if (wr->row_offset != offset || wr->col_offset < 0 || wr->cols < 0 ||
          wr->col_offset + wr->cols > tc.dim)
        return Status::Corrupt("checkpoint file ", files.Path(wfi), ": record ", wr->key,
                               " lies outside its row block of table ", tc.name);
      area += checkpoint::OverlapArea(*wr, block);
      const checkpoint::FileEntry& e = m.files[wfi];
      pieces.push_back(DiskPiece{files.Path(wfi), *wr, e.is_store, e.store, e.size});
    }
    if (area != ir.rows * tc.dim)
      return Status::Corrupt("checkpoint: dynamic table ", tc.name,
                             ": the weights of the row block", " at row ", offset, " cover ", area,
                             " of its ", ir.rows * tc.dim, " elements");
    const uint64_t row_bytes = RowBytes(storage, tc.dim);
    for (int64_t r0 = 0; r0 < ir.rows; r0 += chunk) {
      const int64_t rn = std::min(chunk, ir.rows - r0);
      staging.assign(static_cast<size_t>(rn * tc.dim), 0.0f);
      encoded.resize(static_cast<size_t>(rn) * row_bytes);
      const checkpoint::Target dst{DType::kFloat32, offset + r0,    0,     rn,
                                   tc.dim,          staging.data(), tc.dim};
      for (const auto& [wfi, wr] : b.weights) {
        SR_RETURN_IF_ERROR(files.Get(wfi, &f));
        SR_RETURN_IF_ERROR(checkpoint::CopyOverlap(*f, files.Path(wfi), *wr, dst, &buffer));
      }
      for (int64_t k = 0; k < rn; ++k)
        SR_RETURN_IF_ERROR(EncodeRows(
            staging.data() + k * tc.dim, 1, tc.dim, storage, encoded.data() + k * row_bytes,
            "table " + tc.name + " id " +
                std::to_string(ids[first + static_cast<size_t>(r0 + k)])));
    }
  }
  // Rows in ascending id order, the in-memory open's, so a row number means the same there.
  std::vector<size_t> order(ids.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  auto d = std::make_shared<DynamicIds>();
  std::vector<int64_t> sorted_rows(ids.size());
  d->ids.resize(ids.size());
  for (size_t i = 0; i < order.size(); ++i) {
    d->ids[i] = ids[order[i]];
    sorted_rows[i] = record_rows[order[i]];
    if (i > 0 && d->ids[i] == d->ids[i - 1])
      return Status::Corrupt("checkpoint: dynamic table ", tc.name, " saves id ", d->ids[i],
                             " twice");
  }
  Table t;
  t.name = tc.name;
  t.rows = static_cast<int64_t>(d->ids.size());
  t.dim = tc.dim;
  t.pooling = static_cast<Pooling>(tc.pooling);
  t.features = tc.features;
  t.storage = storage;
  t.row_bytes = RowBytes(storage, tc.dim);
  SR_RETURN_IF_ERROR(IdIndex::Build(d->ids.data(), t.rows, t.name, &d->index));
  std::unique_ptr<TieredReads> reads;
  SR_RETURN_IF_ERROR(TieredReads::Open(std::move(pieces), &reads));
  SR_RETURN_IF_ERROR(TieredRows::Create(tc.name, t.rows, tc.dim, storage, std::move(reads),
                                        std::move(sorted_rows), /*dynamic=*/true, cache_bytes,
                                        &t.tiered));
  t.dynamic = std::move(d);
  model->tables.push_back(std::move(t));
  return Status::Ok();
}

}  // namespace shardrec::serving
