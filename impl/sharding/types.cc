// Sharding type names and the plan's stable hash.
#include "impl/sharding/types.h"

#include <bit>
#include <cstring>

namespace shardrec::sharding {

namespace {
constexpr const char* kNames[kNumShardingTypes] = {
    "data_parallel",  "table_wise",        "row_wise", "column_wise",
    "table_row_wise", "table_column_wise", "grid"};
constexpr const char* kShortNames[kNumShardingTypes] = {"DP",   "TW",   "RW",  "CW",
                                                        "TWRW", "TWCW", "GRID"};

// FNV-1a over a canonical little-endian byte stream; strings are length-prefixed so that
// ("ab","c") and ("a","bc") differ. Independent of pointers, padding and platform.
class Fnv {
 public:
  void Bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 1099511628211ull;
    }
  }
  void U64(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    Bytes(b, 8);
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F32(float v) { U64(std::bit_cast<uint32_t>(v)); }
  void Str(const std::string& s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 14695981039346656037ull;
};
}  // namespace

const char* ShardingTypeName(ShardingType t) {
  const auto i = static_cast<int32_t>(t);
  return IsValidShardingType(i) ? kNames[i] : "unknown";
}

const char* ShardingTypeShortName(ShardingType t) {
  const auto i = static_cast<int32_t>(t);
  return IsValidShardingType(i) ? kShortNames[i] : "?";
}

Status CheckWorldSize(int64_t world_size, const std::string& what) {
  if (world_size < 1 || world_size > kMaxWorldSize)
    return Status::InvalidArgument(what, ": world_size ", world_size, " must be in [1, ",
                                   kMaxWorldSize, "]");
  return Status::Ok();
}

Status CheckTableElements(int64_t rows, int64_t dim, const std::string& what) {
  if (rows > kMaxTableElements / dim)
    return Status::InvalidArgument(what, ": ", rows, " x ", dim,
                                   " elements exceed the limit of 2^56");
  return Status::Ok();
}

bool ShardingTypeFromName(const std::string& name, ShardingType* out) {
  for (int32_t i = 0; i < kNumShardingTypes; ++i) {
    if (name == kNames[i]) {
      *out = static_cast<ShardingType>(i);
      return true;
    }
  }
  return false;
}

int32_t Plan::TableIndex(std::string_view name) const {
  for (size_t t = 0; t < tables.size(); ++t)
    if (tables[t].name == name) return static_cast<int32_t>(t);
  return -1;
}

uint64_t Plan::Hash() const {
  Fnv h;
  h.Str("shardrec.plan.v1");
  h.I64(world_size);
  h.I64(local_world_size);
  h.U64(features.size());
  for (const auto& f : features) {
    h.Str(f.name);
    h.F32(f.pooling_factor);
  }
  h.U64(tables.size());
  for (const auto& t : tables) {
    h.Str(t.name);
    h.I64(t.rows);
    h.I64(t.dim);
    h.I64(static_cast<int32_t>(t.pooling));
    h.I64(static_cast<int32_t>(t.dtype));
    h.U64(t.features.size());
    for (int32_t f : t.features) h.I64(f);
    h.I64(static_cast<int32_t>(t.init.kind));
    h.F32(t.init.low);
    h.F32(t.init.high);
    if (t.has_optimizer) {
      const optim::OptimizerConfig& o = t.optimizer;
      h.Str("optimizer");
      h.I64(static_cast<int32_t>(o.type));
      for (float v : {o.learning_rate, o.eps, o.beta1, o.beta2, o.weight_decay}) h.F32(v);
      h.I64(static_cast<int32_t>(o.weight_decay_mode));
      h.I64(o.stochastic_rounding ? 1 : 0);
    }
    if (t.dynamic.enabled) {
      h.Str("dynamic");
      h.I64(static_cast<int32_t>(t.dynamic.eviction));
      h.I64(t.dynamic.admission_threshold);
      h.I64(t.dynamic.ttl_steps);
      // Only when set, so plans of tables given in rows keep their hashes.
      if (t.dynamic.capacity_bytes > 0) h.I64(t.dynamic.capacity_bytes);
      if (t.dynamic.admission_decay_steps > 0) {
        h.Str("admission_decay_steps");  // tagged: it and capacity_bytes are both optional
        h.I64(t.dynamic.admission_decay_steps);
      }
    }
  }
  h.I64(planned_optimizer);
  h.U64(table_plans.size());
  for (const auto& tp : table_plans) {
    h.I64(static_cast<int32_t>(tp.type));
    h.U64(tp.shards.size());
    for (const auto& s : tp.shards) {
      h.I64(s.row_offset);
      h.I64(s.rows);
      h.I64(s.col_offset);
      h.I64(s.cols);
      h.I64(s.rank);
    }
  }
  return h.value();
}

}  // namespace shardrec::sharding
