// The dynamic-table part of a replica sync (docs/dynamic-tables.md, "2D merge"): every replica
// gathers the rows, optimizer states and metadata of every replica's dynamic shards (after the
// first merge, only of the ids some replica changed since the last one), then each rebuilds its
// shards from the same merged data, so the replicas agree on keys, slots and values.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/embedding/dynamic/merge.h"
#include "impl/embedding/dynamic/tables.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/param_views.h"

namespace shardrec::embedding::dynamic {

// Reached through the storage seam (TableStorage::GatherReplicaRows, CommitReplicaRows), which
// holds the tables; the replica sync keeps one from sync to sync so its buffers are reused.
class ReplicaMerge {
 public:
  // Collective over `replica`: packs this replica's dynamic shards and gathers every replica's.
  // Changes nothing. When every replica has tracked its shards since the last merge (and, unless
  // `weights_only`, that merge wrote the optimizer states too) and the replicas changed fewer
  // than half as many ids as they hold rows, only the rows of the ids some replica changed since
  // are gathered, and the rows no replica changed are taken from this
  // replica's own shard; a digest of those rows' metadata checks that every replica holds them
  // alike, and when one does not (a sync that failed on some replicas only) every row is gathered
  // instead. Two all-gathers when every row is gathered, four when only the changed ones are (five
  // when the digests differ). kInvalidArgument, on every replica, when the replicas' dynamic
  // shards differ in tables, blocks, capacities, dtypes or optimizer states (different plans);
  // whatever the collectives return. `weights_only`: each replica keeps its own optimizer state of
  // the ids it held (the holders' average for the others).
  // `tensors` are the collection's shard tensors (host memory), `leave_alone` per table those the
  // sync leaves alone (their copies are the same on every replica already).
  Status Gather(const Layout& layout, const std::vector<ShardTensor>& tensors,
                const DynamicTables& tables, const std::vector<bool>& leave_alone,
                comm::Communicator& replica, bool weights_only);
  // Rebuilds every local dynamic shard from the gathered rows (memory only: cannot fail); slots
  // beyond the merged rows, the zero row among them, are cleared. Each shard then tracks its
  // changes until the next merge.
  void Commit(const Layout& layout, DynamicTables& tables);
  // Rows of the union left out for want of slots, summed over the local dynamic shards.
  int64_t evicted() const { return evicted_; }
  // Bytes this replica sent in the gathers (its rows and metadata); what the sync stats count.
  size_t sent_bytes() const { return sent_bytes_; }
  // Collectives the last Gather issued.
  int collectives() const { return collectives_; }
  // Whether the last Gather gathered only the changed rows.
  bool incremental() const { return incremental_; }

 private:
  // One local dynamic shard: where its tensors are and how wide their rows.
  struct Local {
    int32_t local = 0;  // index into Layout::local
    std::vector<MergeTensor> tensors;
    std::vector<uint8_t*> data;  // per tensor: slot 0
    std::vector<size_t> stride;  // per tensor: bytes between slots
    // Incremental gathers: the ids any replica changed since the last merge (ascending), and
    // the slots of this replica's rows that no replica changed (ascending ids).
    std::vector<int64_t> changed;
    std::vector<int32_t> clean_slots;
  };
  // Collective: every replica's changed ids (`mine`: per shard its count, then its ids;
  // `lengths`: each replica's length of that), into each Local's `changed` (their union).
  Status GatherChanged(const std::vector<int64_t>& mine, const std::vector<size_t>& lengths,
                       comm::Communicator& replica);
  // Collective: the changed ids, then the digests of the rows no replica changed; when they agree,
  // the rows of the changed ids (incremental_ set); otherwise nothing more (the caller gathers
  // every row).
  Status GatherIncremental(const std::vector<const DynamicShard*>& shards,
                           const std::vector<int64_t>& changed,
                           const std::vector<size_t>& changed_lengths, comm::Communicator& replica);
  // `l`'s clean_slots: the slots of `shard` whose ids are not in l->changed, in the ids' order.
  void FindClean(const DynamicShard& shard, Local* l) const;
  // The bytes Pack writes when it packs every live row.
  size_t FullBytes(const std::vector<const DynamicShard*>& shards) const;
  // This replica's contribution into *out: per local shard i, its rows at the slots rows_of(i)
  // lists.
  template <typename Slots>
  void Pack(const std::vector<const DynamicShard*>& shards, Slots&& rows_of,
            std::vector<uint8_t>* out) const;
  // Collective: every replica's `mine` (replica r's of sizes[r] bytes), into gathered_.
  Status GatherPayload(const std::vector<uint8_t>& mine, const std::vector<size_t>& sizes,
                       comm::Communicator& replica);

  std::vector<Local> locals_;
  MergedShard merged_;                    // Commit's, kept: its buffers are reused
  std::vector<uint8_t> mine_, gathered_;  // this replica's contribution, everyone's
  std::vector<size_t> sizes_;             // bytes per replica
  int self_ = 0;
  int replicas_ = 0;
  bool weights_only_ = false;
  bool incremental_ = false;
  size_t sent_bytes_ = 0;
  int collectives_ = 0;
  int64_t evicted_ = 0;
};

}  // namespace shardrec::embedding::dynamic
