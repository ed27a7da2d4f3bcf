// Shared vocabulary of planner, embedding, replica and checkpoint: table and feature configs,
// sharding types, shards and the Plan. Plain data; validation lives in plan_validate.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "impl/core/dtype.h"
#include "impl/core/status.h"
#include "impl/optim/optimizer.h"

namespace shardrec::sharding {

// Values mirror the SHARDREC_SHARDING_* constants of the C API.
enum class ShardingType : int32_t {
  kDataParallel = 0,
  kTableWise = 1,
  kRowWise = 2,
  kColumnWise = 3,
  kTableRowWise = 4,
  kTableColumnWise = 5,
  kGrid = 6,
};
constexpr int kNumShardingTypes = 7;
const char* ShardingTypeName(ShardingType t);  // "data_parallel", "table_wise", ...
const char* ShardingTypeShortName(
    ShardingType t);  // "DP", "TW", "RW", "CW", "TWRW", "TWCW", "GRID"
// Inverse of ShardingTypeName; false for an unknown name.
bool ShardingTypeFromName(const std::string& name, ShardingType* out);
constexpr bool IsValidShardingType(int32_t v) { return v >= 0 && v < kNumShardingTypes; }

// Values mirror SHARDREC_POOLING_*.
enum class PoolingType : int32_t { kSum = 0, kMean = 1, kNone = 2 };

// Values mirror SHARDREC_INIT_*.
struct InitConfig {
  enum class Kind : int32_t {
    kDefault = 0,   // uniform in [-sqrt(1/rows), +sqrt(1/rows)] (global row count)
    kUniform = 1,   // uniform in [low, high)
    kConstant = 2,  // every element = low
  };
  Kind kind = Kind::kDefault;
  float low = 0.0f;
  float high = 0.0f;
};

// A dynamic table (docs/dynamic-tables.md): any 64-bit id; `rows` is its capacity. Eviction
// values mirror SHARDREC_EVICTION_*.
struct DynamicConfig {
  enum class Eviction : int32_t { kNone = 0, kLru = 1, kLfu = 2, kTtl = 3, kScore = 4 };
  bool enabled = false;
  Eviction eviction = Eviction::kNone;
  // The admission sketch counts in saturating 16-bit counters, so a higher threshold could never
  // be reached: refused by validation.
  static constexpr int32_t kMaxAdmissionThreshold = 65535;
  int32_t admission_threshold = 0;  // 0 or 1: admitted at first sight; <= kMaxAdmissionThreshold
  // A shard numbers its slots (and its zero row) in 32 bits: no shard has more slots than this.
  static constexpr int64_t kMaxShardSlots = INT32_MAX - 1;
  int64_t ttl_steps = 0;  // kTtl only
  // > 0: the capacity was given in bytes; the planner turned it into `rows`
  // (planner::DynamicSlotsForBytes) before anything else reads the table.
  int64_t capacity_bytes = 0;
  // > 0: every admission count is halved at the start of each training forward whose number is a
  // multiple of it (docs/dynamic-tables.md, "Admission").
  int64_t admission_decay_steps = 0;
};

struct TableConfig {
  std::string name;
  int64_t rows = 0;
  int32_t dim = 0;
  PoolingType pooling = PoolingType::kSum;
  DType dtype = DType::kFloat32;  // storage type; math is always fp32
  std::vector<int32_t> features;  // indices into Plan::features that read this table, in order
  InitConfig init;
  // The table's own fused optimizer (TorchRec's per-table fused params); without one the table
  // trains with the collection's default optimizer.
  bool has_optimizer = false;
  optim::OptimizerConfig optimizer;
  DynamicConfig dynamic;
};

struct FeatureConfig {
  std::string name;
  // Planner hints (TorchRec's pooling factor): expected ids per bag.
  float pooling_factor = 1.0f;
};

// A rectangular piece of a table placed on one rank (sharding-group-local rank).
struct Shard {
  int64_t row_offset = 0;
  int64_t rows = 0;
  int32_t col_offset = 0;
  int32_t cols = 0;
  int32_t rank = 0;
};

// How one table is split. Conventions by type:
//  - kDataParallel: one full-table shard per rank, shards[r].rank == r for r in [0, world).
//  - kTableWise: one full-table shard.
//  - kRowWise: `world` shards in rank order, ceil-sized row blocks (5 rows on 4 ranks: 2,2,1,0);
//    empty shards are kept (rows == 0).
//  - kColumnWise / kTableColumnWise: full-height column blocks in column order, any ranks
//    (several may share a rank; TWCW keeps them inside one node).
//  - kTableRowWise: ceil-sized row blocks over the `local_world_size` ranks of one node.
//  - kGrid: for each column block (column order), ceil-sized row blocks over the ranks of one
//    node.
// Every (row, column) of the table is covered by exactly one shard, except data-parallel where
// every rank holds the whole table.
struct TablePlan {
  ShardingType type = ShardingType::kTableWise;
  std::vector<Shard> shards;
};

// The largest sharding group a plan describes. Planning and validation keep per-rank state
// (free memory, one shard per rank for row-wise tables), so an absurd world size would exhaust
// memory before any other check; 65536 ranks is far beyond any deployment we know of.
constexpr int32_t kMaxWorldSize = 1 << 16;
// The largest table, in elements (rows x dim): 2^56, far beyond any host's or GPU's memory, and
// small enough that sizes in bytes with optimizer states never overflow int64.
constexpr int64_t kMaxTableElements = int64_t{1} << 56;

// kInvalidArgument "<what>: world_size N must be in [1, 65536]" outside [1, kMaxWorldSize].
Status CheckWorldSize(int64_t world_size, const std::string& what);
// kInvalidArgument "<what>: R x D elements exceed the limit of 2^56" when rows x dim (both >= 1)
// is larger than kMaxTableElements.
Status CheckTableElements(int64_t rows, int64_t dim, const std::string& what);

// The plan for one sharding group of `world_size` ranks. Immutable once built; the same input
// gives a byte-identical plan (and Hash()) on every rank.
struct Plan {
  int32_t world_size = 1;
  int32_t local_world_size = 1;         // ranks per node (TWRW/TWCW/grid node size)
  std::vector<FeatureConfig> features;  // KJT key order
  std::vector<TableConfig> tables;      // table order
  std::vector<TablePlan> table_plans;   // parallel to `tables`
  // The optimizer type the planner counted for tables without their own (topology.optimizer);
  // -1 when unknown (a manual plan).
  int32_t planned_optimizer = -1;
  // Whether table-row-wise and grid tables reduce their return exchange inside the owners' host
  // before it crosses (impl/embedding/host_reduce.h): 1 yes, 0 no (the flat exchange), -1
  // unknown (a manual plan: the collection reduces). The planner sets it from its estimate of
  // the step both ways (planner.cc). Not in the hash: it changes no result, and the ranks agree
  // on it when a collection is created.
  int32_t host_reduce = -1;

  // Stable 64-bit hash of everything above but host_reduce (used to check that ranks agree).
  uint64_t Hash() const;
  // The index in `tables` of the table named `name`, or -1 (names are unique in a valid plan).
  int32_t TableIndex(std::string_view name) const;
};

// Checks a plan completely: configs (unique non-empty names, rows/dim > 0, feature indices valid,
// every feature read by at least one table; a feature may feed several tables), ranks in range,
// every element of every table covered exactly once (data-parallel: once per rank), and the layout
// rules of each sharding type (ceil row blocks, column order, node locality). The message names the
// table and the rule. Memory fit is checked by the planner (planner/plan_check.h), which knows the
// topology.
Status ValidatePlan(const Plan& plan);

// The config part of ValidatePlan only (world sizes, features, tables); table_plans is ignored.
// The planner runs it before it places anything.
Status ValidatePlanConfigs(const Plan& plan);

}  // namespace shardrec::sharding
