// The printed planner statistics (TorchRec's EmbeddingStats, condensed): one row per rank and
// one per table.
#pragma once

#include <string>
#include <vector>

#include "impl/planner/tier_model.h"
#include "impl/planner/topology.h"
#include "impl/sharding/types.h"

namespace shardrec::planner {

struct StatsInfo {
  bool planned = false;  // false for a plan read from text (estimates use `topo` defaults)
  int proposals = 0;
  int feasible = 0;
  // Per table, the column block lower bound the planner used (0: the default); empty when
  // unknown. Explains a column-wise table that stayed one shard.
  std::vector<int32_t> min_partition;
  // Per table, its tier (cache_bytes 0: in memory); empty when unknown (a plan read from text).
  std::vector<TierHint> tiers;
};

std::string FormatStats(const sharding::Plan& plan, const Topology& topo,
                        const std::vector<std::vector<float>>& pooling_factors,
                        const StatsInfo& info);

}  // namespace shardrec::planner
