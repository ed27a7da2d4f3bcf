// The copy of the part of a stored record that overlaps a destination block (chunked,
// checksum-verified, dtype-converted): what load and the serving reader share, free of the
// communicator so that a reader outside training can use it. The chunks themselves are read and
// verified by record_chunks.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/record_chunks.h"
#include "impl/core/status.h"

namespace shardrec::checkpoint {

// A block of a destination tensor in host memory, placed like a Record.
struct Target {
  DType dtype = DType::kFloat32;
  int64_t row_offset = 0, col_offset = 0;
  int64_t rows = 0, cols = 0;
  void* data = nullptr;
  int64_t row_stride = 0;  // elements
  // The caller's live memory rather than scratch: each chunk is verified in a buffer before any
  // of its bytes land, so a corrupt chunk changes nothing there.
  bool live = false;
};

// The rows and columns (global) where `rec` and `dst` overlap; false when they do not.
bool Overlap(const Record& rec, const Target& dst, int64_t* r0, int64_t* r1, int64_t* c0,
             int64_t* c1);
int64_t OverlapArea(const Record& rec, const Target& dst);

// Reads the chunks of `rec` that hold the overlap, verifies each against its checksum (when the
// record has them) and writes the overlap into `dst`, converting between fp32/fp16/bf16.
// kCorrupt naming `path` and the record when a chunk's checksum fails or the file is short.
Status CopyOverlap(const ReadableFile& file, const std::string& path, const Record& rec,
                   const Target& dst, std::vector<uint8_t>* buffer);

// CopyOverlap's copy of one chunk already read and verified: the part of the record-local rows
// [lo, hi) of `rec`, stored at `data`, that overlaps `dst`, converted into dst's type (which
// must be one CopyOverlap accepts for the record). kCorrupt naming `path`, the record and the
// row for an FP8 row whose scale no encoder writes.
Status CopyChunk(const std::string& path, const Record& rec, int64_t lo, int64_t hi,
                 const uint8_t* data, const Target& dst);

// Reads the chunks of `rec` that CopyOverlap would read for `dst`, in order, and hands each to
// `visitor` once verified (VisitChunks; kCorrupt as CopyOverlap), checksums or not.
Status VisitOverlap(const ReadableFile& file, const std::string& path, const Record& rec,
                    const Target& dst, std::vector<uint8_t>* buffer, ChunkVisitor* visitor);

// Reads and verifies (without copying) the chunks of `rec` that CopyOverlap would read for
// `dst`; kCorrupt as CopyOverlap. Records without checksums pass, except a store snapshot's,
// which are read (the store checks each row's record).
Status VerifyOverlap(const ReadableFile& file, const std::string& path, const Record& rec,
                     const Target& dst, std::vector<uint8_t>* buffer);

}  // namespace shardrec::checkpoint
