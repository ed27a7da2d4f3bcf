// Staged loads into device memory (staged_copy.h).
#include "impl/checkpoint/staged_copy.h"

#include <algorithm>

#include "impl/core/check.h"

namespace shardrec::checkpoint {

Status CopyOverlapsToDevice(const Device& device, const Target& dst,
                            const std::vector<OverlapSource>& sources,
                            embedding::HostStaging* staging, std::vector<uint8_t>* buffer) {
  SR_CHECK(dst.row_stride == dst.cols);
  if (dst.rows == 0 || dst.cols == 0) return Status::Ok();
  const uint64_t row_bytes = static_cast<uint64_t>(dst.cols) * DTypeSize(dst.dtype);
  const int64_t block_rows =
      std::max<int64_t>(1, static_cast<int64_t>(kStageBytes / std::max<uint64_t>(1, row_bytes)));
  SR_RETURN_IF_ERROR(staging->Reserve(device, static_cast<size_t>(std::min(block_rows, dst.rows)) *
                                                  static_cast<size_t>(row_bytes)));
  for (int64_t r0 = 0; r0 < dst.rows; r0 += block_rows) {
    const int64_t n = std::min(block_rows, dst.rows - r0);
    const size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(row_bytes);
    uint8_t* device_rows = static_cast<uint8_t*>(dst.data) + static_cast<size_t>(r0) * row_bytes;
    Target block = dst;
    block.row_offset = dst.row_offset + r0;
    block.rows = n;
    block.data = staging->data();
    int64_t covered = 0;
    for (const OverlapSource& s : sources) covered += OverlapArea(*s.rec, block);
    // Sources do not overlap each other (the loaders check coverage), so a full count means
    // every element is written; otherwise the block starts from the device's values.
    if (covered != n * dst.cols)
      SR_RETURN_IF_ERROR(embedding::CopyToHost(device, block.data, device_rows, bytes));
    for (const OverlapSource& s : sources)
      SR_RETURN_IF_ERROR(CopyOverlap(*s.file, s.path, *s.rec, block, buffer));
    SR_RETURN_IF_ERROR(embedding::CopyToDevice(device, device_rows, block.data, bytes));
  }
  return Status::Ok();
}

Status ZeroOnDevice(const Device& device, const Target& dst) {
  SR_CHECK(dst.row_stride == dst.cols);
  return embedding::FillDevice(
      device, dst.data, 0,
      static_cast<size_t>(dst.rows) * static_cast<size_t>(dst.cols) * DTypeSize(dst.dtype));
}

}  // namespace shardrec::checkpoint
