// Checkpoints of fixed rows, the tables without keys (docs/checkpoint-format.md): a shard tensor
// is one record of its rows in place, and a load reads every saved record that overlaps a local
// shard tensor, so rows move to their new owners under any plan by their position. The keyed
// rows of dynamic tables are keyed_rows.h's; both see the collection through the storage seam.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "impl/checkpoint/copy.h"
#include "impl/checkpoint/format.h"
#include "impl/core/device.h"
#include "impl/core/status.h"
#include "impl/embedding/storage/table_storage.h"

namespace shardrec::checkpoint {

// A record to write and where its rows are: host memory, or a GPU collection's device (staged to
// the host chunk by chunk on their way to the file).
struct RowSource {
  Record rec;
  const uint8_t* data = nullptr;
  int64_t row_stride_bytes = 0;
  Device device;
};

// The record of shard tensor `t` of a fixed table (not a duplicate, not empty): every row of it.
RowSource FixedSource(const embedding::ShardTensor& t);

// A local shard tensor of a fixed table to fill, and the saved records that overlap it.
struct FixedRead {
  Target dst;
  Device device;                                   // where dst.data lives
  std::string what;                                // "table t1 weights rows 0..9", for messages
  std::vector<std::pair<size_t, size_t>> records;  // (file, record) indices in the manifest
};

// The reads of every local shard tensor of a fixed table, each fully covered by the checkpoint's
// records; the optimizer states of tables in `reset` go to `zero` instead (zeroed, not read).
// kCorrupt when the records do not cover a tensor exactly or a record's full shape differs from
// its table's.
Status PlanFixedReads(embedding::TableStorage& storage, const Manifest& m,
                      const std::set<std::string>& reset, std::vector<FixedRead>* reads,
                      std::vector<FixedRead>* zero);

}  // namespace shardrec::checkpoint
