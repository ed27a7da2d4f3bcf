// The plan C structs converted to the planner's input (plan_convert.h).
#include "capi/src/plan_convert.h"

#include <cstdint>
#include <limits>
#include <string>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/struct_versions.h"
#include "capi/src/versioned.h"
#include "impl/core/check.h"
#include "shardrec/config.h"

namespace shardrec::capi {
namespace {

using sharding::ShardingType;

static_assert(SHARDREC_SHARDING_DATA_PARALLEL == static_cast<int>(ShardingType::kDataParallel));
static_assert(SHARDREC_SHARDING_TABLE_WISE == static_cast<int>(ShardingType::kTableWise));
static_assert(SHARDREC_SHARDING_ROW_WISE == static_cast<int>(ShardingType::kRowWise));
static_assert(SHARDREC_SHARDING_COLUMN_WISE == static_cast<int>(ShardingType::kColumnWise));
static_assert(SHARDREC_SHARDING_TABLE_ROW_WISE == static_cast<int>(ShardingType::kTableRowWise));
static_assert(SHARDREC_SHARDING_TABLE_COLUMN_WISE ==
              static_cast<int>(ShardingType::kTableColumnWise));
static_assert(SHARDREC_SHARDING_GRID == static_cast<int>(ShardingType::kGrid));
static_assert(SHARDREC_SHARDING_COUNT == sharding::kNumShardingTypes);
static_assert(SHARDREC_POOLING_NONE == static_cast<int>(sharding::PoolingType::kNone));
static_assert(SHARDREC_INIT_CONSTANT == static_cast<int>(sharding::InitConfig::Kind::kConstant));

}  // namespace

Status CheckArray(const void* p, size_t n, const std::string& what) {
  if (p == nullptr && n > 0) return Status::InvalidArgument(what, " is NULL but its count is ", n);
  return Status::Ok();
}

Status ConvertFeatures(const shardrec_feature_config_t* features, size_t n,
                       std::vector<sharding::FeatureConfig>* out) {
  std::vector<shardrec_feature_config_t> read;
  SR_RETURN_IF_ERROR(ReadVersionedArray(features, n, SHARDREC_FEATURE_CONFIG_INIT,
                                        kFeatureConfigVersions, "features", &read));
  for (size_t i = 0; i < n; ++i) {
    const auto& c = read[i];
    const std::string what = StrCat("features[", i, "]");
    if (c.name == nullptr) return Status::InvalidArgument(what, ".name must not be NULL");
    sharding::FeatureConfig f;
    f.name = c.name;
    f.pooling_factor = c.pooling_factor == 0.0f ? 1.0f : c.pooling_factor;
    out->push_back(std::move(f));
  }
  return Status::Ok();
}

Status ConvertTables(const shardrec_table_config_t* tables, size_t n,
                     const std::vector<sharding::FeatureConfig>& features,
                     std::vector<sharding::TableConfig>* out) {
  const size_t num_features = features.size();
  std::vector<shardrec_table_config_t> read;
  SR_RETURN_IF_ERROR(ReadVersionedArray(tables, n, SHARDREC_TABLE_CONFIG_INIT, kTableConfigVersions,
                                        "tables", &read));
  if (n == 0) return Status::InvalidArgument("num_tables must be >= 1");
  for (size_t i = 0; i < n; ++i) {
    // Fields a version-1 caller lacks (optimizer, feature names) hold their defaults here.
    const auto& c = read[i];
    std::string what = StrCat("tables[", i, "]");
    if (c.name == nullptr) return Status::InvalidArgument(what, ".name must not be NULL");
    what = StrCat("table '", c.name, "'");
    // A dynamic table may give its capacity in bytes instead (rows 0, resolved by the planner).
    int64_t capacity_bytes = 0;
    if (c.dynamic != nullptr && c.dynamic->version >= 2 &&
        c.dynamic->version <= SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION)
      capacity_bytes = c.dynamic->capacity_bytes;
    if (capacity_bytes < 0)
      return Status::InvalidArgument(what, ": dynamic capacity_bytes ", capacity_bytes,
                                     " must be >= 0");
    if (capacity_bytes > 0 && c.rows != 0)
      return Status::InvalidArgument(what, ": give the capacity as rows (", c.rows,
                                     ") or as dynamic capacity_bytes (", capacity_bytes,
                                     "), not both");
    if (capacity_bytes == 0 && c.rows <= 0)
      return Status::InvalidArgument(
          what, ": rows ", c.rows, " must be > 0",
          c.dynamic != nullptr ? " (or dynamic capacity_bytes > 0)" : "");
    if (c.dim <= 0) return Status::InvalidArgument(what, ": dim ", c.dim, " must be > 0");
    if (capacity_bytes == 0) SR_RETURN_IF_ERROR(sharding::CheckTableElements(c.rows, c.dim, what));
    if (c.pooling < SHARDREC_POOLING_SUM || c.pooling > SHARDREC_POOLING_NONE)
      return Status::InvalidArgument(what, ": unknown pooling ", c.pooling);
    if (c.dtype != SHARDREC_DTYPE_FLOAT32 && c.dtype != SHARDREC_DTYPE_FLOAT16 &&
        c.dtype != SHARDREC_DTYPE_BFLOAT16 && c.dtype != SHARDREC_DTYPE_FP8_E4M3 &&
        c.dtype != SHARDREC_DTYPE_FP8_E5M2)
      return Status::InvalidArgument(
          what, ": dtype ", c.dtype,
          " is not a weight type (FLOAT32, FLOAT16, BFLOAT16, FP8_E4M3, FP8_E5M2)");
    if (c.init_kind < SHARDREC_INIT_DEFAULT || c.init_kind > SHARDREC_INIT_CONSTANT)
      return Status::InvalidArgument(what, ": unknown init_kind ", c.init_kind);
    SR_RETURN_IF_ERROR(CheckArray(c.features, c.num_features, what + ": features"));
    const size_t num_names = c.num_feature_names;
    SR_RETURN_IF_ERROR(CheckArray(c.feature_names, num_names, what + ": feature_names"));
    if (c.num_features > 0 && num_names > 0)
      return Status::InvalidArgument(what, ": give its features by index or by name, not both");
    if (c.num_features == 0 && num_names == 0)
      return Status::InvalidArgument(what, ": num_features must be >= 1");
    sharding::TableConfig t;
    t.name = c.name;
    t.rows = c.rows;
    t.dim = c.dim;
    t.pooling = static_cast<sharding::PoolingType>(c.pooling);
    t.dtype = static_cast<DType>(c.dtype);
    for (size_t k = 0; k < num_names; ++k) {
      const char* name = c.feature_names[k];
      if (name == nullptr) return Status::InvalidArgument(what, ": feature_names[", k, "] is NULL");
      size_t f = 0;
      while (f < num_features && features[f].name != name) ++f;
      if (f == num_features)
        return Status::NotFound(what, ": no feature named '", name, "' is configured");
      t.features.push_back(static_cast<int32_t>(f));
    }
    if (c.optimizer != nullptr) {
      Status s = ToOptimizer(c.optimizer, &t.optimizer);
      if (!s.ok()) return Status(s.code(), StrCat(what, ": ", s.message()));
      t.has_optimizer = true;
    }
    for (size_t k = 0; k < c.num_features; ++k) {
      const int32_t f = c.features[k];
      if (f < 0 || static_cast<size_t>(f) >= num_features)
        return Status::InvalidArgument(what, ": unknown feature index ", f, " (", num_features,
                                       " features configured)");
      t.features.push_back(f);
    }
    t.init.kind = static_cast<sharding::InitConfig::Kind>(c.init_kind);
    t.init.low = c.init_low;
    t.init.high = c.init_high;
    if (c.dynamic != nullptr) {
      const shardrec_dynamic_table_config_t& d = *c.dynamic;
      SR_RETURN_IF_ERROR(CheckStructVersion(d.version, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION,
                                            StrCat(what, ": dynamic")));
      if (d.eviction < SHARDREC_EVICTION_NONE || d.eviction > SHARDREC_EVICTION_SCORE)
        return Status::InvalidArgument(what, ": unknown eviction policy ", d.eviction);
      if (d.admission_threshold < 0 ||
          d.admission_threshold > sharding::DynamicConfig::kMaxAdmissionThreshold)
        return Status::InvalidArgument(what, ": admission_threshold ", d.admission_threshold,
                                       " must be in [0, ",
                                       sharding::DynamicConfig::kMaxAdmissionThreshold,
                                       "] (the admission counts saturate there)");
      if (d.eviction == SHARDREC_EVICTION_TTL && d.ttl_steps < 1)
        return Status::InvalidArgument(what, ": TTL eviction needs ttl_steps >= 1 (got ",
                                       d.ttl_steps, ")");
      t.dynamic.enabled = true;
      t.dynamic.eviction = static_cast<sharding::DynamicConfig::Eviction>(d.eviction);
      t.dynamic.admission_threshold = d.admission_threshold;
      t.dynamic.ttl_steps = d.ttl_steps;
      t.dynamic.capacity_bytes = capacity_bytes;
      if (d.version >= 3) {
        if (d.admission_decay_steps < 0)
          return Status::InvalidArgument(what, ": admission_decay_steps ", d.admission_decay_steps,
                                         " must be >= 0");
        t.dynamic.admission_decay_steps = d.admission_decay_steps;
      }
    }
    out->push_back(std::move(t));
  }
  return Status::Ok();
}

Status ConvertTopology(const shardrec_topology_t* c, planner::Topology* out) {
  SR_RETURN_IF_ERROR(CheckNotNull(c, "topology"));
  SR_RETURN_IF_ERROR(CheckStructVersion(c->version, SHARDREC_TOPOLOGY_VERSION, "topology"));
  SR_RETURN_IF_ERROR(sharding::CheckWorldSize(c->world_size, "topology"));
  if (c->device_type != SHARDREC_DEVICE_HOST && c->device_type != SHARDREC_DEVICE_CUDA)
    return Status::InvalidArgument("topology: unknown device_type ", c->device_type);
  planner::Topology t = planner::Topology::Default(
      c->world_size, c->ranks_per_node == 0 ? c->world_size : c->ranks_per_node,
      static_cast<planner::ComputeDevice>(c->device_type));
  SR_RETURN_IF_ERROR(CheckArray(c->memory_bytes_per_rank, c->num_memory_bytes_per_rank,
                                "topology.memory_bytes_per_rank"));
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (c->num_memory_bytes_per_rank > 0) {
    if (c->num_memory_bytes_per_rank != static_cast<size_t>(c->world_size))
      return Status::InvalidArgument("topology: num_memory_bytes_per_rank ",
                                     c->num_memory_bytes_per_rank, " must be 0 or world_size (",
                                     c->world_size, ")");
    for (size_t r = 0; r < c->num_memory_bytes_per_rank; ++r) {
      const uint64_t m = c->memory_bytes_per_rank[r];
      if (m == 0 || m > kMax)
        return Status::InvalidArgument("topology: memory_bytes_per_rank[", r, "] = ", m,
                                       " must be in [1, 2^63)");
      t.memory_bytes.push_back(static_cast<int64_t>(m));
    }
  } else if (c->memory_bytes != 0) {
    if (c->memory_bytes > kMax)
      return Status::InvalidArgument("topology: memory_bytes ", c->memory_bytes, " is too large");
    t.memory_bytes.assign(static_cast<size_t>(c->world_size),
                          static_cast<int64_t>(c->memory_bytes));
  }
  // Bytes per second in the C API, bytes per millisecond inside (TorchRec's unit).
  if (c->intra_node_bandwidth != 0.0) t.intra_node_bw = c->intra_node_bandwidth / 1000.0;
  if (c->inter_node_bandwidth != 0.0) t.inter_node_bw = c->inter_node_bandwidth / 1000.0;
  if (c->memory_bandwidth != 0.0) t.memory_bw = c->memory_bandwidth / 1000.0;
  if (c->memory_bandwidth < 0.0)
    return Status::InvalidArgument("topology: memory_bandwidth must be >= 0");
  if (c->batch_size < 0)
    return Status::InvalidArgument("topology: batch_size ", c->batch_size, " must be >= 0");
  if (c->batch_size > 0) t.batch_size = c->batch_size;
  if (!optim::IsKnownOptimizerType(c->optimizer))
    return Status::InvalidArgument("topology: unknown optimizer ", c->optimizer);
  t.optimizer = static_cast<optim::OptimizerType>(c->optimizer);
  t.reserved_fraction = c->reserved_fraction;
  if (c->version >= 2) {
    // Seconds in the C API, milliseconds inside; 0 keeps the device default.
    if (!(c->collective_latency >= 0.0) || !(c->per_id_cost >= 0.0))
      return Status::InvalidArgument(
          "topology: collective_latency and per_id_cost must be >= 0 (0 means the default)");
    if (c->collective_latency != 0.0) t.collective_latency_ms = c->collective_latency * 1000.0;
    if (c->per_id_cost != 0.0) t.per_id_ms = c->per_id_cost * 1000.0;
  }
  if (c->version >= 3) {
    // Bytes/s and reads/s in the C API, per ms inside; 0 keeps the default.
    if (c->disk_capacity > kMax)
      return Status::InvalidArgument("topology: disk_capacity ", c->disk_capacity, " is too large");
    if (!(c->disk_read_bandwidth >= 0.0) || !(c->disk_read_iops >= 0.0))
      return Status::InvalidArgument(
          "topology: disk_read_bandwidth and disk_read_iops must be >= 0 (0 means the default)");
    if (c->disk_capacity != 0) t.disk_bytes = static_cast<int64_t>(c->disk_capacity);
    if (c->disk_read_bandwidth != 0.0) t.disk_read_bw = c->disk_read_bandwidth / 1000.0;
    if (c->disk_read_iops != 0.0) t.disk_read_iops = c->disk_read_iops / 1000.0;
  }
  SR_RETURN_IF_ERROR(t.Validate());
  *out = std::move(t);
  return Status::Ok();
}

Status ConvertConstraints(const shardrec_table_constraints_t* cs, size_t n,
                          std::vector<planner::TableConstraints>* out) {
  std::vector<shardrec_table_constraints_t> read;
  SR_RETURN_IF_ERROR(ReadVersionedArray(cs, n, SHARDREC_TABLE_CONSTRAINTS_INIT,
                                        kTableConstraintsVersions, "constraints", &read));
  for (size_t i = 0; i < n; ++i) {
    const auto& c = read[i];
    std::string what = StrCat("constraints[", i, "]");
    if (c.table == nullptr) return Status::InvalidArgument(what, ".table must not be NULL");
    SR_RETURN_IF_ERROR(CheckArray(c.ranks, c.num_ranks, what + ".ranks"));
    SR_RETURN_IF_ERROR(
        CheckArray(c.pooling_factors, c.num_pooling_factors, what + ".pooling_factors"));
    planner::TableConstraints t;
    t.table = c.table;
    t.sharding_types = c.sharding_types;
    t.min_partition = c.min_partition;
    if (c.num_ranks > 0) t.ranks.assign(c.ranks, c.ranks + c.num_ranks);
    if (c.num_pooling_factors > 0)
      t.pooling_factors.assign(c.pooling_factors, c.pooling_factors + c.num_pooling_factors);
    if (c.version >= 2) {
      if (c.tier_cache_bytes > static_cast<uint64_t>(INT64_MAX))
        return Status::InvalidArgument(what, ".tier_cache_bytes ", c.tier_cache_bytes,
                                       " is too large");
      if (!(c.tier_hit_rate >= 0.0 && c.tier_hit_rate <= 1.0))
        return Status::InvalidArgument(what, ".tier_hit_rate ", c.tier_hit_rate,
                                       " must be in [0, 1] (0: estimated)");
      t.tier_cache_bytes = static_cast<int64_t>(c.tier_cache_bytes);
      t.tier_hit_rate = c.tier_hit_rate > 0.0 ? c.tier_hit_rate : -1.0;
      t.id_zipf_alpha = c.id_zipf_alpha;
    }
    out->push_back(std::move(t));
  }
  return Status::Ok();
}

}  // namespace shardrec::capi
