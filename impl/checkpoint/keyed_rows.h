// Checkpoints of keyed rows, the dynamic tables' (docs/checkpoint-format.md, "Dynamic tables"):
// each row block's live rows are saved as records keyed by id, and a load hashes every saved id
// to its row block under the new plan, so rows follow their ids to new owners at any world size.
// The rows' metadata comes from and goes to the storage seam (TableStorage::ExportKeyedRows,
// ImportKeyedRows); their weights and states are the shard tensors' first rows.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "impl/checkpoint/fixed_rows.h"
#include "impl/checkpoint/format.h"
#include "impl/core/status.h"
#include "impl/embedding/storage/table_storage.h"

namespace shardrec::checkpoint {

// The records of one shard tensor `t` of a dynamic table (not a duplicate): its live rows (none
// when the shard is empty), and for a shard's weights at column 0 also the block's ids, last-seen
// forwards, counts, admission counters and its "dynamic_meta" record. Values that are not rows of
// the shard (metadata widened to 64 bits) live in `owned`, which must outlive the write. A tiered
// shard's rows are read through `storage` while they are written (RowSource::read).
void AppendKeyedSources(embedding::TableStorage& storage, const embedding::ShardTensor& t,
                        std::deque<std::vector<uint8_t>>* owned, std::vector<RowSource>* out);

// The rows of the checkpoint's dynamic tables that this rank's dynamic shards will hold, read and
// verified before anything changes (a load is all-or-nothing for dynamic tables in every mode).
class KeyedLoad {
 public:
  KeyedLoad();
  ~KeyedLoad();

  // The (file, record) indices of every record of a dynamic table in `m`, to be opened.
  static void Needed(const Manifest& m, std::vector<std::pair<size_t, size_t>>* out);

  // Reads every saved block of each dynamic table with a local shard, keeps the ids whose row
  // block under this collection's plan is a local one, and stages their rows, optimizer states
  // (not for tables in `reset`) and metadata. Changes nothing. kInvalidArgument when a local
  // shard would receive more rows than it has slots; kCorrupt for missing or inconsistent
  // records or a failed checksum; kIo.
  Status Read(embedding::TableStorage& storage, const Manifest& m,
              const std::vector<std::unique_ptr<ReadableFile>>& files, const std::string& dir,
              const std::set<std::string>& reset);

  // Replaces every local dynamic shard's rows with the staged ones: memory copies, which cannot
  // fail, except for tiered shards (tiered()), whose rows go through the tier's write path (its
  // write-back queue's errors; the collection is then partly loaded).
  Status Commit(embedding::TableStorage& storage);
  // Some staged shard is tiered (docs/disk-tier.md): Commit can fail.
  bool tiered() const { return tiered_; }

 private:
  struct Shard;
  std::vector<Shard> shards_;
  bool tiered_ = false;
};

}  // namespace shardrec::checkpoint
