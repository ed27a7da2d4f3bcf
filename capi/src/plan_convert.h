// Conversions from the plan C structs (features, tables, topology, constraints) to the
// planner's input, shared by the C units that plan. Each returns a clear error naming the field
// and writes its output only on success of that field's checks; none has other side effects.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "impl/planner/planner.h"
#include "shardrec/plan.h"

namespace shardrec::capi {

// InvalidArgument naming `what` when `p` is NULL with a count of `n` > 0.
Status CheckArray(const void* p, size_t n, const std::string& what);

// Appends one impl config per C config to *out.
Status ConvertFeatures(const shardrec_feature_config_t* features, size_t n,
                       std::vector<sharding::FeatureConfig>* out);
// Appends one impl config per C config to *out; `features` resolves feature names and indices.
Status ConvertTables(const shardrec_table_config_t* tables, size_t n,
                     const std::vector<sharding::FeatureConfig>& features,
                     std::vector<sharding::TableConfig>* out);
// Units converted (bytes/s and seconds outside, per ms inside); *out is written only when valid.
Status ConvertTopology(const shardrec_topology_t* c, planner::Topology* out);
// Appends one impl constraint per C constraint to *out.
Status ConvertConstraints(const shardrec_table_constraints_t* cs, size_t n,
                          std::vector<planner::TableConstraints>* out);

}  // namespace shardrec::capi
