// Planner flow (TorchRec's EmbeddingShardingPlanner.plan without storage reservation of dense
// parts: the caller states usable memory, optionally minus reserved_fraction).
#include "impl/planner/planner.h"

#include <algorithm>
#include <limits>

#include "impl/core/check.h"
#include "impl/planner/enumerator.h"
#include "impl/planner/estimator.h"
#include "impl/planner/partitioner.h"
#include "impl/planner/proposers.h"
#include "impl/planner/stats.h"

namespace shardrec::planner {

std::vector<std::vector<float>> FeaturePoolingFactors(const sharding::Plan& plan) {
  std::vector<std::vector<float>> out(plan.tables.size());
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    for (int32_t f : plan.tables[t].features) out[t].push_back(plan.features[f].pooling_factor);
  }
  return out;
}

PlanEstimate EstimatePlan(const sharding::Plan& plan, const Topology& given,
                          const std::vector<std::vector<float>>& pooling_factors,
                          const std::vector<TierHint>* tiers) {
  // The exchange the plan chose (an unknown choice is the collection's default: reduced).
  Topology topo = given;
  topo.host_reduce = given.host_reduce && plan.host_reduce != 0;
  PlanEstimate e;
  e.rank_perf.resize(plan.world_size);
  e.rank_storage.resize(plan.world_size);
  e.table_perf.resize(plan.tables.size());
  e.table_storage.resize(plan.tables.size());
  double ids_per_rank = 0;
  bool any_dp = false, any_row_stats = false, any_host_reduce = false;
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    const auto& tp = plan.table_plans[t];
    ids_per_rank += ComputeLoad(plan.tables[t], pooling_factors[t], topo.batch_size).ids;
    any_dp = any_dp || tp.type == sharding::ShardingType::kDataParallel;
    any_row_stats = any_row_stats || ExchangesRowStats(topo, plan.tables[t], tp.type, tp.shards);
    any_host_reduce = any_host_reduce || (topo.host_reduce && CanReduceInsideHost(topo, tp.type));
  }
  const double overhead = StepOverhead(topo, ids_per_rank, any_dp, any_row_stats, any_host_reduce);
  for (auto& p : e.rank_perf) p.overhead = overhead;
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    const auto& tp = plan.table_plans[t];
    const TierHint* tier = tiers != nullptr && t < tiers->size() ? &(*tiers)[t] : nullptr;
    const auto est =
        EstimateShards(topo, plan.tables[t], pooling_factors[t], tp.type, tp.shards, tier);
    for (size_t i = 0; i < tp.shards.size(); ++i) {
      e.rank_perf[tp.shards[i].rank] += est[i].perf;
      e.rank_storage[tp.shards[i].rank] += est[i].storage;
      e.table_perf[t] += est[i].perf;
      e.table_storage[t] += est[i].storage;
    }
  }
  return e;
}

Status CheckPlanFits(const sharding::Plan& plan, const Topology& topo,
                     const std::vector<std::vector<float>>& pooling_factors) {
  if (topo.world_size != plan.world_size)
    return Status::InvalidArgument("planner: plan is for world_size ", plan.world_size,
                                   " but the topology has ", topo.world_size);
  for (size_t t = 0; t < plan.tables.size() && t < pooling_factors.size(); ++t) {
    for (size_t k = 0; k < pooling_factors[t].size() && k < plan.tables[t].features.size(); ++k) {
      SR_RETURN_IF_ERROR(CheckPoolingFactor(plan.tables[t].name,
                                            plan.features[plan.tables[t].features[k]].name,
                                            pooling_factors[t][k], topo.batch_size));
    }
  }
  const PlanEstimate e = EstimatePlan(plan, topo, pooling_factors);
  for (int32_t r = 0; r < plan.world_size; ++r) {
    const int64_t used = e.rank_storage[r].total();
    if (used <= topo.UsableMemory(r)) continue;
    // Name the table with the largest share on this rank.
    std::string worst;
    int64_t worst_bytes = -1;
    for (size_t t = 0; t < plan.tables.size(); ++t) {
      const auto& tp = plan.table_plans[t];
      const auto est = EstimateShards(topo, plan.tables[t], pooling_factors[t], tp.type, tp.shards);
      int64_t bytes = 0;
      for (size_t i = 0; i < tp.shards.size(); ++i) {
        if (tp.shards[i].rank == r) bytes = SaturatingAdd(bytes, est[i].storage.total());
      }
      if (bytes > worst_bytes) {
        worst_bytes = bytes;
        worst = plan.tables[t].name;
      }
    }
    return Status::OutOfMemory("planner: rank ", r, " needs ", FormatBytes(used), " but has ",
                               FormatBytes(topo.UsableMemory(r)), " usable; table '", worst,
                               "' takes ", FormatBytes(worst_bytes), " of it");
  }
  return Status::Ok();
}

namespace {

double BusiestRankMs(const sharding::Plan& plan, const Topology& topo,
                     const std::vector<std::vector<float>>& pooling_factors) {
  double worst = 0;
  for (const Perf& p : EstimatePlan(plan, topo, pooling_factors).rank_perf)
    worst = std::max(worst, p.total());
  return worst;
}

// Table-row-wise and grid tables on hosts that are not the whole world: the exchange (reduced
// inside the host, or flat) under which the busiest rank's estimated step is shorter. The
// reduction saves cross-host bytes and costs two collective rounds (StepOverhead) and the host's
// extra pass; which wins depends on the measured bandwidths and latency (docs/multihost.md).
void ChooseHostReduce(const Topology& topo, const std::vector<TableRequest>& requests,
                      sharding::Plan* plan) {
  plan->host_reduce = -1;
  if (std::none_of(plan->table_plans.begin(), plan->table_plans.end(),
                   [&](auto& tp) { return CanReduceInsideHost(topo, tp.type); }))
    return;
  std::vector<std::vector<float>> pooling(requests.size());
  for (size_t t = 0; t < requests.size(); ++t) pooling[t] = requests[t].pooling_factors;
  Topology reduced = topo, flat = topo;
  reduced.host_reduce = true;
  flat.host_reduce = false;
  // Ties keep the reduction: it moves fewer bytes across hosts.
  plan->host_reduce =
      BusiestRankMs(*plan, reduced, pooling) <= BusiestRankMs(*plan, flat, pooling) ? 1 : 0;
}

}  // namespace

Status MakePlan(const PlannerInput& input, PlannerResult* out) {
  const Topology& topo = input.topology;
  SR_RETURN_IF_ERROR(topo.Validate());
  sharding::Plan plan;
  plan.world_size = topo.world_size;
  plan.local_world_size = topo.local_world_size;
  plan.features = input.features;
  plan.tables = input.tables;
  plan.planned_optimizer = static_cast<int32_t>(topo.optimizer);
  // Capacities given in bytes become slot counts before anything reads `rows`.
  for (sharding::TableConfig& t : plan.tables) {
    if (!t.dynamic.enabled || t.dynamic.capacity_bytes <= 0) continue;
    const auto optimizer = t.has_optimizer ? t.optimizer.type : topo.optimizer;
    t.rows = DynamicSlotsForBytes(t, optimizer, t.dynamic.capacity_bytes);
    if (t.rows < 1)
      return Status::InvalidArgument(
          "table '", t.name, "': dynamic capacity_bytes ", t.dynamic.capacity_bytes,
          " holds no slot (one slot costs ", DynamicSlotsBytes(t, optimizer, 1),
          " bytes: its row, optimizer state and metadata; docs/dynamic-tables.md)");
  }
  SR_RETURN_IF_ERROR(sharding::ValidatePlanConfigs(plan));

  std::vector<TableRequest> requests;
  SR_RETURN_IF_ERROR(
      ResolveRequests(plan.tables, plan.features, input.constraints, topo, &requests));
  std::vector<std::vector<ShardingOption>> options;
  SR_RETURN_IF_ERROR(Enumerate(plan.tables, requests, topo, &options));
  SortOptions(&options);
  const auto proposals = Propose(options);

  PlannerResult result;
  bool have_best = false;
  Placement best;
  FitFailure smallest_failure;
  int64_t smallest_failure_storage = std::numeric_limits<int64_t>::max();
  for (const auto& proposal : proposals) {
    ++result.proposals;
    Placement placement;
    FitFailure failure;
    if (!Partition(options, proposal, topo, &placement, &failure)) {
      int64_t total = 0;
      for (size_t t = 0; t < proposal.size(); ++t)
        total = SaturatingAdd(total, options[t][proposal[t]].SumStorage());
      if (total < smallest_failure_storage) {
        smallest_failure_storage = total;
        smallest_failure = failure;
      }
      continue;
    }
    ++result.feasible;
    if (!have_best || placement.rating < best.rating) {
      best = std::move(placement);
      have_best = true;
    }
  }
  if (!have_best)
    return Status::OutOfMemory(FitFailureMessage(smallest_failure, plan.tables, topo));

  plan.table_plans = std::move(best.table_plans);
  // A capacity asked in bytes must give every shard of the plan a slot: an empty row block there
  // is a figure too small for this plan, not a choice the caller made.
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    const sharding::TableConfig& tc = plan.tables[t];
    if (!tc.dynamic.enabled || tc.dynamic.capacity_bytes <= 0) continue;
    const auto& shards = plan.table_plans[t].shards;
    const auto empty = std::count_if(shards.begin(), shards.end(),
                                     [](const sharding::Shard& s) { return s.rows < 1; });
    if (empty > 0)
      return Status::InvalidArgument("table '", tc.name, "': dynamic capacity_bytes ",
                                     tc.dynamic.capacity_bytes, " gives ", tc.rows,
                                     " slots, fewer than its ", shards.size(),
                                     " shards under this plan (one slot per shard at least)");
  }
  ChooseHostReduce(topo, requests, &plan);
  Status valid = sharding::ValidatePlan(plan);
  // A limit of the implementation (a dynamic shard of more slots than it numbers) is the
  // caller's table, not a planner bug (the enumerator already proposes no such shard).
  if (!valid.ok() && valid.code() == Code::kUnsupported) return valid;
  if (!valid.ok()) return Status::Internal("planner produced an invalid plan: ", valid.message());
  std::vector<std::vector<float>> pooling(requests.size());
  for (size_t t = 0; t < requests.size(); ++t) pooling[t] = requests[t].pooling_factors;
  StatsInfo info;
  info.proposals = result.proposals;
  info.feasible = result.feasible;
  info.planned = true;
  for (const auto& r : requests) info.min_partition.push_back(r.min_partition);
  for (const auto& r : requests) info.tiers.push_back(r.tier);
  result.stats = FormatStats(plan, topo, pooling, info);
  result.plan = std::move(plan);
  *out = std::move(result);
  return Status::Ok();
}

}  // namespace shardrec::planner
