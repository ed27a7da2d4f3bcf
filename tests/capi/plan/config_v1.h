/*
 * The version-1 layouts of the config.h structs that shardrec_plan_create takes as arrays, copied
 * from the headers that shipped them (git history of capi/include/shardrec/config.h: the table
 * config before commit 99b55dd appended its optimizer and feature names; the feature config and
 * the table constraints, unchanged since d60ca55). A test that fills these stands for a program
 * built against that older header. Never edit them.
 */
#ifndef SHARDREC_TESTS_CAPI_PLAN_CONFIG_V1_H_
#define SHARDREC_TESTS_CAPI_PLAN_CONFIG_V1_H_

#include <stddef.h>
#include <stdint.h>

typedef struct old_feature_config_v1 {
  uint32_t version;
  const char* name;
  float pooling_factor;
} old_feature_config_v1_t;

typedef struct old_table_config_v1 {
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
} old_table_config_v1_t;

typedef struct old_table_constraints_v1 {
  uint32_t version;
  const char* table;
  uint32_t sharding_types;
  int32_t min_partition;
  const int32_t* ranks;
  size_t num_ranks;
  const float* pooling_factors;
  size_t num_pooling_factors;
} old_table_constraints_v1_t;

#endif /* SHARDREC_TESTS_CAPI_PLAN_CONFIG_V1_H_ */
