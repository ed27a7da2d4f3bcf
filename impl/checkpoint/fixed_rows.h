// Checkpoints of fixed rows, the tables without keys (docs/checkpoint-format.md): a shard tensor
// is one record of its rows in place, and a load reads every saved record that overlaps a local
// shard tensor, so rows move to their new owners under any plan by their position. The keyed
// rows of dynamic tables are keyed_rows.h's; both see the collection through the storage seam.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "impl/checkpoint/copy.h"
#include "impl/checkpoint/format.h"
#include "impl/checkpoint/staged_copy.h"
#include "impl/core/device.h"
#include "impl/core/status.h"
#include "impl/embedding/storage/table_storage.h"

namespace shardrec::checkpoint {

// A record to write and where its rows are: host memory, a GPU collection's device (staged to
// the host chunk by chunk on their way to the file), or a reader (`read`, when set; data is
// then null) that packs record rows [lo, hi) into `out` (row_bytes each).
struct RowSource {
  Record rec;
  const uint8_t* data = nullptr;
  int64_t row_stride_bytes = 0;
  Device device;
  std::function<Status(int64_t lo, int64_t hi, uint8_t* out)> read;
};

// The record of shard tensor `t` of a fixed table (not a duplicate, not empty): every row of it.
// A tiered tensor's rows are read through `storage` (which must outlive the source) chunk by
// chunk as the record is written.
RowSource FixedSource(embedding::TableStorage& storage, const embedding::ShardTensor& t);

// Rows [lo, hi) (shard-local) of tiered shard tensor `t` as fp32 (TableStorage::ReadTieredRows)
// and back, a chunk at a time: what checkpoints stream a tiered shard through.
Status ReadTieredChunk(embedding::TableStorage& storage, const embedding::ShardTensor& t,
                       int64_t lo, int64_t hi, std::vector<float>* out);

// A local shard tensor of a fixed table to fill, and the saved records that overlap it.
struct FixedRead {
  Target dst;
  Device device;                                   // where dst.data lives
  std::string what;                                // "table t1 weights rows 0..9", for messages
  std::vector<std::pair<size_t, size_t>> records;  // (file, record) indices in the manifest
  // A streamed shard tensor (ShardTensor::streamed, dst.data null): written chunk by chunk by
  // WriteTieredRead.
  bool streamed = false;
  int32_t local = 0, state = -1;  // its local shard and state (ShardTensor's)
};

// Writes tiered read `rd` a chunk of about 1 MiB of fp32 rows at a time: each chunk gets the
// overlap of `sources` (CopyOverlap: verified, converted to fp32; the sources cover it, as
// PlanFixedReads checked), or zeros when `sources` is empty, and goes to the shard through
// TableStorage::WriteTieredRows. A failure leaves the chunks before it written.
Status WriteTieredRead(embedding::TableStorage& storage, const FixedRead& rd,
                       const std::vector<OverlapSource>& sources, std::vector<uint8_t>* buffer);

// The reads of every local shard tensor of a fixed table, each fully covered by the checkpoint's
// records; the optimizer states of tables in `reset` go to `zero` instead (zeroed, not read).
// kCorrupt when the records do not cover a tensor exactly or a record's full shape differs from
// its table's.
Status PlanFixedReads(embedding::TableStorage& storage, const Manifest& m,
                      const std::set<std::string>& reset, std::vector<FixedRead>* reads,
                      std::vector<FixedRead>* zero);

}  // namespace shardrec::checkpoint
