// The storage seam: what checkpoints (impl/checkpoint) and 2D replicas (impl/replica) see of an
// embedding collection's tables, instead of the collection itself. It hands out the plan, the
// layout, the communicator, the parameter views (param_views.h), the step counter, the optimizer
// configs and states, and exports and imports the per-shard state of keyed rows (a dynamic
// table's ids and row metadata) without handing out the tables that hold them; what a merge or a
// delta needs of those tables it runs itself. docs/embedding-engine.md, "The storage seam".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/status.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/param_views.h"
#include "impl/embedding/tiered/tier_stats.h"
#include "impl/optim/optimizer.h"
#include "impl/sharding/types.h"

namespace shardrec::embedding {

namespace dynamic {
struct Delta;
struct TableStats;
class ReplicaMerge;
}  // namespace dynamic

struct StateInfo {
  std::string name;
  bool row_wise = false;  // one value per row, else one per element
};

// The state of one keyed-rows shard (a dynamic table's local shard) besides its rows: the rows
// live in slots [0, size) of the shard's tensors (ShardTensors), and the vectors hold the
// metadata of slots [first, first + ids.size()) in slot order.
struct KeyedRows {
  int64_t forwards = 0;  // training forwards counted (last_seen is relative to it)
  int64_t size = 0;      // live rows
  int64_t slots = 0;     // capacity (the zero row is no slot)
  std::vector<int64_t> ids, last_seen;
  std::vector<uint32_t> counts;
  std::vector<double> scores;    // SCORE eviction only; empty otherwise
  bool scored = false;           // the shard holds rows and keeps their scores (SCORE eviction)
  std::vector<uint16_t> sketch;  // admission counters; exported with the chunk at slot 0 only
};

// How ImportKeyedRows replaces a shard's keyed rows (every row is replaced either way; the
// caller writes the rows' weights and optimizer state into the shard tensors).
enum class KeyedImport {
  // A checkpoint load: delta tracking sees a replaced shard (shard.h, Restore), and every
  // score is taken (zeros where the checkpoint had none).
  kReplace,
  // A table import: held and added rows together, not a replacement for delta tracking
  // (RestoreMerged); scores are taken only when given.
  kUpdate,
};

// Owned by its collection and valid as long as it (EmbeddingCollection::storage()). Not
// thread-safe: one call at a time, and none while the collection runs a step (the C API's
// exclusive use guarantees both). Calls are local unless said collective.
class TableStorage {
 public:
  virtual ~TableStorage() = default;

  // The model: the plan and layout the tables were made for, the communicator of their ranks
  // (the sharding group on a 2D mesh), each table's optimizer and the states it keeps.
  virtual const sharding::Plan& plan() const = 0;
  virtual const Layout& layout() const = 0;
  virtual comm::Communicator& comm() = 0;
  virtual const optim::OptimizerConfig& table_optimizer(int32_t table) const = 0;
  // kNotFound for an unknown table.
  virtual Status TableStates(const std::string& table, std::vector<StateInfo>* out) const = 0;
  // Ranks of the data-parallel tables' group (the world on a 2D mesh, by default).
  virtual int data_parallel_size() const = 0;

  // Parameter views (param_views.h): the arenas for 2D sync, the per-shard tensors for
  // checkpoints. Valid until the collection is destroyed.
  virtual std::vector<ParamBuffer> ParamBuffers() = 0;
  virtual std::vector<ShardTensor> ShardTensors() = 0;
  // Collective: a full table's fp32 weights / one optimizer state, gathered on every rank
  // (EmbeddingCollection::GetWeights, GetState).
  virtual Status GetWeights(const std::string& table, float* out, size_t len) = 0;
  virtual Status GetState(const std::string& table, const std::string& state, float* out,
                          size_t len) = 0;

  // The step counter and the step in flight: a checkpoint or a sync refuses to run while an
  // input distribution is pending, and first settles what stream-ordered calls left queued
  // (EmbeddingCollection::Synchronize).
  virtual int64_t num_steps() const = 0;
  virtual Status SetNumSteps(int64_t steps) = 0;
  virtual bool input_dist_pending() const = 0;
  virtual Status Synchronize() = 0;

  // Keyed rows, per local shard `local` (an index into Layout::local). ExportKeyedRows: false
  // when the shard holds no keyed rows (a fixed table's); else *out gets the shard's counters
  // and the metadata of slots [first, first + count) clipped to its live rows, so a caller
  // bounds each chunk.
  virtual bool ExportKeyedRows(int32_t local, int64_t first, int64_t count,
                               KeyedRows* out) const = 0;
  // Replaces a keyed shard's rows by `rows`: forwards, and the metadata of slots [0, ids.size())
  // (at most its slots, distinct ids: the caller checked both); size, slots and scored are not
  // read. Memory only: cannot fail.
  virtual void ImportKeyedRows(int32_t local, const KeyedRows& rows, KeyedImport how) = 0;
  // This rank's part of keyed table `table`; false when it is not keyed.
  virtual bool KeyedStats(int32_t table, dynamic::TableStats* out) const = 0;
  // Delta export (dynamic/delta.h): marks table `table`'s local shards; collective over comm(),
  // the whole table's delta since the marks.
  virtual Status MarkDelta(int32_t table) = 0;
  virtual Status GatherDelta(int32_t table, dynamic::Delta* out) = 0;
  // A 2D sync's merge by key (dynamic/replica_merge.h) of the keyed shards of the tables not in
  // `leave_alone` (per table): collective over `replica`, changing nothing; then the commit,
  // memory only.
  virtual Status GatherReplicaRows(dynamic::ReplicaMerge* merge, comm::Communicator& replica,
                                   bool weights_only, const std::vector<bool>& leave_alone) = 0;
  virtual void CommitReplicaRows(dynamic::ReplicaMerge* merge) = 0;

  // Tiered tables (docs/disk-tier.md): the name of the first table this rank holds tiered, or
  // null. Their rows are in caches and stores, not in the arenas: ParamBuffers holds their cache
  // slots, so 2D sync refuses them (RefuseTiered); ShardTensors marks their tensors `tiered`
  // (the plan's rows, no data), which checkpoints stream through the two calls below.
  virtual const std::string* TieredTable() const = 0;
  // Rows [first, first + count) (shard-local) of tensor `state` (-1: the weights) of tiered
  // local shard `local`, as fp32 in ReadShard's format (tiered/tables.h): one value per row for
  // a row-wise state, else the shard's columns. Cached rows from their slots, the others from
  // the write-back queue, the store or their initial values; the caches do not change. The
  // store's errors (kIo, kCorrupt).
  virtual Status ReadTieredRows(int32_t local, int32_t state, int64_t first, int64_t count,
                                float* out) = 0;
  // Replaces those rows (16-bit weights rounded to nearest even, so a value read from a
  // checkpoint of that dtype keeps its bits): cached rows in place, the others through the
  // write-back queue. Errors: the queue's (a failed write-back).
  virtual Status WriteTieredRows(int32_t local, int32_t state, int64_t first, int64_t count,
                                 const float* in) = 0;
  // Makes the store of tiered local shard `local` hold every row's current value (a dynamic
  // shard's: its live slots, [0, size)) and snapshots it into `dir`, which must not exist
  // (TieredTables::SnapshotShard): what a checkpoint names instead of copying the rows.
  // `usable` is asked between chunks of rows, and its error (an abort) ends the call.
  // kUnsupported where the shard cannot be snapshotted (this default), which a save answers by
  // copying the rows.
  virtual Status SnapshotTieredShard(int32_t local, const std::string& dir,
                                     const std::function<Status()>& usable) {
    (void)local;
    (void)dir;
    (void)usable;
    return Status::Unsupported("this storage cannot snapshot a tiered shard");
  }
  // This rank's counters of tiered table `table`; false when it holds no tiered shard of it.
  virtual bool TierStats(int32_t table, tiered::TierStats* out) const = 0;
};

// kUnsupported naming `what` and the table when `storage` holds a tiered table.
inline Status RefuseTiered(const TableStorage& storage, const char* what) {
  const std::string* t = storage.TieredTable();
  if (t == nullptr) return Status::Ok();
  return Status::Unsupported(what, " does not take tiered tables yet (table '", *t,
                             "'; docs/disk-tier.md, Limits)");
}

}  // namespace shardrec::embedding
