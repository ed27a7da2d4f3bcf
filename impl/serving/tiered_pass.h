// The one pass over a served tiered table's weights records at open (docs/disk-tier.md,
// "Serving"): every chunk of every record is read once, verified against the manifest, and handed
// to whatever open derives from it, so no byte of a rank file is read twice: a rank file's
// record gives its units' checksums (RecordSums::Builder), and where open must also see whole
// rows (a quantized storage's refusals, a dynamic table's) the chunks are converted to fp32 and
// handed over in blocks of whole rows.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/checkpoint/fs.h"
#include "impl/core/status.h"
#include "impl/serving/tiered_reads.h"

namespace shardrec::serving {

// Receives a served table's rows at open, a block of whole rows at a time, in row order.
class RowBlocks {
 public:
  virtual ~RowBlocks() = default;
  // Rows [r0, r0 + n) of the table (the records' global rows), `dim` fp32 values each, every
  // column of them already read from the records that hold it.
  virtual Status Take(int64_t r0, int64_t n, const float* rows) = 0;
};

// Reads the `files.size()` weights records `pieces` (pieces[i] open as files[i], a store
// snapshot's through its snapshot file) once each. They hold rows [row0, row1) x dim together.
// Every chunk is verified (kCorrupt naming the file and the record, the file's own errors); a
// rank file's piece gets its units' checksums (pieces[i].sums); and with `rows` not null, the
// rows go to `rows` as fp32, `block_rows` at a time. The records are read interleaved by rows
// (each record's chunks in order), so that a block is complete when it is handed over: memory is
// a block and a chunk of each record whose chunk reaches past it.
Status ReadPiecesOnce(const std::vector<const checkpoint::ReadableFile*>& files, DiskPiece* pieces,
                      int64_t row0, int64_t row1, int32_t dim, int64_t block_rows, RowBlocks* rows);

}  // namespace shardrec::serving
