// Partitioner: places the shards of one proposal (an option per table) on ranks under each
// rank's memory, greedily by cost (TorchRec's GreedyPerfPartitioner, made fully deterministic), in
// TorchRec's order (largest storage first) and by largest cost first, keeping the better-rated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "impl/planner/enumerator.h"

namespace shardrec::planner {

// Why a proposal did not fit: the first shard that found no rank.
struct FitFailure {
  int32_t table = -1;
  sharding::ShardingType type = sharding::ShardingType::kTableWise;
  int32_t shard = 0;
  int64_t needed = 0;        // bytes the shard (or node group) needs
  int64_t largest_free = 0;  // largest free capacity of any allowed rank at that moment
  int32_t largest_free_rank = 0;
  // A tiered table's shard (tier_model.h): the disk it needs and the most any allowed rank has.
  int64_t needed_disk = 0;
  int64_t largest_free_disk = 0;
  // Shards that must share one host (partitioner.cc FailTogether): how many, whether `needed` is
  // per rank (row blocks) or their sum, and the roomiest host (-1: none allowed) and its offer.
  int32_t together = 1;
  bool per_rank = false;
  int32_t host = -1;
  int64_t host_free = -1;
};

struct Placement {
  std::vector<sharding::TablePlan> table_plans;  // parallel to the tables
  std::vector<Perf> rank_perf;                   // per rank
  std::vector<Storage> rank_storage;             // per rank
  double rating = 0;                             // max over ranks of rank_perf total
};

// Places `proposal` (options[t][proposal[t]] for every table t). Returns false and fills
// `failure` when some shard fits nowhere.
bool Partition(const std::vector<std::vector<ShardingOption>>& options,
               const std::vector<int32_t>& proposal, const Topology& topo, Placement* out,
               FitFailure* failure);

// Human-readable "does not fit" message for `failure`.
std::string FitFailureMessage(const FitFailure& failure,
                              const std::vector<sharding::TableConfig>& tables,
                              const Topology& topo);

// "1.50 GiB (1610612736 bytes)"-style formatting used in messages and stats.
std::string FormatBytes(int64_t bytes);

}  // namespace shardrec::planner
