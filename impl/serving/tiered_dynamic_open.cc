// A dynamic table of a checkpoint served from its files (tiered_open.h, OpenTieredDynamicTable):
// the ids in memory, the rows on disk. Its checks and its order of rows are the in-memory open's
// (both through checkpoint_blocks.h), so that both serve the same bits for every id.
#include <algorithm>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "impl/checkpoint/fs.h"
#include "impl/core/check.h"
#include "impl/serving/checkpoint_blocks.h"
#include "impl/serving/encode.h"
#include "impl/serving/tiered_open.h"
#include "impl/serving/tiered_pass.h"
#include "impl/serving/tiered_rows.h"

namespace shardrec::serving {
namespace {

using checkpoint::ReadableFile;

// Each row of a block encoded alone, named by its id, as the in-memory open refuses it.
class EncodeCheck final : public RowBlocks {
 public:
  // `ids`: the ids of the block's rows, which start at row `offset`.
  EncodeCheck(const sharding::TableConfig& tc, Storage storage, int64_t offset, const int64_t* ids)
      : tc_(tc),
        storage_(storage),
        offset_(offset),
        ids_(ids),
        encoded_(RowBytes(storage, tc.dim)) {}
  Status Take(int64_t r0, int64_t n, const float* rows) override {
    for (int64_t k = 0; k < n; ++k)
      SR_RETURN_IF_ERROR(
          EncodeRows(rows + k * tc_.dim, 1, tc_.dim, storage_, encoded_.data(),
                     "table " + tc_.name + " id " + std::to_string(ids_[r0 - offset_ + k])));
    return Status::Ok();
  }

 private:
  const sharding::TableConfig& tc_;
  Storage storage_;
  int64_t offset_;
  const int64_t* ids_;
  std::vector<uint8_t> encoded_;
};

}  // namespace

Status OpenTieredDynamicTable(checkpoint::FileSystem& fs, const std::string& dir,
                              const checkpoint::Manifest& m, const sharding::TableConfig& tc,
                              Storage storage, uint64_t cache_bytes, Model* model) {
  CheckpointFiles files(fs, dir, m);
  std::map<int64_t, DynamicBlock> blocks;
  SR_RETURN_IF_ERROR(GroupDynamicBlocks(files, m, tc.name, &blocks));
  std::vector<int64_t> ids;          // in the blocks' order
  std::vector<int64_t> record_rows;  // of ids[i]: its row in the records (block offset + k)
  std::vector<DiskPiece> pieces;
  std::vector<uint8_t> buffer;
  // Rows verified and encoded a block of about 4 MiB of fp32 at a time, as the in-memory open
  // reads them (its checksums and its encoder's refusals), without holding the table; every
  // weights record read once (tiered_pass.h), its units' checksums taken from the same bytes.
  const int64_t chunk = std::max<int64_t>(1, (int64_t{4} << 20) / (int64_t{4} * tc.dim));
  for (const auto& [offset, b] : blocks) {
    const size_t first = ids.size();
    SR_RETURN_IF_ERROR(ReadBlockIds(files, tc.name, offset, b, tc.dim, &ids, &buffer));
    if (ids.size() == first) continue;
    const int64_t rows = static_cast<int64_t>(ids.size() - first);
    try {
      record_rows.resize(ids.size());
    } catch (const std::bad_alloc&) {
      return Status::OutOfMemory("table ", tc.name, ": the ids of ", ids.size(), " rows");
    }
    for (int64_t k = 0; k < rows; ++k) record_rows[first + static_cast<size_t>(k)] = offset + k;
    const size_t at = pieces.size();
    std::vector<const ReadableFile*> readers;
    for (const auto& [wfi, wr] : b.weights) {
      const checkpoint::FileEntry& e = m.files[wfi];
      const ReadableFile* f = nullptr;
      SR_RETURN_IF_ERROR(files.Get(wfi, &f));
      readers.push_back(f);
      pieces.push_back(DiskPiece{files.Path(wfi), *wr, e.is_store, e.store, e.size, {}});
    }
    EncodeCheck check(tc, storage, offset, ids.data() + first);
    SR_RETURN_IF_ERROR(
        ReadPiecesOnce(readers, pieces.data() + at, offset, offset + rows, tc.dim, chunk, &check));
  }
  // Rows in ascending id order, the in-memory open's, so a row number means the same there.
  std::vector<size_t> order;
  auto d = std::make_shared<DynamicIds>();
  SR_RETURN_IF_ERROR(SortDynamicIds(tc.name, ids, &order, &d->ids));
  std::vector<int64_t> sorted_rows(ids.size());
  for (size_t i = 0; i < order.size(); ++i) sorted_rows[i] = record_rows[order[i]];
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
