// Rank agreement and the overlap copy of checkpoint records (copy.h).
#include "impl/checkpoint/copy.h"

#include <algorithm>
#include <cstring>

#include "impl/comm/agree.h"
#include "impl/core/check.h"
#include "impl/core/element.h"
#include "impl/core/fp8.h"

namespace shardrec::checkpoint {

Status Agree(comm::Communicator& comm, const Status& local, const char* what) {
  int64_t failed = -1;
  SR_RETURN_IF_ERROR(comm::FindRefusingRank(comm, !local.ok(), &failed));
  if (failed < 0) return Status::Ok();
  // The failing rank's code and message reach every rank, so each reports the same cause.
  const auto root = static_cast<int>(failed);
  int64_t head[2] = {static_cast<int64_t>(local.code()),
                     static_cast<int64_t>(local.message().size())};
  SR_RETURN_IF_ERROR(comm.Broadcast(head, 2, DType::kInt64, root));
  std::string msg = local.message();
  msg.resize(static_cast<size_t>(head[1]));
  SR_RETURN_IF_ERROR(comm.Broadcast(msg.data(), msg.size(), DType::kUInt8, root));
  if (!local.ok()) return local;
  return Status(static_cast<Code>(head[0]), StrCat("rank ", root, " failed ", what, ": ", msg));
}

bool Overlap(const Record& rec, const Target& dst, int64_t* r0, int64_t* r1, int64_t* c0,
             int64_t* c1) {
  *r0 = std::max(rec.row_offset, dst.row_offset);
  *r1 = std::min(rec.row_offset + rec.rows, dst.row_offset + dst.rows);
  *c0 = std::max(rec.col_offset, dst.col_offset);
  *c1 = std::min(rec.col_offset + rec.cols, dst.col_offset + dst.cols);
  return *r0 < *r1 && *c0 < *c1;
}

int64_t OverlapArea(const Record& rec, const Target& dst) {
  int64_t r0, r1, c0, c1;
  if (!Overlap(rec, dst, &r0, &r1, &c0, &c1)) return 0;
  return (r1 - r0) * (c1 - c0);
}

namespace {

class StoppingFile final : public ReadableFile {
 public:
  StoppingFile(std::unique_ptr<ReadableFile> file, const comm::Communicator& comm)
      : file_(std::move(file)), comm_(comm) {}
  uint64_t size() const override { return file_->size(); }
  Status ReadAt(uint64_t offset, void* out, size_t n) const override {
    SR_RETURN_IF_ERROR(comm::UsableNow(comm_));
    return file_->ReadAt(offset, out, n);
  }

 private:
  std::unique_ptr<ReadableFile> file_;
  const comm::Communicator& comm_;
};

}  // namespace

std::unique_ptr<ReadableFile> StopOnAbort(std::unique_ptr<ReadableFile> file,
                                          const comm::Communicator& comm) {
  return std::make_unique<StoppingFile>(std::move(file), comm);
}

namespace {

bool Convertible(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// Decodes FP8 row `src` (a record's stored row: scale, then `cols` codes) into `out[cols]`;
// kCorrupt when its scale is not one an encoder writes (a damaged file, were the checksums
// absent or matched by a crafted manifest).
Status DecodeStoredRow(DType dtype, const uint8_t* src, int64_t cols, float* out,
                       const std::string& path, const Record& rec, int64_t row) {
  float scale;
  std::memcpy(&scale, src, sizeof(scale));
  if (!IsValidFp8Scale(scale))
    return Status::Corrupt(path, ": record ", rec.key, " row ", row, " has scale ", scale,
                           ", not a power of two an FP8 row may carry");
  DecodeFp8Row(Fp8KindOf(dtype), src, cols, out);
  return Status::Ok();
}

}  // namespace

Status CopyChunk(const std::string& path, const Record& rec, int64_t lo, int64_t hi,
                 const uint8_t* data, const Target& dst) {
  int64_t r0, r1, c0, c1;
  if (!Overlap(rec, dst, &r0, &r1, &c0, &c1)) return Status::Ok();
  const bool fp8 = IsFp8DType(rec.dtype);
  const uint64_t row_bytes = rec.row_bytes();
  std::vector<float> decoded(fp8 ? static_cast<size_t>(rec.cols) : 0);
  const size_t src_es = DTypeSize(rec.dtype);
  const size_t dst_es = DTypeSize(dst.dtype);
  const int64_t a = std::max(r0, rec.row_offset + lo);
  const int64_t b = std::min(r1, rec.row_offset + hi);
  for (int64_t r = a; r < b; ++r) {
    const uint8_t* row = data + static_cast<size_t>(r - rec.row_offset - lo) * row_bytes;
    uint8_t* out = static_cast<uint8_t*>(dst.data) +
                   (static_cast<size_t>(r - dst.row_offset) * dst.row_stride +
                    static_cast<size_t>(c0 - dst.col_offset)) *
                       dst_es;
    if (fp8) {
      SR_RETURN_IF_ERROR(DecodeStoredRow(rec.dtype, row, rec.cols, decoded.data(), path, rec, r));
      for (int64_t k = 0; k < c1 - c0; ++k)
        StoreElement(dst.dtype, decoded[static_cast<size_t>(c0 - rec.col_offset + k)],
                     out + k * dst_es);
      continue;
    }
    const uint8_t* src = row + static_cast<size_t>(c0 - rec.col_offset) * src_es;
    if (rec.dtype == dst.dtype) {
      std::memcpy(out, src, static_cast<size_t>(c1 - c0) * dst_es);
    } else {
      for (int64_t k = 0; k < c1 - c0; ++k)
        StoreElement(dst.dtype, LoadElement(rec.dtype, src + k * src_es), out + k * dst_es);
    }
  }
  return Status::Ok();
}

Status CopyOverlap(const ReadableFile& file, const std::string& path, const Record& rec,
                   const Target& dst, std::vector<uint8_t>* buffer) {
  int64_t r0, r1, c0, c1;
  if (!Overlap(rec, dst, &r0, &r1, &c0, &c1)) return Status::Ok();
  // An FP8 record (format.h) decodes into any float destination (exactly into fp32; fp16 and
  // bf16 round the decoded values to nearest even); FP8 tables take their rows as fp32 and
  // encode them again, which gives back the stored bytes.
  if (IsFp8DType(rec.dtype)
          ? !Convertible(dst.dtype)
          : rec.dtype != dst.dtype && !(Convertible(rec.dtype) && Convertible(dst.dtype)))
    return Status::InvalidArgument(path, ": record ", rec.key, " is ", DTypeName(rec.dtype),
                                   ", which cannot be loaded into ", DTypeName(dst.dtype));
  const uint64_t row_bytes = rec.row_bytes();
  const int64_t first = (r0 - rec.row_offset) / rec.chunk_rows;
  const int64_t last = (r1 - 1 - rec.row_offset) / rec.chunk_rows;
  for (int64_t c = first; c <= last; ++c) {
    const int64_t lo = c * rec.chunk_rows;  // record-local rows of this chunk
    const int64_t hi = std::min(rec.rows, lo + rec.chunk_rows);
    // Whole chunk into whole scratch rows of the same type: read it in place (one copy instead
    // of two; the checksum runs on data still in cache).
    const bool in_place = !dst.live && rec.dtype == dst.dtype && c0 == rec.col_offset &&
                          c1 == rec.col_offset + rec.cols && dst.cols == rec.cols &&
                          dst.row_stride == dst.cols && rec.row_offset + lo >= r0 &&
                          rec.row_offset + hi <= r1;
    if (in_place) {
      SR_RETURN_IF_ERROR(
          ReadChunk(file, path, rec, c,
                    static_cast<uint8_t*>(dst.data) +
                        static_cast<size_t>(rec.row_offset + lo - dst.row_offset) * row_bytes));
      continue;
    }
    buffer->resize(static_cast<size_t>(hi - lo) * row_bytes);
    SR_RETURN_IF_ERROR(ReadChunk(file, path, rec, c, buffer->data()));
    SR_RETURN_IF_ERROR(CopyChunk(path, rec, lo, hi, buffer->data(), dst));
  }
  return Status::Ok();
}

namespace {

// VerifyOverlap's visitor: the chunks were checked when they were read.
class NoVisit final : public ChunkVisitor {
 public:
  Status Visit(const Record&, int64_t, int64_t, const uint8_t*) override { return Status::Ok(); }
};

}  // namespace

Status VisitOverlap(const ReadableFile& file, const std::string& path, const Record& rec,
                    const Target& dst, std::vector<uint8_t>* buffer, ChunkVisitor* visitor) {
  int64_t r0, r1, c0, c1;
  if (!Overlap(rec, dst, &r0, &r1, &c0, &c1)) return Status::Ok();
  return VisitChunks(file, path, rec, (r0 - rec.row_offset) / rec.chunk_rows,
                     (r1 - 1 - rec.row_offset) / rec.chunk_rows + 1, buffer, visitor);
}

Status VerifyOverlap(const ReadableFile& file, const std::string& path, const Record& rec,
                     const Target& dst, std::vector<uint8_t>* buffer) {
  // A store snapshot's record has no chunk checksums: reading it checks each row's store record.
  if (rec.checksums.empty() && rec.store_offset < 0) return Status::Ok();
  NoVisit none;
  return VisitOverlap(file, path, rec, dst, buffer, &none);
}

}  // namespace shardrec::checkpoint
