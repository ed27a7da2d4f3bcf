// The planner entry point: configs + topology + constraints -> a validated Plan, plus the
// statistics text. Pure, CPU-only and deterministic (same inputs, same bytes, on any thread).
#pragma once

#include <string>
#include <vector>

#include "impl/planner/estimator.h"
#include "impl/planner/tier_model.h"
#include "impl/planner/topology.h"
#include "impl/sharding/types.h"

namespace shardrec::planner {

struct PlannerInput {
  std::vector<sharding::FeatureConfig> features;
  std::vector<sharding::TableConfig> tables;
  Topology topology;
  std::vector<TableConstraints> constraints;
};

struct PlannerResult {
  sharding::Plan plan;
  std::string stats;  // FormatStats of the chosen placement
  int proposals = 0;  // evaluated (distinct) proposals
  int feasible = 0;   // proposals that fit in memory
};

// Enumerate -> propose -> partition -> rate; keeps the lowest rating (first found wins ties).
// Errors: kInvalidArgument (bad configs, topology or constraints; names the table/field),
// kOutOfMemory when nothing fits (names the table, the size it needs and the largest free
// capacity, for the proposal that needs the least memory).
Status MakePlan(const PlannerInput& input, PlannerResult* out);

// Pooling factors per table (per feature of the table), from the feature configs.
std::vector<std::vector<float>> FeaturePoolingFactors(const sharding::Plan& plan);

// Per-rank totals of a placed plan under `topo`, with the plan's choice of exchange for
// table-row-wise and grid tables (sharding::Plan::host_reduce; -1 prices the reduced one).
struct PlanEstimate {
  std::vector<Perf> rank_perf;
  std::vector<Storage> rank_storage;
  std::vector<Perf> table_perf;        // summed over the table's shards
  std::vector<Storage> table_storage;  // summed over the table's shards
};
// `tiers`: per table, its tier (tier_model.h); null or empty: every table in memory.
PlanEstimate EstimatePlan(const sharding::Plan& plan, const Topology& topo,
                          const std::vector<std::vector<float>>& pooling_factors,
                          const std::vector<TierHint>* tiers = nullptr);

// Checks that every rank's estimated storage fits its usable memory; kOutOfMemory naming the
// rank, its use and capacity, and the table with the largest share there.
Status CheckPlanFits(const sharding::Plan& plan, const Topology& topo,
                     const std::vector<std::vector<float>>& pooling_factors);

}  // namespace shardrec::planner
