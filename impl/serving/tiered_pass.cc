// The one pass over a served tiered table's weights records at open (tiered_pass.h).
#include "impl/serving/tiered_pass.h"

#include <algorithm>
#include <memory>

#include "impl/checkpoint/record_copy.h"
#include "impl/core/check.h"

namespace shardrec::serving {
namespace {

using checkpoint::Record;

// The rows read so far and not yet handed over: global rows [begin, end), fp32, full width.
struct Window {
  int64_t begin = 0, end = 0;
  int32_t dim = 0;
  std::vector<float> rows;

  void Reach(int64_t r) {
    if (r <= end) return;
    rows.resize(static_cast<size_t>((r - begin) * dim), 0.0f);
    end = r;
  }
  // Drops rows [begin, r) (handed over).
  void DropBefore(int64_t r) {
    rows.erase(rows.begin(), rows.begin() + static_cast<ptrdiff_t>((r - begin) * dim));
    begin = r;
  }
};

// What one piece's chunks go to: its sums (a rank file's) and the window (when rows are wanted).
class PieceVisitor final : public checkpoint::ChunkVisitor {
 public:
  PieceVisitor(DiskPiece* piece, Window* window) : piece_(piece), window_(window) {
    if (!piece->is_store) sums_ = std::make_unique<RecordSums::Builder>(piece->rec, &piece->sums);
  }

  Status Visit(const Record& rec, int64_t lo, int64_t hi, const uint8_t* data) override {
    if (sums_) SR_RETURN_IF_ERROR(sums_->Visit(rec, lo, hi, data));
    if (!window_) return Status::Ok();
    const checkpoint::Target dst{
        DType::kFloat32, window_->begin,       0,           window_->end - window_->begin,
        window_->dim,    window_->rows.data(), window_->dim};
    return checkpoint::CopyChunk(piece_->path, rec, lo, hi, data, dst);
  }

  void Finish() const {
    if (sums_) sums_->Finish();
  }

 private:
  DiskPiece* piece_;
  Window* window_;
  std::unique_ptr<RecordSums::Builder> sums_;
};

}  // namespace

Status ReadPiecesOnce(const std::vector<const checkpoint::ReadableFile*>& files, DiskPiece* pieces,
                      int64_t row0, int64_t row1, int32_t dim, int64_t block_rows,
                      RowBlocks* rows) {
  const size_t n = files.size();
  Window window{row0, row0, dim, {}};
  std::vector<PieceVisitor> visitors;
  visitors.reserve(n);
  for (size_t i = 0; i < n; ++i) visitors.emplace_back(&pieces[i], rows ? &window : nullptr);
  std::vector<int64_t> next(n, 0);  // per piece: its next chunk
  std::vector<uint8_t> buffer;
  for (int64_t b0 = row0; b0 < row1; b0 += block_rows) {
    const int64_t b1 = std::min(row1, b0 + block_rows);
    // Every chunk that starts before b1: the rows below b1 are then complete in every column
    // (a chunk holding one of them starts at or before it), and those of the chunks that run
    // past b1 wait in the window for the next block.
    for (size_t i = 0; i < n; ++i) {
      const Record& rec = pieces[i].rec;
      const int64_t count = checkpoint::ChunkCount(rec);
      int64_t end = next[i];
      while (end < count && rec.row_offset + end * rec.chunk_rows < b1) ++end;
      if (end == next[i]) continue;
      if (rows)
        window.Reach(std::min(rec.row_offset + rec.rows, rec.row_offset + end * rec.chunk_rows));
      SR_RETURN_IF_ERROR(checkpoint::VisitChunks(*files[i], pieces[i].path, rec, next[i], end,
                                                 &buffer, &visitors[i]));
      next[i] = end;
    }
    if (!rows) continue;
    window.Reach(b1);
    SR_RETURN_IF_ERROR(rows->Take(b0, b1 - b0, window.rows.data()));
    window.DropBefore(b1);
  }
  for (size_t i = 0; i < n; ++i) {
    // The caller placed every record inside [row0, row1), so every chunk was read above.
    SR_CHECK(next[i] == checkpoint::ChunkCount(pieces[i].rec));
    visitors[i].Finish();
  }
  return Status::Ok();
}

}  // namespace shardrec::serving
