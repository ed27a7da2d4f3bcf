// The static routing of a collection, derived once from the plan: which (feature, table) pairs
// exist, where each pair's ids go (units = pair x shard), what this rank stores, and which
// column shards must share row statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/dtype.h"
#include "impl/core/status.h"
#include "impl/optim/optimizer.h"
#include "impl/sharding/types.h"

namespace shardrec::embedding {

// A feature read by a table; pairs are ordered feature-major, then by table index, which is
// the column order of the pooled output.
struct Pair {
  int32_t feature = 0;
  int32_t table = 0;
  int64_t out_offset = 0;  // first output column (pooled); 0 for sequence collections
  bool mean = false;
};

// Shards covering the same rows, in column order. Row blocks partition [0, rows).
struct RowBlock {
  int64_t row_offset = 0;
  int64_t rows = 0;
  std::vector<int32_t> shards;  // indices into the table's TablePlan::shards
};

struct TableLayout {
  bool data_parallel = false;
  // The table's optimizer state: one tensor per spec, and the row statistics its update sums
  // over the whole row (optim::NumRowStats).
  std::vector<optim::StateSpec> state_specs;
  int num_row_stats = 0;
  std::vector<RowBlock> blocks;      // non-empty row blocks by row offset (non-DP tables)
  std::vector<int32_t> shard_local;  // per shard: index into Layout::local, or -1
  bool split_columns = false;        // some row block has more than one column shard
  uint64_t key = 0;                  // HashName(table name)
  // A dynamic table (docs/dynamic-tables.md): its local shards hold their slots plus one zero
  // row, the last, which ids without a row read.
  bool dynamic = false;
};

// Where the ids of one pair that fall into one shard are looked up.
struct Unit {
  int32_t pair = 0;
  int32_t table = 0;
  int32_t shard = 0;
  int32_t rank = 0;
  int32_t local = -1;  // local shard index when rank == this rank
  int32_t col_offset = 0;
  int32_t cols = 0;
};

// A shard stored on this rank (data-parallel: the full copy).
struct LocalShard {
  int32_t table = 0;
  int32_t shard = 0;
  int64_t row_offset = 0;
  int64_t rows = 0;
  int32_t col_offset = 0;
  int32_t cols = 0;
  DType dtype = DType::kFloat32;  // weight storage: float32, float16, bfloat16 or FP8
  // In the weights arena of `dtype`: elements, or bytes for FP8 (whose rows of both kinds share
  // one byte arena).
  size_t weight_offset = 0;
  std::vector<size_t> state_offsets;  // in the state arena (floats), one per StateSpec
};

// The distance between a local shard's weight rows in its arena's units: cols elements, or an
// FP8 row's bytes (its scale, then cols codes: core/fp8.h).
constexpr int64_t WeightRowStride(const LocalShard& ls) {
  return IsFp8DType(ls.dtype) ? Fp8RowBytes(ls.cols) : ls.cols;
}

// One column shard's partial row statistics sent to a sibling column shard of the same rows.
struct StatMessage {
  int32_t table = 0;
  int32_t from_shard = 0;
  int32_t to_shard = 0;
  int32_t from_rank = 0;
  int32_t to_rank = 0;
};

struct Layout {
  std::shared_ptr<const sharding::Plan> plan;
  int32_t rank = 0;
  int32_t world = 1;
  bool sequence = false;   // every table has NONE pooling
  int64_t output_dim = 0;  // pooled: sum of the pairs' dims; sequence: the common dim

  std::vector<Pair> pairs;
  std::vector<std::vector<int32_t>> feature_pairs;  // per feature: its pair indices
  std::vector<TableLayout> tables;
  std::vector<Unit> units;
  std::vector<std::vector<int32_t>> unit_of;        // [pair][shard] -> unit index or -1
  std::vector<std::vector<int32_t>> units_to_rank;  // [rank] -> unit indices in unit order
  std::vector<int32_t> dp_pairs;                    // pairs of data-parallel tables
  std::vector<int32_t> dp_tables;                   // data-parallel tables, in table order
  std::vector<int32_t> dp_dynamic_tables;           // those of them that are dynamic
  bool has_dynamic = false;                         // some table of the plan is dynamic

  std::vector<LocalShard> local;
  size_t weights_size = 0;       // fp32 weights (floats)
  size_t weights_fp16_size = 0;  // fp16 weights (elements)
  size_t weights_bf16_size = 0;  // bf16 weights (elements)
  size_t weights_fp8_size = 0;   // FP8 weights, E4M3 and E5M2 rows (bytes)
  size_t states_size = 0;        // floats
  size_t dp_grad_size = 0;       // floats: sum over DP tables of rows * (dim + 1)

  std::vector<StatMessage> stat_messages;  // empty unless row stats cross column shards
};

// Derives the layout of `rank`, with each table's optimizer (optimizers[t], one per table).
// Fails (naming the table) for configurations the host path does not support: weights other
// than fp32/fp16/bf16/FP8 (FP8: no column split, no dynamic table), mixed pooled and NONE tables,
// NONE tables of different dims or a feature read by several NONE tables.
Status BuildLayout(std::shared_ptr<const sharding::Plan> plan, int32_t rank,
                   const std::vector<optim::OptimizerType>& optimizers, Layout* out);

// Sets every local shard's arena offsets from its rows: weights in one arena per dtype (fp32,
// fp16, bf16, and FP8 rows of scale and codes in bytes), in local order, then the optimizer
// states in one fp32 arena. BuildLayout calls it; so does a tiered layout whose shards it has
// shrunk to their caches (tiered/cache_layout.h), so both lay the arenas out alike.
void LayOutArenas(Layout* l);

// Index of the row block of `tl` holding global row `row` (row must be in range).
int32_t FindRowBlock(const TableLayout& tl, int64_t row);

}  // namespace shardrec::embedding
