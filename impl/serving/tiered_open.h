// Opening a checkpoint's table for serving from its files (OpenOptions::tiers): the table's
// weights records are checked against the manifest and read once, streamed in bounded chunks
// (tiered_pass.h), and the table is served through a row cache (tiered_rows.h) instead of being
// read into memory. A dynamic table's ids are read and indexed in memory (tiered_dynamic_open.cc);
// its rows stay in the files.
#pragma once

#include <cstdint>
#include <string>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/fs.h"
#include "impl/core/status.h"
#include "impl/serving/model.h"
#include "impl/sharding/types.h"

namespace shardrec::serving {

// Adds table `tc` of the checkpoint in `dir` (manifest `m`, its files read through `fs` at open)
// to `model`, stored as `storage` (a resolved storage) and served through a row cache of
// `cache_bytes`. Reads each byte of the table's weights records once (tiered_pass.h): verifies
// every chunk (kCorrupt naming the file and the record, as the in-memory open), takes a rank
// file's unit checksums from the same bytes and, for int8/int4/fp8, checks that every row can be
// quantized (kInvalidArgument naming the row, as the in-memory open). kUnsupported naming the
// table for a sequence (NONE pooling) table. Memory: the cache, a rank file's unit checksums
// (tiered_sums.h: 4 bytes per 512), one chunk of a record and, for a quantized storage, a block
// of about 4 MiB of fp32 rows (and the rows of the chunks reaching past it) while reading; a
// dynamic table also its ids (OpenTieredDynamicTable). Lookups read the files through their own
// descriptors (tiered_reads.h), not through `fs`.
Status OpenTieredTable(checkpoint::FileSystem& fs, const std::string& dir,
                       const checkpoint::Manifest& m, const sharding::TableConfig& tc,
                       Storage storage, uint64_t cache_bytes, Model* model);

// OpenTieredTable of a dynamic table: every row block's ids record is read, checked and indexed
// as the in-memory open does (kCorrupt with its messages: two ids records of one block, weights
// without ids, an id saved twice, weights not covering their block), every row is read once,
// verified and encoded in blocks of about 4 MiB of fp32 rows (kInvalidArgument for a row the
// storage cannot hold, as in memory) while its units' checksums are taken, and the rows stay in
// the files. Memory per live id: its id (8 bytes), its records' row (8) and the id index (32 to
// 64), besides the cache.
Status OpenTieredDynamicTable(checkpoint::FileSystem& fs, const std::string& dir,
                              const checkpoint::Manifest& m, const sharding::TableConfig& tc,
                              Storage storage, uint64_t cache_bytes, Model* model);

}  // namespace shardrec::serving
