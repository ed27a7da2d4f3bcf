// C API of plan.h's plan calls and the config struct initialisers of config.h: runs the planner on
// the converted C structs (plan_convert.h) and answers queries on the immutable plan. The topology
// calls (initialiser, layout from a communicator, calibration) are in plan_topology.cc.
#include "shardrec/plan.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/plan_convert.h"
#include "capi/src/struct_versions.h"
#include "capi/src/versioned.h"
#include "impl/core/check.h"
#include "impl/planner/planner.h"
#include "impl/planner/stats.h"
#include "impl/sharding/plan_json.h"
#include "shardrec/config.h"

namespace shardrec::capi {
namespace {

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

SHARDREC_API shardrec_status_t
shardrec_table_constraints_init(shardrec_table_constraints_t* constraints, uint32_t version) {
  const shardrec_table_constraints_t d = SHARDREC_TABLE_CONSTRAINTS_INIT;
  const auto& v = shardrec::capi::kTableConstraintsVersions;
  return shardrec::capi::InitStruct(constraints, version, SHARDREC_TABLE_CONSTRAINTS_VERSION, d,
                                    "table constraints", {v[0].fields, v[1].fields});
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
