#include "impl/serving/checkpoint_blocks.h"

#include <algorithm>
#include <new>

#include "impl/checkpoint/record_copy.h"
#include "impl/core/check.h"

namespace shardrec::serving {

using checkpoint::ReadableFile;
using checkpoint::Record;

Status CheckpointFiles::Get(size_t fi, const ReadableFile** out) {
  if (!open_[fi])
    SR_RETURN_IF_ERROR(checkpoint::OpenRankFile(fs_, Path(fi), m_.files[fi], &open_[fi]));
  *out = open_[fi].get();
  return Status::Ok();
}

Status GroupDynamicBlocks(const CheckpointFiles& files, const checkpoint::Manifest& m,
                          const std::string& table, std::map<int64_t, DynamicBlock>* out) {
  std::map<int64_t, DynamicBlock>& blocks = *out;
  for (size_t fi = 0; fi < m.files.size(); ++fi) {
    for (const Record& rec : m.files[fi].records) {
      if (rec.table != table) continue;
      DynamicBlock& b = blocks[rec.row_offset];
      if (rec.tensor == "ids") {
        if (b.ids != nullptr)
          return Status::Corrupt("checkpoint file ", files.Path(fi), ": dynamic table ", table,
                                 " has two ids records for the row block at row ", rec.row_offset);
        b.ids = &rec;
        b.ids_file = fi;
      } else if (rec.tensor == "weights") {
        b.weights.push_back({fi, &rec});
      }
    }
  }
  return Status::Ok();
}

Status ReadBlockIds(CheckpointFiles& files, const std::string& table, int64_t offset,
                    const DynamicBlock& b, int64_t dim, std::vector<int64_t>* ids,
                    std::vector<uint8_t>* buffer) {
  if (b.ids == nullptr) {
    if (!b.weights.empty())
      return Status::Corrupt("checkpoint: dynamic table ", table, ": the row block at row ", offset,
                             " has weights but no ids record");
    return Status::Ok();  // an empty block writes only its metadata
  }
  const Record& ir = *b.ids;
  const std::string ipath = files.Path(b.ids_file);
  if (ir.dtype != DType::kInt64 || ir.cols != 1 || ir.rows < 0)
    return Status::Corrupt("checkpoint file ", ipath, ": record ", ir.key, " is not an I64 vector");
  const checkpoint::Target block{DType::kFloat32, offset, 0, ir.rows, dim, nullptr, dim};
  int64_t area = 0;
  for (const auto& [wfi, wr] : b.weights) {
    if (wr->rows != ir.rows)
      return Status::Corrupt("checkpoint file ", files.Path(wfi), ": record ", wr->key, " has ",
                             wr->rows, " rows, its row block ", ir.rows, " ids");
    if (wr->row_offset != offset || wr->col_offset < 0 || wr->cols < 0 ||
        wr->col_offset + wr->cols > dim)
      return Status::Corrupt("checkpoint file ", files.Path(wfi), ": record ", wr->key,
                             " lies outside its row block of table ", table);
    area += checkpoint::OverlapArea(*wr, block);
  }
  if (area != ir.rows * dim)
    return Status::Corrupt("checkpoint: dynamic table ", table, ": the weights of the row block",
                           " at row ", offset, " cover ", area, " of its ", ir.rows * dim,
                           " elements");
  const ReadableFile* f = nullptr;
  SR_RETURN_IF_ERROR(files.Get(b.ids_file, &f));
  const size_t first = ids->size();
  try {
    ids->resize(first + static_cast<size_t>(ir.rows));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("table ", table, ": the ids of ", first + ir.rows, " rows");
  }
  const checkpoint::Target id_dst{
      DType::kInt64, ir.row_offset, ir.col_offset, ir.rows, 1, ids->data() + first, 1};
  return checkpoint::CopyOverlap(*f, ipath, ir, id_dst, buffer);
}

Status SortDynamicIds(const std::string& table, const std::vector<int64_t>& ids,
                      std::vector<size_t>* order, std::vector<int64_t>* sorted) {
  order->resize(ids.size());
  for (size_t i = 0; i < order->size(); ++i) (*order)[i] = i;
  std::sort(order->begin(), order->end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  sorted->resize(ids.size());
  for (size_t i = 0; i < order->size(); ++i) {
    (*sorted)[i] = ids[(*order)[i]];
    if (i > 0 && (*sorted)[i] == (*sorted)[i - 1])
      return Status::Corrupt("checkpoint: dynamic table ", table, " saves id ", (*sorted)[i],
                             " twice");
  }
  return Status::Ok();
}

}  // namespace shardrec::serving
