// Config builders shared by the planner tests.
#pragma once

#include <string>
#include <vector>

#include "impl/planner/planner.h"

namespace shardrec::planner::testing {

inline sharding::TableConfig Table(const std::string& name, int64_t rows, int32_t dim,
                                   std::vector<int32_t> features) {
  sharding::TableConfig t;
  t.name = name;
  t.rows = rows;
  t.dim = dim;
  t.features = std::move(features);
  return t;
}

// `n` tables "t0".."t<n-1>" with rows 1000*(i+1), dim 16, one feature each.
inline PlannerInput Input(int n, int32_t world, int32_t local) {
  PlannerInput in;
  for (int i = 0; i < n; ++i) {
    in.features.push_back({StrCat("f", i), 1.0f + static_cast<float>(i % 3)});
    in.tables.push_back(Table(StrCat("t", i), 1000 * (i + 1), 16, {i}));
  }
  in.topology = Topology::Default(world, local, ComputeDevice::kHost);
  return in;
}

inline TableConstraints Only(const std::string& table, sharding::ShardingType type,
                             int32_t min_partition = 0, std::vector<int32_t> ranks = {}) {
  TableConstraints c;
  c.table = table;
  c.sharding_types = TypeBit(static_cast<int32_t>(type));
  c.min_partition = min_partition;
  c.ranks = std::move(ranks);
  return c;
}

}  // namespace shardrec::planner::testing
