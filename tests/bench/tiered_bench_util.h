// The set-up the tiered benchmarks share (tiered_step_bench, tiered_large_bench).
#pragma once

#include <cstddef>
#include <cstdint>

#include "shardrec/shardrec.h"
#include "tests/bench/capi_bench_util.h"

namespace shardrec::bench {

// The plan of the tiered benchmarks' model: one fp32 table "t" of `rows` x `dim`, trained with
// row-wise Adagrad, read by one feature "f" of bags of `bag` ids, for `world` ranks of `batch`
// samples each, under the planner's choice within `constraints` (null for none). Aborts on
// failure; the caller destroys the plan.
inline shardrec_plan_t* OneTablePlan(int64_t rows, int32_t dim, int32_t bag, int32_t world,
                                     int64_t batch, const shardrec_table_constraints_t* constraints,
                                     size_t num_constraints) {
  shardrec_feature_config_t f;
  shardrec_feature_config_init(&f, SHARDREC_FEATURE_CONFIG_VERSION);
  f.name = "f";
  f.pooling_factor = bag;
  int32_t feature = 0;
  shardrec_table_config_t t;
  shardrec_table_config_init(&t, SHARDREC_TABLE_CONFIG_VERSION);
  t.name = "t";
  t.rows = rows;
  t.dim = dim;
  t.features = &feature;
  t.num_features = 1;
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = world;
  topo.batch_size = static_cast<int32_t>(batch);
  topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  shardrec_plan_t* plan = nullptr;
  Check(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, constraints, num_constraints), "plan");
  return plan;
}

}  // namespace shardrec::bench
