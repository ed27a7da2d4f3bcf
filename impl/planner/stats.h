// The printed planner statistics (TorchRec's EmbeddingStats, condensed): one row per rank and
// one per table.
#pragma once

#include <string>
#include <vector>

#include "impl/planner/topology.h"
#include "impl/sharding/types.h"

namespace shardrec::planner {

struct StatsInfo {
  bool planned = false;  // false for a plan read from text (estimates use `topo` defaults)
  int proposals = 0;
  int feasible = 0;
};

std::string FormatStats(const sharding::Plan& plan, const Topology& topo,
                        const std::vector<std::vector<float>>& pooling_factors,
                        const StatsInfo& info);

}  // namespace shardrec::planner
