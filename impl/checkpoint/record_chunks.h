// Reading a record's chunks (ChunkRows rows each, the unit of the manifest's checksums), each
// verified against its checksum before anything sees its bytes: the one reader under the load's
// overlap copy and verification (record_copy.h) and the serving open's single pass over a rank
// file (serving/tiered_open.cc), which derives everything it keeps from the chunks it is handed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/fs.h"
#include "impl/core/status.h"

namespace shardrec::checkpoint {

// Receives a record's chunks once they are verified, in the order they are read.
class ChunkVisitor {
 public:
  virtual ~ChunkVisitor() = default;
  // `data` holds the record-local rows [lo, hi) of `rec` as stored (rec.row_bytes() each), valid
  // during the call. An error ends the reading and is returned as it is.
  virtual Status Visit(const Record& rec, int64_t lo, int64_t hi, const uint8_t* data) = 0;
};

// How many chunks `rec` has (0 for a record without rows).
int64_t ChunkCount(const Record& rec);

// Reads chunk `c` of `rec` into `out` (its rows' bytes) and checks it against the record's
// checksum when it has them. kCorrupt naming `path`, the record and the rows for a checksum that
// does not match; the file's errors (kIo, kCorrupt for a file that ends early) as they are.
Status ReadChunk(const ReadableFile& file, const std::string& path, const Record& rec, int64_t c,
                 uint8_t* out);

// Reads chunks [first, end) of `rec` in order, through `buffer` (one chunk), and hands each to
// `visitor` once it is verified (ReadChunk, and its errors); nothing of a failing chunk reaches
// the visitor.
Status VisitChunks(const ReadableFile& file, const std::string& path, const Record& rec,
                   int64_t first, int64_t end, std::vector<uint8_t>* buffer, ChunkVisitor* visitor);

}  // namespace shardrec::checkpoint
