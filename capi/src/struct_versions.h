// The version history of the versioned C structs the C API receives as arrays: for each version
// ever shipped, its size and the bytes its fields cover (ReadVersionedArray reads the arrays).
//
// When a field is appended to one of these structs: freeze the previous layout below (copied
// from the header that shipped it, never edited again) and add its entry to the history.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "capi/src/versioned.h"
#include "shardrec/config.h"

namespace shardrec::capi {
namespace frozen {

// shardrec_table_config_t version 1 (config.h before the per-table optimizer and the feature
// names were appended).
struct TableConfigV1 {
  uint32_t version;
  const char* name;
  int64_t rows;
  int32_t dim;
  int32_t pooling;
  int32_t dtype;
  const int32_t* features;
  size_t num_features;
  int32_t init_kind;
  float init_low;
  float init_high;
};

// shardrec_table_config_t version 2 (config.h before the dynamic config was appended).
struct TableConfigV2 {
  uint32_t version;
  const char* name;
  int64_t rows;
  int32_t dim;
  int32_t pooling;
  int32_t dtype;
  const int32_t* features;
  size_t num_features;
  int32_t init_kind;
  float init_low;
  float init_high;
  const shardrec_optimizer_config_t* optimizer;
  const char* const* feature_names;
  size_t num_feature_names;
};

// shardrec_table_constraints_t version 1 (config.h before the tier fields were appended).
struct TableConstraintsV1 {
  uint32_t version;
  const char* table;
  uint32_t sharding_types;
  int32_t min_partition;
  const int32_t* ranks;
  size_t num_ranks;
  const float* pooling_factors;
  size_t num_pooling_factors;
};

// The frozen copy must be the prefix of today's struct: the same fields at the same offsets.
#define SHARDREC_SAME_OFFSET(old, now, field) \
  static_assert(offsetof(old, field) == offsetof(now, field), #old "." #field " moved")
SHARDREC_SAME_OFFSET(TableConfigV1, shardrec_table_config_t, name);
SHARDREC_SAME_OFFSET(TableConfigV1, shardrec_table_config_t, rows);
SHARDREC_SAME_OFFSET(TableConfigV1, shardrec_table_config_t, dim);
SHARDREC_SAME_OFFSET(TableConfigV1, shardrec_table_config_t, pooling);
SHARDREC_SAME_OFFSET(TableConfigV1, shardrec_table_config_t, dtype);
SHARDREC_SAME_OFFSET(TableConfigV1, shardrec_table_config_t, features);
SHARDREC_SAME_OFFSET(TableConfigV1, shardrec_table_config_t, num_features);
SHARDREC_SAME_OFFSET(TableConfigV1, shardrec_table_config_t, init_kind);
SHARDREC_SAME_OFFSET(TableConfigV1, shardrec_table_config_t, init_low);
SHARDREC_SAME_OFFSET(TableConfigV1, shardrec_table_config_t, init_high);
SHARDREC_SAME_OFFSET(TableConfigV2, shardrec_table_config_t, optimizer);
SHARDREC_SAME_OFFSET(TableConfigV2, shardrec_table_config_t, feature_names);
SHARDREC_SAME_OFFSET(TableConfigV2, shardrec_table_config_t, num_feature_names);
SHARDREC_SAME_OFFSET(TableConstraintsV1, shardrec_table_constraints_t, ranks);
SHARDREC_SAME_OFFSET(TableConstraintsV1, shardrec_table_constraints_t, pooling_factors);
SHARDREC_SAME_OFFSET(TableConstraintsV1, shardrec_table_constraints_t, num_pooling_factors);
#undef SHARDREC_SAME_OFFSET

}  // namespace frozen

template <typename T>
constexpr StructVersion kCurrentLayout{sizeof(T), sizeof(T)};

inline constexpr StructVersion kTableConfigVersions[] = {
    {sizeof(frozen::TableConfigV1), offsetof(shardrec_table_config_t, optimizer)},
    {sizeof(frozen::TableConfigV2), offsetof(shardrec_table_config_t, dynamic)},
    kCurrentLayout<shardrec_table_config_t>,
};
inline constexpr StructVersion kFeatureConfigVersions[] = {
    kCurrentLayout<shardrec_feature_config_t>,
};
inline constexpr StructVersion kTableConstraintsVersions[] = {
    {sizeof(frozen::TableConstraintsV1), offsetof(shardrec_table_constraints_t, tier_cache_bytes)},
    kCurrentLayout<shardrec_table_constraints_t>,
};

// A version added to a header without its history here fails to compile.
static_assert(std::size(kTableConfigVersions) == SHARDREC_TABLE_CONFIG_VERSION);
static_assert(std::size(kFeatureConfigVersions) == SHARDREC_FEATURE_CONFIG_VERSION);
static_assert(std::size(kTableConstraintsVersions) == SHARDREC_TABLE_CONSTRAINTS_VERSION);

}  // namespace shardrec::capi
