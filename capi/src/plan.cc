// C API of plan.h and the config struct initialisers of config.h: converts the versioned C
// structs to impl configs, runs the planner, and answers queries on the immutable plan.
#include "shardrec/plan.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/struct_versions.h"
#include "capi/src/versioned.h"
#include "impl/core/check.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/planner/calibrate.h"
#include "impl/planner/calibrate_disk.h"
#include "impl/planner/planner.h"
#include "impl/planner/stats.h"
#include "impl/sharding/plan_json.h"
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

Status CopyText(const std::string& s, char** text_out, size_t* len_out) {
  SR_RETURN_IF_ERROR(CheckNotNull(text_out, "text_out"));
  char* buf = static_cast<char*>(std::malloc(s.size() + 1));
  if (buf == nullptr) return Status::OutOfMemory("cannot allocate ", s.size() + 1, " bytes");
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  *text_out = buf;
  if (len_out != nullptr) *len_out = s.size();
  return Status::Ok();
}

Status CheckPlan(const shardrec_plan_t* plan) {
  SR_RETURN_IF_ERROR(CheckNotNull(plan, "plan"));
  if (plan->impl == nullptr) return Status::InvalidArgument("plan handle is empty");
  return Status::Ok();
}

Status CheckTable(const shardrec_plan_t* plan, size_t table) {
  SR_RETURN_IF_ERROR(CheckPlan(plan));
  if (table >= plan->impl->tables.size())
    return Status::InvalidArgument("table index ", table, " is out of range (",
                                   plan->impl->tables.size(), " tables)");
  return Status::Ok();
}

// The calibration's gather runs the collections' lookup kernel on the calling thread, so the
// figure is the one their lookups reach (planner::CalibrateOptions::bag_sum).
void LookupBagSum(const float* table, int64_t table_rows, int32_t row_floats,
                  const int64_t* offsets, int64_t num_bags, const int64_t* rows, float* out) {
  embedding::kernels::LookupJob job;
  job.weights = {table, DType::kFloat32, table_rows, row_floats, row_floats};
  job.run.offsets = offsets;
  job.run.num_bags = num_bags;
  job.run.rows = rows;
  job.out = out;
  job.out_stride = row_floats;
  // An fp32 table on a host context cannot be refused.
  (void)embedding::kernels::Lookup(ExecContext::Host(nullptr), {&job, 1});
}

shardrec_plan_t* NewHandle(sharding::Plan plan, std::string stats) {
  auto h = std::make_unique<shardrec_plan>();
  auto impl = std::make_shared<const sharding::Plan>(std::move(plan));
  h->hash = impl->Hash();
  h->impl = std::move(impl);
  h->stats = std::move(stats);
  return h.release();
}

}  // namespace
}  // namespace shardrec::capi

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::NotNull;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_feature_config_init(shardrec_feature_config_t* config,
                                                            uint32_t version) {
  const shardrec_feature_config_t d = SHARDREC_FEATURE_CONFIG_INIT;
  return shardrec::capi::InitStruct(config, version, SHARDREC_FEATURE_CONFIG_VERSION, d,
                                    "feature config");
}

SHARDREC_API shardrec_status_t shardrec_table_config_init(shardrec_table_config_t* config,
                                                          uint32_t version) {
  const shardrec_table_config_t d = SHARDREC_TABLE_CONFIG_INIT;
  const auto& v = shardrec::capi::kTableConfigVersions;
  return shardrec::capi::InitStruct(config, version, SHARDREC_TABLE_CONFIG_VERSION, d,
                                    "table config", {v[0].fields, v[1].fields, v[2].fields});
}

SHARDREC_API shardrec_status_t
shardrec_dynamic_table_config_init(shardrec_dynamic_table_config_t* config, uint32_t version) {
  const shardrec_dynamic_table_config_t d = SHARDREC_DYNAMIC_TABLE_CONFIG_INIT;
  // Version 1 ended with ttl_steps (24 bytes), version 2 with capacity_bytes.
  return shardrec::capi::InitStruct(
      config, version, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION, d, "dynamic table config",
      {offsetof(shardrec_dynamic_table_config_t, capacity_bytes),
       offsetof(shardrec_dynamic_table_config_t, admission_decay_steps), sizeof(d)});
}

SHARDREC_API shardrec_status_t shardrec_topology_init(shardrec_topology_t* topology,
                                                      uint32_t version) {
  const shardrec_topology_t d = SHARDREC_TOPOLOGY_INIT;
  return shardrec::capi::InitStruct(
      topology, version, SHARDREC_TOPOLOGY_VERSION, d, "topology",
      {offsetof(shardrec_topology_t, collective_latency),
       offsetof(shardrec_topology_t, disk_capacity), sizeof(shardrec_topology_t)});
}

SHARDREC_API shardrec_status_t shardrec_topology_from_comm(shardrec_topology_t* topology,
                                                           shardrec_comm_t* comm) {
  return Enter({}, [&] {
    using shardrec::comm::ReduceOp;
    if (comm == nullptr || !comm->impl) return Status::InvalidArgument("comm must not be NULL");
    // Both refusals depend only on how the communicator was made, which every rank shares, so
    // no rank is left waiting in the all-reduce below.
    if (comm->local_size < 0)
      return Status::Unsupported(
          "the local size of a device communicator is known only when it was created from a "
          "launcher's environment; set topology.ranks_per_node by hand");
    if (!comm->impl->device().is_host())
      return Status::Unsupported(
          "shardrec_topology_from_comm takes a host communicator (its check of the hosts runs "
          "on host buffers); set topology.ranks_per_node from shardrec_comm_local_size");
    // A rank refusing its own topology (NULL, an unknown version) still takes part in the
    // all-reduce below, so its peers fail at once naming it instead of waiting for it.
    Status local = CheckNotNull(topology, "topology");
    if (local.ok())
      local = shardrec::capi::CheckStructVersion(topology->version, SHARDREC_TOPOLOGY_VERSION,
                                                 "topology");
    // The planner has one ranks_per_node, so every host must run as many ranks: min and max in
    // one all-reduce (the max as the min of the negated sizes), with the lowest refusing rank
    // (as the min of -(size - rank), 0 when none refused).
    const int32_t size = comm->impl->Size(), rank = comm->impl->Rank();
    int32_t sizes[3] = {comm->local_size, -comm->local_size, local.ok() ? 0 : -(size - rank)};
    const Status exchanged =
        comm->impl->AllReduce(sizes, sizes, 3, shardrec::DType::kInt32, ReduceOp::kMin);
    SR_RETURN_IF_ERROR(local);
    SR_RETURN_IF_ERROR(exchanged);
    if (sizes[2] != 0)
      return Status::InvalidArgument("rank ", size + sizes[2],
                                     " refused its arguments to shardrec_topology_from_comm (its "
                                     "error says why); no rank changed anything");
    if (sizes[0] != -sizes[1])
      return Status::InvalidArgument(
          "hosts run different numbers of ranks (between ", sizes[0], " and ", -sizes[1],
          "); the planner's ranks_per_node is one number: set it by hand or launch as many "
          "ranks on every host");
    topology->world_size = comm->impl->Size();
    topology->ranks_per_node = comm->local_size;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t
shardrec_table_constraints_init(shardrec_table_constraints_t* constraints, uint32_t version) {
  const shardrec_table_constraints_t d = SHARDREC_TABLE_CONSTRAINTS_INIT;
  const auto& v = shardrec::capi::kTableConstraintsVersions;
  return shardrec::capi::InitStruct(constraints, version, SHARDREC_TABLE_CONSTRAINTS_VERSION, d,
                                    "table constraints", {v[0].fields, v[1].fields});
}

SHARDREC_API shardrec_status_t
shardrec_calibrate_options_init(shardrec_calibrate_options_t* options, uint32_t version) {
  const shardrec_calibrate_options_t d = SHARDREC_CALIBRATE_OPTIONS_INIT;
  return shardrec::capi::InitStruct(options, version, SHARDREC_CALIBRATE_OPTIONS_VERSION, d,
                                    "calibrate options");
}

SHARDREC_API shardrec_status_t shardrec_calibration_init(shardrec_calibration_t* calibration,
                                                         uint32_t version) {
  const shardrec_calibration_t d = SHARDREC_CALIBRATION_INIT;
  return shardrec::capi::InitStruct(calibration, version, SHARDREC_CALIBRATION_VERSION, d,
                                    "calibration");
}

SHARDREC_API shardrec_status_t shardrec_topology_calibrate_disk(
    shardrec_topology_t* topology, const char* dir, uint64_t file_bytes, double time_budget,
    double* iops_out, int32_t* direct_out) {
  return Enter({NotNull(topology, "topology"), NotNull(dir, "dir")}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckStructVersion(topology->version,
                                                          SHARDREC_TOPOLOGY_VERSION, "topology"));
    if (topology->version < 3)
      return Status::InvalidArgument(
          "topology: disk calibration needs struct version >= 3 (older versions have no disk "
          "figures); fill it with shardrec_topology_init(t, SHARDREC_TOPOLOGY_VERSION)");
    if (!(time_budget >= 0.0 && time_budget <= 3600.0))
      return Status::InvalidArgument("time_budget ", time_budget, " must be in [0, 3600] seconds");
    SR_RETURN_IF_ERROR(shardrec::sharding::CheckWorldSize(topology->world_size, "topology"));
    if (topology->ranks_per_node < 0 || topology->ranks_per_node > topology->world_size)
      return Status::InvalidArgument("topology: ranks_per_node ", topology->ranks_per_node,
                                     " must be in [0, world_size=", topology->world_size, "]");
    const double ranks =
        topology->ranks_per_node == 0 ? topology->world_size : topology->ranks_per_node;
    shardrec::planner::DiskCalibration c;
    SR_RETURN_IF_ERROR(
        shardrec::planner::CalibrateDisk(dir, file_bytes == 0 ? uint64_t{256} << 20 : file_bytes, 8,
                                         (time_budget > 0 ? time_budget : 1.0) * 1000.0, &c));
    // Per ms inside, per second here; the machine's figures shared by its ranks.
    topology->disk_read_iops = c.read_iops * 1000.0 / ranks;
    topology->disk_read_bandwidth = c.read_bw * 1000.0 / ranks;
    if (topology->disk_capacity == 0)
      topology->disk_capacity = static_cast<uint64_t>(static_cast<double>(c.free_bytes) / ranks);
    if (iops_out != nullptr) *iops_out = c.read_iops * 1000.0;
    if (direct_out != nullptr) *direct_out = c.direct_io ? 1 : 0;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_topology_calibrate(
    shardrec_topology_t* topology, const shardrec_calibrate_options_t* options,
    shardrec_calibration_t* calibration) {
  return Enter({}, [&] {
    using shardrec::capi::CheckStructVersion;
    using shardrec::capi::Enter;
    using shardrec::capi::NotNull;
    SR_RETURN_IF_ERROR(CheckNotNull(topology, "topology"));
    SR_RETURN_IF_ERROR(
        CheckStructVersion(topology->version, SHARDREC_TOPOLOGY_VERSION, "topology"));
    if (topology->version < 2)
      return Status::InvalidArgument(
          "topology: calibration needs struct version >= 2 (version 1 has no "
          "collective_latency); fill it with shardrec_topology_init(t, SHARDREC_TOPOLOGY_VERSION)");
    shardrec::planner::CalibrateOptions opts;
    if (options != nullptr) {
      SR_RETURN_IF_ERROR(CheckStructVersion(options->version, SHARDREC_CALIBRATE_OPTIONS_VERSION,
                                            "calibrate options"));
      if (!(options->time_budget >= 0.0) || !std::isfinite(options->time_budget))
        return Status::InvalidArgument("calibrate options: time_budget ", options->time_budget,
                                       " must be finite and >= 0");
      if (options->threads_per_rank < 0 || options->threads_per_rank > 256)
        return Status::InvalidArgument("calibrate options: threads_per_rank ",
                                       options->threads_per_rank, " must be in [0, 256]");
      opts.ranks_share_memory = options->ranks_share_memory != 0;
      opts.threads_per_rank = std::max(options->threads_per_rank, 1);
      if (options->time_budget > 0) opts.budget_ms = options->time_budget * 1000.0;
    }
    if (calibration != nullptr)
      SR_RETURN_IF_ERROR(
          CheckStructVersion(calibration->version, SHARDREC_CALIBRATION_VERSION, "calibration"));
    SR_RETURN_IF_ERROR(shardrec::sharding::CheckWorldSize(topology->world_size, "topology"));
    if (topology->ranks_per_node < 0 || topology->ranks_per_node > topology->world_size)
      return Status::InvalidArgument("topology: ranks_per_node ", topology->ranks_per_node,
                                     " must be in [0, world_size=", topology->world_size,
                                     "] before calibrating");
    if (!(topology->per_id_cost >= 0.0))
      return Status::InvalidArgument("topology: per_id_cost must be >= 0");
    opts.ranks_per_node =
        topology->ranks_per_node == 0 ? topology->world_size : topology->ranks_per_node;
    if (options != nullptr) {
      if (options->ranks_per_machine < 0 || options->ranks_per_machine > 65536)
        return Status::InvalidArgument("calibrate options: ranks_per_machine ",
                                       options->ranks_per_machine, " must be in [0, 65536]");
      if (options->ranks_per_machine > 0) opts.ranks_per_node = options->ranks_per_machine;
    }
    opts.bag_sum = &shardrec::capi::LookupBagSum;
    shardrec::planner::Calibration c;
    SR_RETURN_IF_ERROR(shardrec::planner::Calibrate(opts, &c));
    // Bytes/ms and ms inside; bytes/s and seconds in the C API.
    topology->memory_bandwidth = c.gather_bw * 1000.0;
    // Ranks on one machine exchange over loopback TCP whether they are threads of one process
    // (a local group runs Gloo over 127.0.0.1 too) or processes: a world-2 gradient all-to-all
    // between rank threads moved ~1.3 GB/s here, like the loopback figure, not the ~10 GB/s of a
    // memcpy. Rank threads also wait for one another at each collective (the hand-off).
    topology->intra_node_bandwidth = c.loopback_bw * 1000.0;
    topology->collective_latency =
        (c.loopback_latency + (opts.ranks_share_memory ? c.handoff_latency : 0.0)) / 1000.0;
    // Ranks beyond the cores share them: their per-id host work takes that much longer. A
    // caller's own per_id_cost stands (so calibrating twice does not scale it twice).
    if (topology->device_type == SHARDREC_DEVICE_HOST && topology->per_id_cost == 0.0)
      topology->per_id_cost = shardrec::planner::kHostPerIdMs * c.oversubscription / 1000.0;
    if (calibration != nullptr) {
      calibration->oversubscription = c.oversubscription;
      calibration->gather_bandwidth = c.gather_bw * 1000.0;
      calibration->stream_bandwidth = c.stream_bw * 1000.0;
      calibration->loopback_bandwidth = c.loopback_bw * 1000.0;
      calibration->loopback_latency = c.loopback_latency / 1000.0;
      calibration->handoff_latency = c.handoff_latency / 1000.0;
      calibration->elapsed = c.elapsed_ms / 1000.0;
    }
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t
shardrec_plan_create(shardrec_plan_t** out, const shardrec_table_config_t* tables,
                     size_t num_tables, const shardrec_feature_config_t* features,
                     size_t num_features, const shardrec_topology_t* topology,
                     const shardrec_table_constraints_t* constraints, size_t num_constraints) {
  return Enter({}, [&] {
    namespace capi = shardrec::capi;
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    shardrec::planner::PlannerInput input;
    SR_RETURN_IF_ERROR(capi::ConvertFeatures(features, num_features, &input.features));
    SR_RETURN_IF_ERROR(capi::ConvertTables(tables, num_tables, input.features, &input.tables));
    SR_RETURN_IF_ERROR(capi::ConvertTopology(topology, &input.topology));
    SR_RETURN_IF_ERROR(capi::ConvertConstraints(constraints, num_constraints, &input.constraints));
    shardrec::planner::PlannerResult result;
    SR_RETURN_IF_ERROR(shardrec::planner::MakePlan(input, &result));
    *out = capi::NewHandle(std::move(result.plan), std::move(result.stats));
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_from_json(shardrec_plan_t** out, const char* text,
                                                       size_t len) {
  return Enter({NotNull(out, "out")}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckArray(text, len, "text"));
    shardrec::sharding::Plan plan;
    SR_RETURN_IF_ERROR(shardrec::sharding::PlanFromJson(
        std::string_view(text == nullptr ? "" : text, len), &plan));
    const auto topo = shardrec::planner::Topology::Default(plan.world_size, plan.local_world_size,
                                                           shardrec::planner::ComputeDevice::kHost);
    shardrec::planner::StatsInfo info;
    std::string stats = shardrec::planner::FormatStats(
        plan, topo, shardrec::planner::FeaturePoolingFactors(plan), info);
    *out = shardrec::capi::NewHandle(std::move(plan), std::move(stats));
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_to_json(const shardrec_plan_t* plan, char** text_out,
                                                     size_t* len_out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPlan(plan));
    return shardrec::capi::CopyText(shardrec::sharding::PlanToJson(*plan->impl), text_out, len_out);
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_stats(const shardrec_plan_t* plan, char** text_out,
                                                   size_t* len_out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPlan(plan));
    return shardrec::capi::CopyText(plan->stats, text_out, len_out);
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_hash(const shardrec_plan_t* plan, uint64_t* out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPlan(plan));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = plan->hash;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_world_size(const shardrec_plan_t* plan, int32_t* out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPlan(plan));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = plan->impl->world_size;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_ranks_per_node(const shardrec_plan_t* plan,
                                                            int32_t* out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPlan(plan));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = plan->impl->local_world_size;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_num_tables(const shardrec_plan_t* plan, size_t* out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPlan(plan));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = plan->impl->tables.size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_num_features(const shardrec_plan_t* plan,
                                                          size_t* out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPlan(plan));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = plan->impl->features.size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_feature_name(const shardrec_plan_t* plan,
                                                          size_t feature, const char** name_out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPlan(plan));
    SR_RETURN_IF_ERROR(CheckNotNull(name_out, "name_out"));
    if (feature >= plan->impl->features.size())
      return Status::InvalidArgument("feature index ", feature, " is out of range (",
                                     plan->impl->features.size(), " features)");
    *name_out = plan->impl->features[feature].name.c_str();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_table_name(const shardrec_plan_t* plan, size_t table,
                                                        const char** name_out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckTable(plan, table));
    SR_RETURN_IF_ERROR(CheckNotNull(name_out, "name_out"));
    *name_out = plan->impl->tables[table].name.c_str();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_find_table(const shardrec_plan_t* plan,
                                                        const char* name, size_t* index_out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPlan(plan));
    SR_RETURN_IF_ERROR(CheckNotNull(name, "name"));
    SR_RETURN_IF_ERROR(CheckNotNull(index_out, "index_out"));
    const int32_t t = plan->impl->TableIndex(name);
    if (t < 0) return Status::NotFound("no table named '", name, "' in the plan");
    *index_out = static_cast<size_t>(t);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_table_rows(const shardrec_plan_t* plan, size_t table,
                                                        int64_t* out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckTable(plan, table));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = plan->impl->tables[table].rows;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_table_dim(const shardrec_plan_t* plan, size_t table,
                                                       int32_t* out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckTable(plan, table));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = plan->impl->tables[table].dim;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_table_sharding(const shardrec_plan_t* plan,
                                                            size_t table, int32_t* type_out,
                                                            size_t* num_shards_out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckTable(plan, table));
    const auto& tp = plan->impl->table_plans[table];
    if (type_out != nullptr) *type_out = static_cast<int32_t>(tp.type);
    if (num_shards_out != nullptr) *num_shards_out = tp.shards.size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_plan_shard(const shardrec_plan_t* plan, size_t table,
                                                   size_t shard, shardrec_shard_t* out) {
  return Enter({}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckTable(plan, table));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    const auto& shards = plan->impl->table_plans[table].shards;
    if (shard >= shards.size())
      return Status::InvalidArgument("shard index ", shard, " is out of range (table '",
                                     plan->impl->tables[table].name, "' has ", shards.size(),
                                     " shards)");
    const auto& s = shards[shard];
    out->row_offset = s.row_offset;
    out->rows = s.rows;
    out->col_offset = s.col_offset;
    out->cols = s.cols;
    out->rank = s.rank;
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_plan_destroy(shardrec_plan_t* plan) { delete plan; }

}  // extern "C"
