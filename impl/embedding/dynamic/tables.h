// The dynamic tables of one rank's part of a collection: a DynamicShard per local shard of a
// dynamic table, and the step that turns the ids those shards received into slots before the
// lookup (after the input exchange, so after the agreement on bad input).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "impl/core/exec.h"
#include "impl/core/host_memory.h"
#include "impl/core/status.h"
#include "impl/embedding/dynamic/shard.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/param_store.h"

namespace shardrec::embedding::dynamic {

// This rank's part of one dynamic table. Column shards of one row block hold the same keys and
// are counted once; a data-parallel table's copies are counted once, on rank 0 of the collection
// (the other ranks report only their metadata_bytes).
struct TableStats {
  int64_t size = 0;
  int64_t capacity = 0;
  StepCounts last;
  StepCounts total;
  size_t metadata_bytes = 0;  // every local shard's index, slot metadata and sketch
};

class DynamicTables {
 public:
  // Claims from the host's available memory the metadata (index, per-slot records, admission
  // counts) of one DynamicShard per local shard of a dynamic table of `layout` (which must
  // outlive this): kOutOfMemory, with nothing allocated, where it does not fit (Linux would
  // otherwise end the process while writing it). The claim is held until Build, so the weights'
  // own claim in between counts it: neither is written before both fit.
  Status Init(const Layout& layout);
  // Writes the empty shards Init claimed, and gives the claim back (their pages now show).
  void Build();
  bool empty() const { return shards_.empty(); }
  // A training forward's translation of `rb` (distributed, unpacked on the host): the zero rows
  // are cleared (the last backward may have trained them), then every run of a dynamic shard has
  // its ids replaced by slots; a new row's weights come from the counter generator keyed by
  // (seed, table, id, column) and its optimizer state is cleared.
  // Shards are independent (their own ids, runs and rows), so they translate in parallel on
  // `ctx`; each one's decisions stay those of a sequential walk. Data-parallel tables are left
  // to dp_agree.h (here and in Lookup).
  void Translate(const ExecContext& ctx, RoutedBatch& rb, ParamStore& params, uint64_t seed);
  // An evaluation forward's translation (DynamicShard::Lookup) of `rb`: the zero rows are cleared
  // as in Translate, every id becomes its slot or the zero row, and no shard changes.
  void Lookup(const ExecContext& ctx, RoutedBatch& rb, ParamStore& params);
  // The caller's scores for table `table` (DynamicShard::SetScores on each of its local shards);
  // returns how many entries named a row held here (column shards of one block counted once).
  // A data-parallel table's copies must stay the same, so its entries that name a row of this
  // rank's copy are only recorded here (pending scores, below) and set on every copy by the next
  // training forward's agreement (dp_agree.h); the count is of those entries.
  int64_t SetScores(int32_t table, std::span<const int64_t> ids, std::span<const double> scores);
  // This rank's part of table `table`; false when it is not dynamic.
  bool Stats(int32_t table, TableStats* out) const;
  // The shard of local shard `local` (an index into Layout::local); null when it is not dynamic.
  const DynamicShard* Shard(int32_t local) const;
  DynamicShard* Shard(int32_t local) {
    return const_cast<DynamicShard*>(std::as_const(*this).Shard(local));
  }

  // What data-parallel tables keep between calls (dp_agree.h): per table the (id, score) entries
  // given on this rank since the last training forward, in call order, and this rank's gather
  // block of the forward in progress (built when its size is agreed, sent by the gather).
  struct DataParallel {
    std::map<int32_t, std::vector<std::pair<int64_t, double>>> pending_scores;
    std::vector<int64_t> block;
    bool block_ready = false;
    struct Distinct {  // scratch of the block's distinct-id count, kept to reuse its memory
      std::vector<int32_t> table;
      std::vector<std::pair<int64_t, int64_t>> runs;  // (id, occurrences)
    } distinct;
  };
  DataParallel& data_parallel() { return dp_; }

  // Tiered dynamic tables (docs/disk-tier.md, "Tiered dynamic tables"): local shard `local`'s
  // slots are the rows of a tiered shard, of which the arena holds only a cache. Translate and
  // Lookup then leave its arena alone: they neither clear its zero row nor initialise the rows
  // they create, but list the created rows (CreatedRows) for the tier, which writes them where
  // their slots live. Call after Build.
  void SetTiered(int32_t local);
  // The rows the last Translate created in tiered local shard `local`, in creation order
  // (slots[i] given to ids[i]); empty after a Lookup. Null when `local` is not a tiered dynamic
  // shard.
  struct Created {
    std::vector<int32_t> slots;
    std::vector<int64_t> ids;
  };
  const Created* CreatedRows(int32_t local) const;

 private:
  struct Entry {
    int32_t local = 0;  // index into Layout::local
    DynamicShard shard;
    std::vector<IdSpan> spans;  // scratch
    bool tiered = false;        // SetTiered
    Created created;            // tiered only
  };
  const Layout* layout_ = nullptr;
  HostMemoryClaim claim_;  // Init to Build
  std::vector<Entry> shards_;
  DataParallel dp_;
};

}  // namespace shardrec::embedding::dynamic
