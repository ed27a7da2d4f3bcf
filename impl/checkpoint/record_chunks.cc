// The verified chunks of a checkpoint record (record_chunks.h).
#include "impl/checkpoint/record_chunks.h"

#include <algorithm>

#include "impl/core/check.h"

namespace shardrec::checkpoint {

int64_t ChunkCount(const Record& rec) {
  return rec.rows <= 0 ? 0 : (rec.rows + rec.chunk_rows - 1) / rec.chunk_rows;
}

Status ReadChunk(const ReadableFile& file, const std::string& path, const Record& rec, int64_t c,
                 uint8_t* out) {
  const uint64_t row_bytes = rec.row_bytes();
  const int64_t lo = c * rec.chunk_rows;
  const int64_t hi = std::min(rec.rows, lo + rec.chunk_rows);
  const size_t n = static_cast<size_t>(hi - lo) * row_bytes;
  SR_RETURN_IF_ERROR(file.ReadAt(rec.offset + static_cast<uint64_t>(lo) * row_bytes, out, n));
  if (!rec.checksums.empty() && Checksum(out, n) != rec.checksums[static_cast<size_t>(c)])
    return Status::Corrupt(path, ": record ", rec.key, " is corrupt (checksum of rows ",
                           rec.row_offset + lo, "..", rec.row_offset + hi - 1,
                           " does not match the manifest)");
  return Status::Ok();
}

Status VisitChunks(const ReadableFile& file, const std::string& path, const Record& rec,
                   int64_t first, int64_t end, std::vector<uint8_t>* buffer,
                   ChunkVisitor* visitor) {
  for (int64_t c = first; c < end; ++c) {
    const int64_t lo = c * rec.chunk_rows;
    const int64_t hi = std::min(rec.rows, lo + rec.chunk_rows);
    buffer->resize(static_cast<size_t>(hi - lo) * rec.row_bytes());
    SR_RETURN_IF_ERROR(ReadChunk(file, path, rec, c, buffer->data()));
    SR_RETURN_IF_ERROR(visitor->Visit(rec, lo, hi, buffer->data()));
  }
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
