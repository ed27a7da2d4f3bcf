// Enumerator: constraints -> requests -> sharding options per table.
#include "impl/planner/enumerator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "impl/core/check.h"
#include "impl/sharding/layout.h"

namespace shardrec::planner {
namespace {

using sharding::ShardingType;

Status TableError(const sharding::TableConfig& t, const std::string& what) {
  return Status::InvalidArgument("planner: table '", t.name, "': ", what);
}

// Ranks of node n.
bool NodeFullyPinned(const std::vector<int32_t>& pinned, int32_t node, int32_t L) {
  for (int32_t r = node * L; r < node * L + L; ++r) {
    if (!std::binary_search(pinned.begin(), pinned.end(), r)) return false;
  }
  return true;
}

// Builds the option of `type`, or returns the reason it is impossible.
Status BuildOption(const sharding::TableConfig& t, const TableRequest& req, const Topology& topo,
                   ShardingType type, int32_t table_index, ShardingOption* opt) {
  const int32_t W = topo.world_size;
  const int32_t L = topo.local_world_size;
  const auto& pinned = req.pinned_ranks;
  const bool all_ranks = pinned.empty() || pinned.size() == static_cast<size_t>(W);
  opt->table = table_index;
  opt->type = type;
  if (pinned.empty()) {
    for (int32_t r = 0; r < W; ++r) opt->allowed_ranks.push_back(r);
  } else {
    opt->allowed_ranks = pinned;
  }
  const bool node_local = type == ShardingType::kTableRowWise ||
                          type == ShardingType::kTableColumnWise || type == ShardingType::kGrid;
  if (node_local && !topo.NodeLocalTypesAllowed())
    return Status::InvalidArgument(sharding::ShardingTypeName(type), " needs ranks_per_node (", L,
                                   ") to divide world_size (", W, ")");
  sharding::TablePlan tp;
  switch (type) {
    case ShardingType::kDataParallel:
    case ShardingType::kRowWise:
      if (!all_ranks)
        return Status::InvalidArgument(sharding::ShardingTypeName(type),
                                       " uses every rank but the table is pinned to ",
                                       pinned.size(), " of ", W);
      tp = type == ShardingType::kRowWise ? sharding::MakeRowWise(t, W)
                                          : sharding::MakeDataParallel(t, W);
      opt->fixed_ranks = true;
      break;
    case ShardingType::kTableWise:
      tp = sharding::MakeTableWise(t, -1);
      break;
    case ShardingType::kTableRowWise: {
      bool any = false;
      for (int32_t n = 0; n < W / L && !any; ++n)
        any = pinned.empty() || NodeFullyPinned(pinned, n, L);
      if (!any)
        return Status::InvalidArgument("table_row_wise needs all ", L,
                                       " ranks of some node among the pinned ranks");
      tp = sharding::MakeTableRowWise(t, 0, L);
      break;
    }
    case ShardingType::kColumnWise:
    case ShardingType::kTableColumnWise: {
      const int32_t n = static_cast<int32_t>(pinned.size());
      // Pinned ranks and no min_partition: one shard per pinned rank, as even as the dim allows
      // (the first dim % n ranks hold one column more), so the layout is the one asked for.
      bool split = n > 0 && req.min_partition <= 0;
      if (split && type == ShardingType::kTableColumnWise)
        split = pinned.front() / L == pinned.back() / L;
      if (split && t.dim < n)
        return Status::InvalidArgument("dim ", t.dim, " cannot be split over ", n,
                                       " pinned ranks (one column at least per shard)");
      if (split) {
        std::vector<int32_t> widths(static_cast<size_t>(n), t.dim / n);
        for (int32_t k = 0; k < t.dim % n; ++k) ++widths[static_cast<size_t>(k)];
        tp = sharding::MakeColumnSplit(t, type, widths, pinned);
        opt->fixed_ranks = true;
      } else {
        const int32_t block = sharding::ColumnBlockDim(t.dim, req.min_partition);
        const auto widths = sharding::EqualColumnWidths(t.dim, block);
        tp = sharding::MakeColumnSplit(t, type, widths, std::vector<int32_t>(widths.size(), -1));
      }
      break;
    }
    case ShardingType::kGrid: {
      bool any = false;
      for (int32_t n = 0; n < W / L && !any; ++n)
        any = pinned.empty() || NodeFullyPinned(pinned, n, L);
      if (!any)
        return Status::InvalidArgument("grid needs all ", L,
                                       " ranks of some node among the "
                                       "pinned ranks");
      const int32_t block = sharding::ColumnBlockDim(t.dim, req.min_partition);
      const auto widths = sharding::EqualColumnWidths(t.dim, block);
      tp = sharding::MakeGrid(t, widths, std::vector<int32_t>(widths.size(), 0), L);
      break;
    }
  }
  // A plan with a larger dynamic shard could never be created; another type (row-wise over
  // more ranks) may still fit, so this one is only not proposed.
  if (t.dynamic.enabled) {
    for (const sharding::Shard& s : tp.shards) {
      if (s.rows > sharding::DynamicConfig::kMaxShardSlots)
        return Status::Unsupported(sharding::ShardingTypeName(type), " gives a dynamic shard of ",
                                   s.rows, " slots, at most ",
                                   sharding::DynamicConfig::kMaxShardSlots, " per shard");
    }
  }
  // An FP8 row carries one scale for the whole row: collections refuse a column split of it.
  if (IsFp8DType(t.dtype)) {
    for (const sharding::Shard& s : tp.shards) {
      if (s.cols != t.dim)
        return Status::InvalidArgument(sharding::ShardingTypeName(type), " splits the ",
                                       DTypeName(t.dtype),
                                       " rows into column shards (one scale covers a whole row)");
    }
  }
  opt->shards = std::move(tp.shards);
  opt->estimates = EstimateShards(topo, t, req.pooling_factors, type, opt->shards, &req.tier);
  return Status::Ok();
}

}  // namespace

double ShardingOption::MaxShardPerf() const {
  double m = 0;
  for (const auto& e : estimates) m = std::max(m, e.perf.total());
  return m;
}
double ShardingOption::SumPerf() const {
  double s = 0;
  for (const auto& e : estimates) s += e.perf.total();
  return s;
}
int64_t ShardingOption::MaxShardStorage() const {
  int64_t m = 0;
  for (const auto& e : estimates) m = std::max(m, e.storage.total());
  return m;
}
int64_t ShardingOption::SumStorage() const {
  int64_t s = 0;
  for (const auto& e : estimates) s = SaturatingAdd(s, e.storage.total());
  return s;
}

Status ResolveRequests(const std::vector<sharding::TableConfig>& tables,
                       const std::vector<sharding::FeatureConfig>& features,
                       const std::vector<TableConstraints>& constraints, const Topology& topo,
                       std::vector<TableRequest>* out) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < tables.size(); ++i) index.emplace(tables[i].name, i);
  std::vector<TableRequest> reqs(tables.size());
  for (size_t i = 0; i < tables.size(); ++i) {
    for (int32_t f : tables[i].features) {
      SR_RETURN_IF_ERROR(CheckPoolingFactor(tables[i].name, features[f].name,
                                            features[f].pooling_factor, topo.batch_size));
      reqs[i].pooling_factors.push_back(features[f].pooling_factor);
    }
  }
  std::vector<bool> seen(tables.size(), false);
  for (const auto& c : constraints) {
    auto it = index.find(c.table);
    if (it == index.end())
      return Status::InvalidArgument("planner: constraints name unknown table '", c.table, "'");
    const auto& t = tables[it->second];
    if (seen[it->second]) return TableError(t, "has more than one constraints entry");
    seen[it->second] = true;
    TableRequest& r = reqs[it->second];
    if (c.sharding_types & ~kAllTypesMask)
      return TableError(t, StrCat("sharding_types mask 0x", std::hex, c.sharding_types,
                                  " has bits beyond the 7 sharding types"));
    r.type_mask = c.sharding_types == 0 ? kDefaultTypeMask : c.sharding_types;
    if (c.min_partition < 0)
      return TableError(t, StrCat("min_partition ", c.min_partition, " must be >= 0"));
    r.min_partition = c.min_partition;
    std::set<int32_t> ranks;
    for (int32_t rank : c.ranks) {
      if (rank < 0 || rank >= topo.world_size)
        return TableError(
            t, StrCat("pinned rank ", rank, " does not exist (world_size ", topo.world_size, ")"));
      if (!ranks.insert(rank).second)
        return TableError(t, StrCat("pinned rank ", rank, " listed twice"));
    }
    r.pinned_ranks.assign(ranks.begin(), ranks.end());
    if (!c.pooling_factors.empty()) {
      if (c.pooling_factors.size() != t.features.size())
        return TableError(t, StrCat(c.pooling_factors.size(), " pooling factors given for ",
                                    t.features.size(), " features"));
      for (size_t k = 0; k < c.pooling_factors.size(); ++k) {
        const float p = c.pooling_factors[k];
        if (!std::isfinite(p) || p < 0)
          return TableError(t, StrCat("pooling factor ", p, " must be finite and >= 0"));
        SR_RETURN_IF_ERROR(
            CheckPoolingFactor(t.name, features[t.features[k]].name, p, topo.batch_size));
      }
      r.pooling_factors = c.pooling_factors;
    }
    if (c.tier_cache_bytes < 0 || !(c.tier_hit_rate <= 1.0) || !std::isfinite(c.tier_hit_rate) ||
        !(c.id_zipf_alpha >= 0.0) || !std::isfinite(c.id_zipf_alpha))
      return TableError(t, StrCat("tier_cache_bytes ", c.tier_cache_bytes,
                                  " must be >= 0, "
                                  "tier_hit_rate ",
                                  c.tier_hit_rate,
                                  " at most 1 (< 0: estimated) "
                                  "and id_zipf_alpha ",
                                  c.id_zipf_alpha, " finite and >= 0"));
    if (c.tier_cache_bytes > 0 && t.dynamic.enabled)
      return TableError(t, "is dynamic; tiered tables are fixed tables (docs/disk-tier.md)");
    r.tier = TierHint{c.tier_cache_bytes, c.tier_hit_rate, c.id_zipf_alpha};
    // A tiered table is never data-parallel (every rank would hold all of it).
    if (c.tier_cache_bytes > 0)
      r.type_mask &= ~TypeBit(static_cast<int32_t>(ShardingType::kDataParallel));
  }
  *out = std::move(reqs);
  return Status::Ok();
}

Status Enumerate(const std::vector<sharding::TableConfig>& tables,
                 const std::vector<TableRequest>& requests, const Topology& topo,
                 std::vector<std::vector<ShardingOption>>* out) {
  SR_CHECK(tables.size() == requests.size());
  std::vector<std::vector<ShardingOption>> all(tables.size());
  for (size_t ti = 0; ti < tables.size(); ++ti) {
    std::string reasons;
    bool only_limits = true;  // every type refused for an implementation limit
    for (int32_t type = 0; type < sharding::kNumShardingTypes; ++type) {
      if (!(requests[ti].type_mask & TypeBit(type))) continue;
      const auto st = static_cast<ShardingType>(type);
      ShardingOption opt;
      Status s = BuildOption(tables[ti], requests[ti], topo, st, static_cast<int32_t>(ti), &opt);
      if (s.ok()) {
        all[ti].push_back(std::move(opt));
      } else {
        reasons += StrCat(reasons.empty() ? "" : "; ", s.message());
        only_limits = only_limits && s.code() == Code::kUnsupported;
      }
    }
    if (all[ti].empty() && only_limits && !reasons.empty())
      return Status::Unsupported("planner: table '", tables[ti].name,
                                 "': no allowed sharding type is possible: ", reasons,
                                 " (shard it over more ranks)");
    if (all[ti].empty())
      return TableError(tables[ti], StrCat("no allowed sharding type is possible: ", reasons));
  }
  *out = std::move(all);
  return Status::Ok();
}

}  // namespace shardrec::planner
