// The dynamic-table part of a replica sync (docs/dynamic-tables.md, "2D merge"): every replica
// gathers the rows, optimizer states and metadata of every replica's dynamic shards, then each
// rebuilds its shards from the same merged data, so the replicas agree on keys, slots and values.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/embedding/collection.h"
#include "impl/embedding/dynamic/merge.h"

namespace shardrec::replica {

class DynamicMerge {
 public:
  // Collective over `replica` (two all-gathers): packs this replica's dynamic shards and gathers
  // every replica's. Changes nothing. kInvalidArgument, on every replica, when the replicas'
  // dynamic shards differ in tables, blocks, capacities, dtypes or optimizer states (different
  // plans); whatever the collectives return. `weights_only`: each replica keeps its own optimizer
  // state of the ids it held (the holders' average for the others).
  Status Gather(embedding::EmbeddingCollection& coll, comm::Communicator& replica,
                bool weights_only);
  // Rebuilds every local dynamic shard from the gathered rows (memory only: cannot fail); slots
  // beyond the merged rows, the zero row among them, are cleared.
  void Commit(embedding::EmbeddingCollection& coll);
  // Rows of the union left out for want of slots, summed over the local dynamic shards.
  int64_t evicted() const { return evicted_; }

 private:
  // One local dynamic shard: where its tensors are and how wide their rows.
  struct Local {
    int32_t local = 0;  // index into Layout::local
    std::vector<embedding::dynamic::MergeTensor> tensors;
    std::vector<uint8_t*> data;  // per tensor: slot 0
    std::vector<size_t> stride;  // per tensor: bytes between slots
  };
  std::vector<Local> locals_;
  std::vector<uint8_t> gathered_;
  std::vector<size_t> sizes_;  // bytes per replica
  int self_ = 0;
  int64_t evicted_ = 0;
};

}  // namespace shardrec::replica
