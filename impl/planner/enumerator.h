// Enumerator: the sharding options of every table (one per allowed sharding type), with shard
// sizes from the layout rules and per-shard estimates. Ranks are chosen later by the partitioner.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/planner/estimator.h"
#include "impl/planner/tier_model.h"
#include "impl/planner/topology.h"
#include "impl/sharding/types.h"

namespace shardrec::planner {

struct ShardingOption {
  int32_t table = 0;  // index into the table list
  sharding::ShardingType type = sharding::ShardingType::kTableWise;
  // Shard sizes and offsets in the final order. `rank` is set for types whose ranks are fixed
  // (DP, RW, CW/TWCW split evenly over pinned ranks); otherwise the partitioner sets it.
  // TWRW/grid shards come in groups of local_world_size (one node each), rank = index in group.
  std::vector<sharding::Shard> shards;
  std::vector<ShardEstimate> estimates;  // parallel to `shards`
  bool fixed_ranks = false;
  std::vector<int32_t> allowed_ranks;  // sorted; the pinned ranks or every rank

  double MaxShardPerf() const;
  double SumPerf() const;
  int64_t MaxShardStorage() const;
  int64_t SumStorage() const;
};

// Per-table inputs of the enumerator, resolved from configs and constraints.
struct TableRequest {
  uint32_t type_mask = kDefaultTypeMask;
  int32_t min_partition = 0;
  std::vector<int32_t> pinned_ranks;   // sorted, unique; empty = any
  std::vector<float> pooling_factors;  // per feature of the table
  TierHint tier;                       // cache_bytes 0: held in memory
};

// Resolves constraints (by table name) into one request per table; EINVAL naming the table
// for unknown table names, duplicate constraints, bad masks, ranks or pooling factor counts.
Status ResolveRequests(const std::vector<sharding::TableConfig>& tables,
                       const std::vector<sharding::FeatureConfig>& features,
                       const std::vector<TableConstraints>& constraints, const Topology& topo,
                       std::vector<TableRequest>* out);

// Options of every table, grouped by table (out[t] in sharding-type order). EINVAL naming the
// table (and why each requested type is impossible) when a table has no option.
Status Enumerate(const std::vector<sharding::TableConfig>& tables,
                 const std::vector<TableRequest>& requests, const Topology& topo,
                 std::vector<std::vector<ShardingOption>>* out);

}  // namespace shardrec::planner
