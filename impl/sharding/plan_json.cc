// Plan JSON export/import. Member order is fixed on export; unknown members are ignored on
// import so that later versions may append fields.
#include "impl/sharding/plan_json.h"

#include <limits>

#include "impl/core/check.h"
#include "impl/sharding/json.h"

namespace shardrec::sharding {
namespace {

constexpr const char* kPoolingNames[] = {"sum", "mean", "none"};
constexpr const char* kInitNames[] = {"default", "uniform", "constant"};

void Key(std::string* o, const char* k) {
  json::AppendString(o, k);
  o->append(": ");
}

template <typename T>
Status IntMember(const json::Value& obj, const std::string& where, const char* key, T* out) {
  const json::Value* v = nullptr;
  SR_RETURN_IF_ERROR(json::GetMember(obj, where, key, &v));
  int64_t x = 0;
  SR_RETURN_IF_ERROR(json::GetInt(*v, where + "." + key, &x));
  if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
    return Status::InvalidArgument("plan json: ", where, ".", key, " = ", x, " is out of range");
  *out = static_cast<T>(x);
  return Status::Ok();
}

Status FloatMember(const json::Value& obj, const std::string& where, const char* key, float* out) {
  const json::Value* v = nullptr;
  SR_RETURN_IF_ERROR(json::GetMember(obj, where, key, &v));
  return json::GetFloat(*v, where + "." + key, out);
}

Status StringMember(const json::Value& obj, const std::string& where, const char* key,
                    std::string* out) {
  const json::Value* v = nullptr;
  SR_RETURN_IF_ERROR(json::GetMember(obj, where, key, &v));
  return json::GetString(*v, where + "." + key, out);
}

template <size_t N>
Status EnumMember(const json::Value& obj, const std::string& where, const std::string& table,
                  const char* key, const char* const (&names)[N], int32_t* out) {
  std::string s;
  SR_RETURN_IF_ERROR(StringMember(obj, where, key, &s));
  for (size_t i = 0; i < N; ++i) {
    if (s == names[i]) {
      *out = static_cast<int32_t>(i);
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("plan: table '", table, "': unknown ", key, " \"", s, "\"");
}

// A table's own optimizer: {"type": "adam", "learning_rate": ..., ...}; every field is written
// by PlanToJson, so all are required.
Status ParseOptimizer(const json::Value& ov, const std::string& where, const std::string& table,
                      optim::OptimizerConfig* o) {
  std::string name;
  SR_RETURN_IF_ERROR(StringMember(ov, where, "type", &name));
  bool found = false;
  for (int32_t i = 0; i < optim::kNumOptimizerTypes && !found; ++i) {
    if (name == optim::OptimizerName(static_cast<optim::OptimizerType>(i))) {
      o->type = static_cast<optim::OptimizerType>(i);
      found = true;
    }
  }
  if (!found)
    return Status::InvalidArgument("plan: table '", table, "': unknown optimizer \"", name, "\"");
  SR_RETURN_IF_ERROR(FloatMember(ov, where, "learning_rate", &o->learning_rate));
  SR_RETURN_IF_ERROR(FloatMember(ov, where, "eps", &o->eps));
  SR_RETURN_IF_ERROR(FloatMember(ov, where, "beta1", &o->beta1));
  SR_RETURN_IF_ERROR(FloatMember(ov, where, "beta2", &o->beta2));
  SR_RETURN_IF_ERROR(FloatMember(ov, where, "weight_decay", &o->weight_decay));
  int32_t mode = 0, stochastic = 0;
  SR_RETURN_IF_ERROR(IntMember(ov, where, "weight_decay_mode", &mode));
  SR_RETURN_IF_ERROR(IntMember(ov, where, "stochastic_rounding", &stochastic));
  o->weight_decay_mode = static_cast<optim::WeightDecayMode>(mode);
  o->stochastic_rounding = stochastic != 0;
  return Status::Ok();
}

Status ParseTable(const json::Value& tv, const std::string& where, TableConfig* t, TablePlan* tp) {
  SR_RETURN_IF_ERROR(StringMember(tv, where, "name", &t->name));
  SR_RETURN_IF_ERROR(IntMember(tv, where, "rows", &t->rows));
  SR_RETURN_IF_ERROR(IntMember(tv, where, "dim", &t->dim));
  int32_t e = 0;
  SR_RETURN_IF_ERROR(EnumMember(tv, where, t->name, "pooling", kPoolingNames, &e));
  t->pooling = static_cast<PoolingType>(e);
  std::string dtype;
  SR_RETURN_IF_ERROR(StringMember(tv, where, "dtype", &dtype));
  bool found = false;
  for (int32_t d = 0; d <= kMaxDTypeValue && !found; ++d) {
    if (dtype == DTypeName(static_cast<DType>(d))) {
      t->dtype = static_cast<DType>(d);
      found = true;
    }
  }
  if (!found)
    return Status::InvalidArgument("plan: table '", t->name, "': unknown dtype \"", dtype, "\"");
  const json::Value* fv = nullptr;
  SR_RETURN_IF_ERROR(json::GetMember(tv, where, "features", &fv));
  SR_RETURN_IF_ERROR(json::ExpectArray(*fv, where + ".features"));
  for (size_t i = 0; i < fv->items.size(); ++i) {
    int64_t f = 0;
    SR_RETURN_IF_ERROR(json::GetInt(fv->items[i], StrCat(where, ".features[", i, "]"), &f));
    if (f < std::numeric_limits<int32_t>::min() || f > std::numeric_limits<int32_t>::max())
      return Status::InvalidArgument("plan: table '", t->name, "': feature index ", f,
                                     " is out of range");
    t->features.push_back(static_cast<int32_t>(f));
  }
  const json::Value* iv = nullptr;
  SR_RETURN_IF_ERROR(json::GetMember(tv, where, "init", &iv));
  SR_RETURN_IF_ERROR(EnumMember(*iv, where + ".init", t->name, "kind", kInitNames, &e));
  t->init.kind = static_cast<InitConfig::Kind>(e);
  SR_RETURN_IF_ERROR(FloatMember(*iv, where + ".init", "low", &t->init.low));
  SR_RETURN_IF_ERROR(FloatMember(*iv, where + ".init", "high", &t->init.high));
  if (const json::Value* ov = tv.Find("optimizer")) {
    t->has_optimizer = true;
    SR_RETURN_IF_ERROR(ParseOptimizer(*ov, where + ".optimizer", t->name, &t->optimizer));
  }
  if (const json::Value* dv = tv.Find("dynamic")) {
    const std::string dw = where + ".dynamic";
    int64_t ev = 0, threshold = 0, ttl = 0;
    SR_RETURN_IF_ERROR(json::GetMember(*dv, dw, "eviction", &fv));
    SR_RETURN_IF_ERROR(json::GetInt(*fv, dw + ".eviction", &ev));
    SR_RETURN_IF_ERROR(json::GetMember(*dv, dw, "admission_threshold", &fv));
    SR_RETURN_IF_ERROR(json::GetInt(*fv, dw + ".admission_threshold", &threshold));
    SR_RETURN_IF_ERROR(json::GetMember(*dv, dw, "ttl_steps", &fv));
    SR_RETURN_IF_ERROR(json::GetInt(*fv, dw + ".ttl_steps", &ttl));
    if (ev < 0 || ev > 4 || threshold < 0 || threshold > std::numeric_limits<int32_t>::max())
      return Status::InvalidArgument("plan: table '", t->name, "': bad dynamic config");
    t->dynamic.enabled = true;
    t->dynamic.eviction = static_cast<DynamicConfig::Eviction>(ev);
    t->dynamic.admission_threshold = static_cast<int32_t>(threshold);
    t->dynamic.ttl_steps = ttl;
    // Optional: the capacity in bytes the rows were resolved from (absent: given in rows).
    if (const json::Value* bv = dv->Find("capacity_bytes"))
      SR_RETURN_IF_ERROR(json::GetInt(*bv, dw + ".capacity_bytes", &t->dynamic.capacity_bytes));
    // Optional: absent, admission counts never decay.
    if (const json::Value* av = dv->Find("admission_decay_steps"))
      SR_RETURN_IF_ERROR(
          json::GetInt(*av, dw + ".admission_decay_steps", &t->dynamic.admission_decay_steps));
  }
  std::string type;
  SR_RETURN_IF_ERROR(StringMember(tv, where, "sharding", &type));
  if (!ShardingTypeFromName(type, &tp->type))
    return Status::InvalidArgument("plan: table '", t->name, "': unknown sharding type \"", type,
                                   "\"");
  const json::Value* sv = nullptr;
  SR_RETURN_IF_ERROR(json::GetMember(tv, where, "shards", &sv));
  SR_RETURN_IF_ERROR(json::ExpectArray(*sv, where + ".shards"));
  for (size_t i = 0; i < sv->items.size(); ++i) {
    const std::string sw = StrCat(where, ".shards[", i, "]");
    Shard s;
    SR_RETURN_IF_ERROR(IntMember(sv->items[i], sw, "row_offset", &s.row_offset));
    SR_RETURN_IF_ERROR(IntMember(sv->items[i], sw, "rows", &s.rows));
    SR_RETURN_IF_ERROR(IntMember(sv->items[i], sw, "col_offset", &s.col_offset));
    SR_RETURN_IF_ERROR(IntMember(sv->items[i], sw, "cols", &s.cols));
    SR_RETURN_IF_ERROR(IntMember(sv->items[i], sw, "rank", &s.rank));
    tp->shards.push_back(s);
  }
  return Status::Ok();
}

}  // namespace

std::string PlanToJson(const Plan& plan) {
  SR_CHECK(plan.tables.size() == plan.table_plans.size());
  std::string o;
  o.append("{\n  ");
  Key(&o, "format");
  o.append("\"shardrec.plan\",\n  ");
  Key(&o, "version");
  o.append(StrCat(kPlanJsonVersion, ",\n  "));
  Key(&o, "world_size");
  o.append(StrCat(plan.world_size, ",\n  "));
  Key(&o, "ranks_per_node");
  o.append(StrCat(plan.local_world_size, ",\n  "));
  if (plan.planned_optimizer >= 0) {
    Key(&o, "planned_optimizer");
    json::AppendString(
        &o, optim::OptimizerName(static_cast<optim::OptimizerType>(plan.planned_optimizer)));
    o.append(",\n  ");
  }
  if (plan.host_reduce >= 0) {
    Key(&o, "host_reduce");
    o.append(plan.host_reduce != 0 ? "true,\n  " : "false,\n  ");
  }
  Key(&o, "features");
  o.append("[");
  for (size_t i = 0; i < plan.features.size(); ++i) {
    o.append(i ? ",\n    {" : "\n    {");
    Key(&o, "name");
    json::AppendString(&o, plan.features[i].name);
    o.append(", ");
    Key(&o, "pooling_factor");
    o.append(json::FormatFloat(plan.features[i].pooling_factor));
    o.append("}");
  }
  o.append(plan.features.empty() ? "],\n  " : "\n  ],\n  ");
  Key(&o, "tables");
  o.append("[");
  for (size_t ti = 0; ti < plan.tables.size(); ++ti) {
    const TableConfig& t = plan.tables[ti];
    const TablePlan& tp = plan.table_plans[ti];
    o.append(ti ? ",\n    {\n      " : "\n    {\n      ");
    Key(&o, "name");
    json::AppendString(&o, t.name);
    o.append(StrCat(", \"rows\": ", t.rows, ", \"dim\": ", t.dim, ", \"pooling\": "));
    const auto pooling = static_cast<int32_t>(t.pooling);
    json::AppendString(&o, pooling >= 0 && pooling < 3 ? kPoolingNames[pooling] : "?");
    o.append(", \"dtype\": ");
    json::AppendString(&o, DTypeName(t.dtype));
    o.append(",\n      \"features\": [");
    for (size_t i = 0; i < t.features.size(); ++i) o.append(StrCat(i ? ", " : "", t.features[i]));
    o.append("],\n      \"init\": {\"kind\": ");
    const auto kind = static_cast<int32_t>(t.init.kind);
    json::AppendString(&o, kind >= 0 && kind < 3 ? kInitNames[kind] : "?");
    o.append(StrCat(", \"low\": ", json::FormatFloat(t.init.low),
                    ", \"high\": ", json::FormatFloat(t.init.high), "},\n      "));
    if (t.has_optimizer) {
      const optim::OptimizerConfig& oc = t.optimizer;
      Key(&o, "optimizer");
      o.append("{\"type\": ");
      json::AppendString(&o, optim::OptimizerName(oc.type));
      o.append(StrCat(", \"learning_rate\": ", json::FormatFloat(oc.learning_rate), ", \"eps\": ",
                      json::FormatFloat(oc.eps), ", \"beta1\": ", json::FormatFloat(oc.beta1),
                      ", \"beta2\": ", json::FormatFloat(oc.beta2),
                      ", \"weight_decay\": ", json::FormatFloat(oc.weight_decay),
                      ", \"weight_decay_mode\": ", static_cast<int32_t>(oc.weight_decay_mode),
                      ", \"stochastic_rounding\": ", oc.stochastic_rounding ? 1 : 0, "},\n      "));
    }
    if (t.dynamic.enabled) {
      Key(&o, "dynamic");
      o.append(StrCat("{\"eviction\": ", static_cast<int32_t>(t.dynamic.eviction),
                      ", \"admission_threshold\": ", t.dynamic.admission_threshold,
                      ", \"ttl_steps\": ", t.dynamic.ttl_steps));
      if (t.dynamic.capacity_bytes > 0)
        o.append(StrCat(", \"capacity_bytes\": ", t.dynamic.capacity_bytes));
      if (t.dynamic.admission_decay_steps > 0)
        o.append(StrCat(", \"admission_decay_steps\": ", t.dynamic.admission_decay_steps));
      o.append("},\n      ");
    }
    Key(&o, "sharding");
    json::AppendString(&o, ShardingTypeName(tp.type));
    o.append(",\n      \"shards\": [");
    for (size_t i = 0; i < tp.shards.size(); ++i) {
      const Shard& s = tp.shards[i];
      o.append(StrCat(i ? ",\n        " : "\n        ", "{\"row_offset\": ", s.row_offset,
                      ", \"rows\": ", s.rows, ", \"col_offset\": ", s.col_offset,
                      ", \"cols\": ", s.cols, ", \"rank\": ", s.rank, "}"));
    }
    o.append(tp.shards.empty() ? "]\n    }" : "\n      ]\n    }");
  }
  o.append(plan.tables.empty() ? "]\n}\n" : "\n  ]\n}\n");
  return o;
}

Status PlanFromJson(std::string_view text, Plan* out) {
  json::Value root;
  SR_RETURN_IF_ERROR(json::Parse(text, &root));
  std::string format;
  SR_RETURN_IF_ERROR(StringMember(root, "plan", "format", &format));
  if (format != "shardrec.plan")
    return Status::Corrupt("plan json: format is \"", format, "\", expected \"shardrec.plan\"");
  int32_t version = 0;
  SR_RETURN_IF_ERROR(IntMember(root, "plan", "version", &version));
  if (version != kPlanJsonVersion)
    return Status::InvalidArgument("plan json: unsupported version ", version,
                                   " (this library "
                                   "reads version ",
                                   kPlanJsonVersion, ")");
  Plan plan;
  SR_RETURN_IF_ERROR(IntMember(root, "plan", "world_size", &plan.world_size));
  SR_RETURN_IF_ERROR(IntMember(root, "plan", "ranks_per_node", &plan.local_world_size));
  if (const json::Value* pv = root.Find("planned_optimizer")) {
    std::string name;
    SR_RETURN_IF_ERROR(json::GetString(*pv, "planned_optimizer", &name));
    for (int32_t i = 0; i < optim::kNumOptimizerTypes; ++i)
      if (name == optim::OptimizerName(static_cast<optim::OptimizerType>(i)))
        plan.planned_optimizer = i;
    if (plan.planned_optimizer < 0)
      return Status::InvalidArgument("plan: unknown planned_optimizer \"", name, "\"");
  }
  if (const json::Value* hv = root.Find("host_reduce")) {
    if (hv->kind != json::Value::Kind::kBool)
      return Status::Corrupt("plan json: host_reduce must be true or false (byte ", hv->offset,
                             ")");
    plan.host_reduce = hv->boolean ? 1 : 0;
  }
  const json::Value* fv = nullptr;
  SR_RETURN_IF_ERROR(json::GetMember(root, "plan", "features", &fv));
  SR_RETURN_IF_ERROR(json::ExpectArray(*fv, "features"));
  for (size_t i = 0; i < fv->items.size(); ++i) {
    const std::string where = StrCat("features[", i, "]");
    FeatureConfig f;
    SR_RETURN_IF_ERROR(StringMember(fv->items[i], where, "name", &f.name));
    SR_RETURN_IF_ERROR(FloatMember(fv->items[i], where, "pooling_factor", &f.pooling_factor));
    plan.features.push_back(std::move(f));
  }
  const json::Value* tv = nullptr;
  SR_RETURN_IF_ERROR(json::GetMember(root, "plan", "tables", &tv));
  SR_RETURN_IF_ERROR(json::ExpectArray(*tv, "tables"));
  for (size_t i = 0; i < tv->items.size(); ++i) {
    TableConfig t;
    TablePlan tp;
    SR_RETURN_IF_ERROR(ParseTable(tv->items[i], StrCat("tables[", i, "]"), &t, &tp));
    plan.tables.push_back(std::move(t));
    plan.table_plans.push_back(std::move(tp));
  }
  SR_RETURN_IF_ERROR(ValidatePlan(plan));
  *out = std::move(plan);
  return Status::Ok();
}

}  // namespace shardrec::sharding
