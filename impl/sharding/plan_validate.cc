// ValidatePlan: every rule a plan must satisfy before any module uses it (see types.h).
#include <algorithm>
#include <climits>
#include <cmath>
#include <set>

#include "impl/core/check.h"
#include "impl/sharding/layout.h"
#include "impl/sharding/types.h"

namespace shardrec::sharding {
namespace {

Status TableError(const TableConfig& t, const std::string& what) {
  return Status::InvalidArgument("plan: table '", t.name, "': ", what);
}

std::string ShardText(size_t i, const Shard& s) {
  return StrCat("shard ", i, " (rows ", s.row_offset, "+", s.rows, ", cols ", s.col_offset, "+",
                s.cols, ", rank ", s.rank, ")");
}

Status ValidateConfigs(const Plan& plan) {
  SR_RETURN_IF_ERROR(CheckWorldSize(plan.world_size, "plan"));
  if (plan.local_world_size < 1 || plan.local_world_size > plan.world_size)
    return Status::InvalidArgument("plan: local_world_size (ranks per node) ",
                                   plan.local_world_size,
                                   " must be in [1, world_size=", plan.world_size, "]");
  if (plan.tables.empty()) return Status::InvalidArgument("plan: no tables");
  if (plan.planned_optimizer != -1 && !optim::IsKnownOptimizerType(plan.planned_optimizer))
    return Status::InvalidArgument("plan: unknown planned optimizer ", plan.planned_optimizer);
  std::set<std::string> names;
  for (size_t f = 0; f < plan.features.size(); ++f) {
    const auto& fc = plan.features[f];
    if (fc.name.empty()) return Status::InvalidArgument("plan: feature ", f, " has an empty name");
    if (!names.insert(fc.name).second)
      return Status::InvalidArgument("plan: duplicate feature name '", fc.name, "'");
    if (!std::isfinite(fc.pooling_factor) || fc.pooling_factor < 0)
      return Status::InvalidArgument("plan: feature '", fc.name, "': pooling_factor ",
                                     fc.pooling_factor, " must be finite and >= 0");
  }
  names.clear();
  std::vector<int> reader(plan.features.size(), -1);
  for (size_t ti = 0; ti < plan.tables.size(); ++ti) {
    const auto& t = plan.tables[ti];
    if (t.name.empty()) return Status::InvalidArgument("plan: table ", ti, " has an empty name");
    if (!names.insert(t.name).second)
      return Status::InvalidArgument("plan: duplicate table name '", t.name, "'");
    if (t.rows < 1) return TableError(t, StrCat("rows ", t.rows, " must be >= 1"));
    if (t.dim < 1) return TableError(t, StrCat("dim ", t.dim, " must be >= 1"));
    SR_RETURN_IF_ERROR(CheckTableElements(t.rows, t.dim, StrCat("plan: table '", t.name, "'")));
    const auto pooling = static_cast<int32_t>(t.pooling);
    if (pooling < 0 || pooling > 2) return TableError(t, StrCat("unknown pooling ", pooling));
    if (!IsWeightDType(t.dtype))
      return TableError(t, StrCat("dtype ", DTypeName(t.dtype),
                                  " is not a weight type (float32, float16, bfloat16, fp8_e4m3, "
                                  "fp8_e5m2)"));
    const auto kind = static_cast<int32_t>(t.init.kind);
    if (kind < 0 || kind > 2) return TableError(t, StrCat("unknown init kind ", kind));
    if (!std::isfinite(t.init.low) || !std::isfinite(t.init.high))
      return TableError(t, "init bounds must be finite");
    if (t.init.kind == InitConfig::Kind::kUniform && !(t.init.low < t.init.high))
      return TableError(
          t, StrCat("uniform init needs low < high (got ", t.init.low, ", ", t.init.high, ")"));
    if (t.has_optimizer) {
      Status s = optim::ValidateConfig(t.optimizer);
      if (!s.ok()) return TableError(t, s.message());
    }
    if (t.dynamic.enabled) {
      const auto ev = static_cast<int32_t>(t.dynamic.eviction);
      if (ev < 0 || ev > 4) return TableError(t, StrCat("unknown eviction policy ", ev));
      if (t.dynamic.admission_threshold < 0 ||
          t.dynamic.admission_threshold > DynamicConfig::kMaxAdmissionThreshold)
        return TableError(t, StrCat("admission threshold ", t.dynamic.admission_threshold,
                                    " must be in [0, ", DynamicConfig::kMaxAdmissionThreshold,
                                    "] (the admission counts saturate there)"));
      if (t.dynamic.eviction == DynamicConfig::Eviction::kTtl && t.dynamic.ttl_steps < 1)
        return TableError(
            t, StrCat("TTL eviction needs ttl_steps >= 1 (got ", t.dynamic.ttl_steps, ")"));
      if (t.dynamic.capacity_bytes < 0)
        return TableError(
            t, StrCat("dynamic capacity_bytes ", t.dynamic.capacity_bytes, " must be >= 0"));
      if (t.dynamic.admission_decay_steps < 0)
        return TableError(
            t, StrCat("admission_decay_steps ", t.dynamic.admission_decay_steps, " must be >= 0"));
    }
    if (t.features.empty()) return TableError(t, "no feature reads it");
    for (int32_t f : t.features) {
      if (f < 0 || static_cast<size_t>(f) >= plan.features.size())
        return TableError(
            t, StrCat("feature index ", f, " is out of range [0, ", plan.features.size(), ")"));
      if (reader[f] == static_cast<int>(ti))
        return TableError(t, StrCat("lists feature '", plan.features[f].name, "' twice"));
      reader[f] = static_cast<int>(ti);
    }
  }
  for (size_t f = 0; f < reader.size(); ++f) {
    if (reader[f] < 0)
      return Status::InvalidArgument("plan: feature '", plan.features[f].name,
                                     "' is not read by any table");
  }
  return Status::Ok();
}

// Shards inside the table, no two overlapping, areas summing to rows x dim: exact cover.
Status ValidateCover(const TableConfig& t, const std::vector<Shard>& shards) {
  std::vector<size_t> live;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].rows > 0) live.push_back(i);
  }
  for (size_t a = 0; a < live.size(); ++a) {
    for (size_t b = a + 1; b < live.size(); ++b) {
      const Shard& x = shards[live[a]];
      const Shard& y = shards[live[b]];
      const int64_t r0 = std::max(x.row_offset, y.row_offset);
      const int64_t r1 = std::min(x.row_offset + x.rows, y.row_offset + y.rows);
      const int32_t c0 = std::max(x.col_offset, y.col_offset);
      const int32_t c1 = std::min(x.col_offset + x.cols, y.col_offset + y.cols);
      if (r0 < r1 && c0 < c1)
        return TableError(t, StrCat(ShardText(live[a], x), " and ", ShardText(live[b], y),
                                    " overlap at row ", r0, ", column ", c0));
    }
  }
  // No overlap, so the covered area is the sum of the areas (in 128-bit-safe long double).
  long double area = 0;
  for (size_t i : live) area += static_cast<long double>(shards[i].rows) * shards[i].cols;
  const long double full = static_cast<long double>(t.rows) * t.dim;
  if (area == full) return Status::Ok();
  // Find the first uncovered cell: its row is 0 or where some shard ends, its column likewise.
  std::set<int64_t> rows{0};
  std::set<int32_t> cols{0};
  for (size_t i : live) {
    rows.insert(shards[i].row_offset + shards[i].rows);
    cols.insert(shards[i].col_offset + shards[i].cols);
  }
  if (live.size() <= 256) {
    for (int64_t r : rows) {
      if (r >= t.rows) break;
      for (int32_t c : cols) {
        if (c >= t.dim) break;
        bool covered = false;
        for (size_t i : live) {
          const Shard& s = shards[i];
          if (r >= s.row_offset && r < s.row_offset + s.rows && c >= s.col_offset &&
              c < s.col_offset + s.cols) {
            covered = true;
            break;
          }
        }
        if (!covered)
          return TableError(t,
                            StrCat("gap: row ", r, ", column ", c, " is not covered by any shard"));
      }
    }
  }
  return TableError(t, StrCat("gap: shards cover ", static_cast<double>(area), " of ",
                              static_cast<double>(full), " elements"));
}

Status ExpectRowBlocks(const TableConfig& t, ShardingType type, const std::vector<Shard>& shards,
                       size_t first, int32_t parts, int32_t first_rank, int32_t col_offset,
                       int32_t cols) {
  const auto sizes = RowBlockSizes(t.rows, parts);
  int64_t offset = 0;
  for (int32_t i = 0; i < parts; ++i) {
    const Shard& s = shards[first + i];
    if (s.rank != first_rank + i || s.row_offset != offset || s.rows != sizes[i] ||
        s.col_offset != col_offset || s.cols != cols)
      return TableError(t, StrCat(ShardingTypeName(type), " ", ShardText(first + i, s),
                                  " breaks the ceil row-block rule: "
                                  "expected rows ",
                                  offset, "+", sizes[i], ", cols ", col_offset, "+", cols,
                                  ", rank ", first_rank + i));
    offset += sizes[i];
  }
  return Status::Ok();
}

Status ValidateLayout(const Plan& plan, const TableConfig& t, const TablePlan& tp) {
  const int32_t W = plan.world_size;
  const int32_t L = plan.local_world_size;
  const auto& sh = tp.shards;
  const char* type = ShardingTypeName(tp.type);
  const bool node_local = tp.type == ShardingType::kTableRowWise ||
                          tp.type == ShardingType::kTableColumnWise ||
                          tp.type == ShardingType::kGrid;
  if (node_local && W % L != 0)
    return TableError(
        t, StrCat(type, " needs ranks per node (", L, ") to divide world_size (", W, ")"));
  switch (tp.type) {
    case ShardingType::kDataParallel:
      if (sh.size() != static_cast<size_t>(W))
        return TableError(
            t, StrCat("data_parallel needs one shard per rank (", W, "), got ", sh.size()));
      for (size_t r = 0; r < sh.size(); ++r) {
        const Shard& s = sh[r];
        if (s.rank != static_cast<int32_t>(r) || s.row_offset != 0 || s.rows != t.rows ||
            s.col_offset != 0 || s.cols != t.dim)
          return TableError(t, StrCat("data_parallel ", ShardText(r, s),
                                      " must be the whole table"
                                      " on rank ",
                                      r));
      }
      return Status::Ok();
    case ShardingType::kTableWise:
      if (sh.size() != 1) return TableError(t, StrCat("table_wise needs 1 shard, got ", sh.size()));
      return Status::Ok();
    case ShardingType::kRowWise:
      if (sh.size() != static_cast<size_t>(W))
        return TableError(t,
                          StrCat("row_wise needs one shard per rank (", W, "), got ", sh.size()));
      return ExpectRowBlocks(t, tp.type, sh, 0, W, 0, 0, t.dim);
    case ShardingType::kTableRowWise:
      if (sh.size() != static_cast<size_t>(L))
        return TableError(t, StrCat("table_row_wise needs one shard per rank of a node (", L,
                                    "), got ", sh.size()));
      return ExpectRowBlocks(t, tp.type, sh, 0, L, sh[0].rank / L * L, 0, t.dim);
    case ShardingType::kColumnWise:
    case ShardingType::kTableColumnWise: {
      int32_t next = 0;
      for (size_t k = 0; k < sh.size(); ++k) {
        if (sh[k].row_offset != 0 || sh[k].rows != t.rows || sh[k].col_offset != next)
          return TableError(t, StrCat(type, " ", ShardText(k, sh[k]),
                                      " must be a full-height "
                                      "column block starting at column ",
                                      next));
        next += sh[k].cols;
        if (tp.type == ShardingType::kTableColumnWise && sh[k].rank / L != sh[0].rank / L)
          return TableError(
              t, StrCat("table_column_wise shards must stay in one node; ", ShardText(k, sh[k]),
                        " is on node ", sh[k].rank / L, ", shard 0 on node ", sh[0].rank / L));
      }
      return Status::Ok();
    }
    case ShardingType::kGrid: {
      if (sh.size() % L != 0)
        return TableError(t, StrCat("grid needs a multiple of ", L, " shards, got ", sh.size()));
      int32_t next = 0;
      for (size_t k = 0; k < sh.size(); k += L) {
        if (sh[k].col_offset != next)
          return TableError(t, StrCat("grid ", ShardText(k, sh[k]),
                                      " must start column block "
                                      "at column ",
                                      next));
        SR_RETURN_IF_ERROR(ExpectRowBlocks(t, tp.type, sh, k, L, sh[k].rank / L * L,
                                           sh[k].col_offset, sh[k].cols));
        next += sh[k].cols;
      }
      return Status::Ok();
    }
  }
  return TableError(t, "unknown sharding type");
}

}  // namespace

Status ValidatePlanConfigs(const Plan& plan) { return ValidateConfigs(plan); }

Status ValidatePlan(const Plan& plan) {
  SR_RETURN_IF_ERROR(ValidateConfigs(plan));
  if (plan.table_plans.size() != plan.tables.size())
    return Status::InvalidArgument("plan: ", plan.tables.size(), " tables but ",
                                   plan.table_plans.size(), " table plans");
  for (size_t ti = 0; ti < plan.tables.size(); ++ti) {
    const TableConfig& t = plan.tables[ti];
    const TablePlan& tp = plan.table_plans[ti];
    if (!IsValidShardingType(static_cast<int32_t>(tp.type)))
      return TableError(t, StrCat("unknown sharding type ", static_cast<int32_t>(tp.type)));
    if (tp.shards.empty()) return TableError(t, "has no shards");
    const bool row_split = tp.type == ShardingType::kRowWise ||
                           tp.type == ShardingType::kTableRowWise || tp.type == ShardingType::kGrid;
    for (size_t i = 0; i < tp.shards.size(); ++i) {
      const Shard& s = tp.shards[i];
      if (s.rank < 0 || s.rank >= plan.world_size)
        return TableError(t, StrCat(ShardText(i, s), ": rank ", s.rank,
                                    " does not exist (world_size ", plan.world_size, ")"));
      if (s.cols < 1 || s.rows < 0 || (s.rows == 0 && !row_split))
        return TableError(t, StrCat(ShardText(i, s), ": shard dims must be positive"));
      if (s.row_offset < 0 || s.col_offset < 0 || s.row_offset > t.rows - s.rows ||
          s.col_offset > t.dim - s.cols)
        return TableError(
            t, StrCat(ShardText(i, s), " lies outside the table (", t.rows, " x ", t.dim, ")"));
      // A dynamic shard numbers its slots (and its zero row) in 32 bits: a plan with a larger
      // shard could never be created, so it is refused here, where it is made or read.
      if (t.dynamic.enabled && s.rows > DynamicConfig::kMaxShardSlots)
        return Status::Unsupported("plan: table '", t.name, "': ", ShardText(i, s),
                                   " of the dynamic table has ", s.rows, " slots; at most ",
                                   DynamicConfig::kMaxShardSlots,
                                   " per shard (shard it over more ranks)");
    }
    if (tp.type != ShardingType::kDataParallel) SR_RETURN_IF_ERROR(ValidateCover(t, tp.shards));
    SR_RETURN_IF_ERROR(ValidateLayout(plan, t, tp));
  }
  return Status::Ok();
}

}  // namespace shardrec::sharding
