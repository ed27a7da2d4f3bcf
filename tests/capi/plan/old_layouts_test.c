/*
 * A caller built against the version-1 config header passes arrays of the older, shorter structs
 * to shardrec_plan_create: the plan must equal the one made from the same values in today's
 * layout (JSON, hash and stats), and arrays whose elements declare different versions are
 * refused with SHARDREC_EINVAL. Plain C, as such a caller would be.
 */
#include <stdio.h>
#include <string.h>

#include "config_v1.h"
#include "shardrec/config.h"
#include "shardrec/plan.h"

static int g_failures = 0;

#define EXPECT(cond)                                                                      \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "%s:%d: expected %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              shardrec_last_error());                                                     \
      ++g_failures;                                                                       \
    }                                                                                     \
  } while (0)

#define NUM_FEATURES 4
#define NUM_TABLES 4
#define NUM_CONSTRAINTS 3

/* The model both layouts describe: four features, four tables of different shapes, pooling,
 * weight types and initialisers (one feature feeds two tables), three constraints. */
static const char* const kFeatureNames[NUM_FEATURES] = {"f0", "f1", "f2", "f3"};
static const float kFeaturePooling[NUM_FEATURES] = {1.5f, 0.0f, 4.0f, 1.0f};
static const int32_t kUsersReads[] = {0, 1};
static const int32_t kItemsReads[] = {2};
static const int32_t kShopsReads[] = {3};
static const int32_t kAdsReads[] = {1};
static const int32_t kItemsRanks[] = {1};
static const int32_t kShopsRanks[] = {0, 1};
static const float kUsersPooling[] = {2.0f, 3.0f};

typedef struct table_values {
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
} table_values;

static const table_values kTables[NUM_TABLES] = {
    {"users", 1000, 16, SHARDREC_POOLING_SUM, SHARDREC_DTYPE_FLOAT32, kUsersReads, 2,
     SHARDREC_INIT_UNIFORM, -0.1f, 0.1f},
    {"items", 500, 8, SHARDREC_POOLING_MEAN, SHARDREC_DTYPE_FLOAT16, kItemsReads, 1,
     SHARDREC_INIT_DEFAULT, 0.0f, 0.0f},
    {"shops", 64, 32, SHARDREC_POOLING_SUM, SHARDREC_DTYPE_BFLOAT16, kShopsReads, 1,
     SHARDREC_INIT_CONSTANT, 0.5f, 0.0f},
    {"ads", 200, 4, SHARDREC_POOLING_SUM, SHARDREC_DTYPE_FLOAT32, kAdsReads, 1,
     SHARDREC_INIT_DEFAULT, 0.0f, 0.0f},
};

typedef struct constraint_values {
  const char* table;
  uint32_t sharding_types;
  int32_t min_partition;
  const int32_t* ranks;
  size_t num_ranks;
  const float* pooling_factors;
  size_t num_pooling_factors;
} constraint_values;

static const constraint_values kConstraints[NUM_CONSTRAINTS] = {
    {"users", 1u << SHARDREC_SHARDING_ROW_WISE, 0, NULL, 0, kUsersPooling, 2},
    {"items", 1u << SHARDREC_SHARDING_TABLE_WISE, 0, kItemsRanks, 1, NULL, 0},
    {"shops", 1u << SHARDREC_SHARDING_COLUMN_WISE, 16, kShopsRanks, 2, NULL, 0},
};

typedef struct plan_text {
  char* json;
  char* stats;
  uint64_t hash;
} plan_text;

static shardrec_topology_t topology(void) {
  shardrec_topology_t t = SHARDREC_TOPOLOGY_INIT;
  t.world_size = 2;
  t.batch_size = 64;
  return t;
}

/* Plans from `tables`, `features` and `constraints` (any layout) and records what came out. */
static int make_plan(const void* tables, const void* features, const void* constraints,
                     plan_text* out) {
  shardrec_plan_t* plan = NULL;
  const shardrec_topology_t topo = topology();
  const shardrec_status_t rc =
      shardrec_plan_create(&plan, (const shardrec_table_config_t*)tables, NUM_TABLES,
                           (const shardrec_feature_config_t*)features, NUM_FEATURES, &topo,
                           (const shardrec_table_constraints_t*)constraints, NUM_CONSTRAINTS);
  EXPECT(rc == SHARDREC_OK);
  if (rc != SHARDREC_OK) return 0;
  EXPECT(shardrec_plan_to_json(plan, &out->json, NULL) == SHARDREC_OK);
  EXPECT(shardrec_plan_stats(plan, &out->stats, NULL) == SHARDREC_OK);
  EXPECT(shardrec_plan_hash(plan, &out->hash) == SHARDREC_OK);
  shardrec_plan_destroy(plan);
  return 1;
}

static void free_text(plan_text* p) {
  shardrec_free(p->json);
  shardrec_free(p->stats);
}

/* shardrec_plan_create refuses the arrays with EINVAL and a message containing `fragment`. */
static void expect_refused(const void* tables, const void* features, const char* fragment) {
  shardrec_plan_t* plan = NULL;
  const shardrec_topology_t topo = topology();
  EXPECT(shardrec_plan_create(&plan, (const shardrec_table_config_t*)tables, NUM_TABLES,
                              (const shardrec_feature_config_t*)features, NUM_FEATURES, &topo, NULL,
                              0) == SHARDREC_EINVAL);
  EXPECT(strstr(shardrec_last_error(), fragment) != NULL);
  EXPECT(plan == NULL);
}

int main(void) {
  shardrec_feature_config_t features[NUM_FEATURES];
  shardrec_table_config_t tables[NUM_TABLES];
  shardrec_table_constraints_t constraints[NUM_CONSTRAINTS];
  old_feature_config_v1_t old_features[NUM_FEATURES];
  old_table_config_v1_t old_tables[NUM_TABLES];
  old_table_constraints_v1_t old_constraints[NUM_CONSTRAINTS];
  plan_text now, old;
  int i;

  /* The older structs really are shorter: reading them at today's stride would misread. */
  EXPECT(sizeof(old_table_config_v1_t) < sizeof(shardrec_table_config_t));

  for (i = 0; i < NUM_FEATURES; ++i) {
    EXPECT(shardrec_feature_config_init(&features[i], SHARDREC_FEATURE_CONFIG_VERSION) ==
           SHARDREC_OK);
    features[i].name = kFeatureNames[i];
    features[i].pooling_factor = kFeaturePooling[i];
    old_features[i].version = 1;
    old_features[i].name = kFeatureNames[i];
    old_features[i].pooling_factor = kFeaturePooling[i];
  }
  for (i = 0; i < NUM_TABLES; ++i) {
    const table_values* v = &kTables[i];
    EXPECT(shardrec_table_config_init(&tables[i], SHARDREC_TABLE_CONFIG_VERSION) == SHARDREC_OK);
    tables[i].name = v->name;
    tables[i].rows = v->rows;
    tables[i].dim = v->dim;
    tables[i].pooling = v->pooling;
    tables[i].dtype = v->dtype;
    tables[i].features = v->features;
    tables[i].num_features = v->num_features;
    tables[i].init_kind = v->init_kind;
    tables[i].init_low = v->init_low;
    tables[i].init_high = v->init_high;
    old_tables[i].version = 1;
    old_tables[i].name = v->name;
    old_tables[i].rows = v->rows;
    old_tables[i].dim = v->dim;
    old_tables[i].pooling = v->pooling;
    old_tables[i].dtype = v->dtype;
    old_tables[i].features = v->features;
    old_tables[i].num_features = v->num_features;
    old_tables[i].init_kind = v->init_kind;
    old_tables[i].init_low = v->init_low;
    old_tables[i].init_high = v->init_high;
  }
  for (i = 0; i < NUM_CONSTRAINTS; ++i) {
    const constraint_values* v = &kConstraints[i];
    EXPECT(shardrec_table_constraints_init(&constraints[i], SHARDREC_TABLE_CONSTRAINTS_VERSION) ==
           SHARDREC_OK);
    constraints[i].table = v->table;
    constraints[i].sharding_types = v->sharding_types;
    constraints[i].min_partition = v->min_partition;
    constraints[i].ranks = v->ranks;
    constraints[i].num_ranks = v->num_ranks;
    constraints[i].pooling_factors = v->pooling_factors;
    constraints[i].num_pooling_factors = v->num_pooling_factors;
    old_constraints[i].version = 1;
    old_constraints[i].table = v->table;
    old_constraints[i].sharding_types = v->sharding_types;
    old_constraints[i].min_partition = v->min_partition;
    old_constraints[i].ranks = v->ranks;
    old_constraints[i].num_ranks = v->num_ranks;
    old_constraints[i].pooling_factors = v->pooling_factors;
    old_constraints[i].num_pooling_factors = v->num_pooling_factors;
  }

  /* Every array in its version-1 layout plans exactly what today's layout plans. */
  if (make_plan(tables, features, constraints, &now)) {
    if (make_plan(old_tables, old_features, old_constraints, &old)) {
      EXPECT(strcmp(now.json, old.json) == 0);
      EXPECT(strcmp(now.stats, old.stats) == 0);
      EXPECT(now.hash == old.hash);
      free_text(&old);
    }
    /* Old tables beside today's features and constraints (each array has its own version). */
    if (make_plan(old_tables, features, constraints, &old)) {
      EXPECT(strcmp(now.json, old.json) == 0);
      EXPECT(now.hash == old.hash);
      free_text(&old);
    }
    free_text(&now);
  }

  /* An element whose version differs from the first element's is refused: the array has no
   * single stride. In either direction, and in either layout. */
  old_tables[2].version = 2;
  expect_refused(old_tables, old_features,
                 "tables[2]: struct version 2 differs from tables[0]'s version 1");
  old_tables[2].version = 1;
  tables[3].version = 1;
  expect_refused(tables, features,
                 "tables[3]: struct version 1 differs from tables[0]'s version 3");
  tables[3].version = SHARDREC_TABLE_CONFIG_VERSION;
  /* A version this library does not know is named as before, wherever it sits. */
  old_tables[0].version = 4;
  expect_refused(old_tables, old_features, "tables[0]: unsupported struct version 4");
  old_tables[0].version = 1;
  old_features[1].version = 0;
  expect_refused(old_tables, old_features, "features[1]: unsupported struct version 0");
  old_features[1].version = 1;

  /* An empty array is not read, whatever its pointer points at (here: no valid version). */
  {
    shardrec_table_constraints_t junk;
    shardrec_plan_t* plan = NULL;
    const shardrec_topology_t topo = topology();
    memset(&junk, 0xab, sizeof(junk));
    EXPECT(shardrec_plan_create(&plan, tables, NUM_TABLES, features, NUM_FEATURES, &topo, &junk,
                                0) == SHARDREC_OK);
    shardrec_plan_destroy(plan);
  }

  if (g_failures != 0) {
    fprintf(stderr, "%d failure(s)\n", g_failures);
    return 1;
  }
  printf("old_layouts_test: all checks passed\n");
  return 0;
}
