// Small plan builders shared by the sharding tests.
#pragma once

#include <string>
#include <vector>

#include "impl/sharding/layout.h"
#include "impl/sharding/types.h"

namespace shardrec::sharding::testing {

inline TableConfig Table(const std::string& name, int64_t rows, int32_t dim,
                         std::vector<int32_t> features) {
  TableConfig t;
  t.name = name;
  t.rows = rows;
  t.dim = dim;
  t.features = std::move(features);
  return t;
}

// Two tables ("a": 10 x 8 read by f0, f1; "b": 5 x 4 read by f2) on `world` ranks, both
// row-wise unless a layout is given.
inline Plan TwoTablePlan(int32_t world, int32_t local) {
  Plan p;
  p.world_size = world;
  p.local_world_size = local;
  p.features = {{"f0", 1.0f}, {"f1", 2.5f}, {"f2", 0.1f}};
  p.tables = {Table("a", 10, 8, {0, 1}), Table("b", 5, 4, {2})};
  p.tables[1].pooling = PoolingType::kMean;
  p.tables[1].init.kind = InitConfig::Kind::kUniform;
  p.tables[1].init.low = -0.25f;
  p.tables[1].init.high = 0.125f;
  p.table_plans = {MakeRowWise(p.tables[0], world), MakeRowWise(p.tables[1], world)};
  return p;
}

}  // namespace shardrec::sharding::testing
