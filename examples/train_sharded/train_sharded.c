/*
 * @file train_sharded.c
 * @brief Trains a sharded embedding collection on 4 CPU ranks (threads in one process) through
 *        the public C API only: a plan with mixed sharding types, synthetic data, and a toy
 *        regression loss that must go down.
 *
 * Four tables, one sharding type each (row-wise, column-wise, data-parallel, table-wise).
 * Each rank draws a fixed pool of batches; the "model" is the pooled embedding output itself,
 * regressed to a fixed target per output column (mean squared error over the local batch).
 * Every step: forward, loss and its gradient, backward (fused row-wise Adagrad update). The
 * next batch's ids are distributed while the current one runs its backward
 * (input_dist_start / wait / forward_distributed). Rank 0 prints the plan and the mean loss
 * over all ranks per step, and the run fails if the loss did not fall.
 *
 * Usage: train_sharded [--steps N] [--batch B]
 */
#define _POSIX_C_SOURCE 200112L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardrec/comm.h"
#include "shardrec/embedding.h"
#include "shardrec/plan.h"

#define WORLD 4
#define NUM_FEATURES 4
#define NUM_TABLES 4
#define POOL 4 /* distinct batches per rank, cycled */

static int g_steps = 25;
static int g_batch = 32;
static shardrec_comm_t* g_comms[WORLD];
static shardrec_plan_t* g_plan;
static float g_first_loss = -1.0f;
static float g_last_loss = -1.0f;
static int g_failed;

#define CHECK(call)                                                                              \
  do {                                                                                           \
    shardrec_status_t rc_ = (call);                                                              \
    if (rc_ != SHARDREC_OK) {                                                                    \
      fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #call, shardrec_status_string(rc_), \
              shardrec_last_error());                                                            \
      g_failed = 1;                                                                              \
      goto done;                                                                                 \
    }                                                                                            \
  } while (0)

/* Wall-clock seconds (monotonic), for the step time and samples/s. */
static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 0's phase breakdown: where a step's time went. */
static void print_phases(shardrec_embedding_t* coll) {
  shardrec_step_timings_t t;
  if (shardrec_step_timings_init(&t, SHARDREC_STEP_TIMINGS_VERSION) != SHARDREC_OK ||
      shardrec_embedding_step_timings(coll, &t) != SHARDREC_OK || t.forwards == 0)
    return;
  printf(
      "rank 0 per step: input dist %.2f ms, lookup %.2f ms, output dist %.2f ms, "
      "backward %.2f ms (collectives %.2f ms of %.2f ms in the collection)\n",
      1e3 * t.input_dist_seconds / (double)t.forwards, 1e3 * t.lookup_seconds / (double)t.forwards,
      1e3 * t.output_dist_seconds / (double)t.forwards,
      1e3 * t.backward_seconds / (double)t.forwards,
      1e3 * t.collective_seconds / (double)t.forwards, 1e3 * t.total_seconds / (double)t.forwards);
}

static uint64_t next_random(uint64_t* state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return *state >> 33;
}

static const char* kFeatureNames[NUM_FEATURES] = {"user", "item", "category", "region"};
static const char* kTableNames[NUM_TABLES] = {"users", "items", "categories", "regions"};
static const int64_t kRows[NUM_TABLES] = {5000, 2000, 24, 300};
static const int32_t kDims[NUM_TABLES] = {16, 16, 8, 8};
static const int32_t kPooling[NUM_TABLES] = {SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN,
                                             SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN};
static const int32_t kSharding[NUM_TABLES] = {
    SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_COLUMN_WISE, SHARDREC_SHARDING_DATA_PARALLEL,
    SHARDREC_SHARDING_TABLE_WISE};
static const int32_t kTableFeatures[NUM_TABLES] = {0, 1, 2, 3};

static shardrec_status_t make_plan(void) {
  shardrec_feature_config_t features[NUM_FEATURES];
  shardrec_table_config_t tables[NUM_TABLES];
  shardrec_table_constraints_t constraints[NUM_TABLES];
  shardrec_topology_t topology;
  int i;
  for (i = 0; i < NUM_FEATURES; ++i) {
    shardrec_feature_config_init(&features[i], SHARDREC_FEATURE_CONFIG_VERSION);
    features[i].name = kFeatureNames[i];
    features[i].pooling_factor = 3.0f;
  }
  for (i = 0; i < NUM_TABLES; ++i) {
    shardrec_table_config_init(&tables[i], SHARDREC_TABLE_CONFIG_VERSION);
    tables[i].name = kTableNames[i];
    tables[i].rows = kRows[i];
    tables[i].dim = kDims[i];
    tables[i].pooling = kPooling[i];
    tables[i].features = &kTableFeatures[i];
    tables[i].num_features = 1;
    shardrec_table_constraints_init(&constraints[i], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    constraints[i].table = kTableNames[i];
    constraints[i].sharding_types = 1u << kSharding[i];
    constraints[i].min_partition = 8; /* items: two 8-wide column shards */
  }
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  topology.world_size = WORLD;
  topology.ranks_per_node = 2;
  topology.batch_size = g_batch;
  topology.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  /* Measure this machine (~0.2 s) so the stats' estimated step is in its time: the ranks are
   * threads of this process, all WORLD of them at once. */
  {
    shardrec_calibrate_options_t calibrate;
    shardrec_status_t rc;
    shardrec_calibrate_options_init(&calibrate, SHARDREC_CALIBRATE_OPTIONS_VERSION);
    calibrate.ranks_share_memory = 1;
    calibrate.ranks_per_machine = WORLD;
    rc = shardrec_topology_calibrate(&topology, &calibrate, NULL);
    if (rc != SHARDREC_OK) return rc;
  }
  return shardrec_plan_create(&g_plan, tables, NUM_TABLES, features, NUM_FEATURES, &topology,
                              constraints, NUM_TABLES);
}

/* One synthetic batch: 1-4 ids per bag, skewed towards small ids. */
typedef struct {
  int32_t* lengths;
  int64_t* ids;
  size_t num_ids;
} batch_t;

static void make_batch(batch_t* b, uint64_t* rng) {
  int f, s, k;
  size_t n = 0;
  b->lengths = malloc(sizeof(int32_t) * NUM_FEATURES * g_batch);
  b->ids = malloc(sizeof(int64_t) * NUM_FEATURES * g_batch * 4);
  for (f = 0; f < NUM_FEATURES; ++f) {
    for (s = 0; s < g_batch; ++s) {
      int len = 1 + (int)(next_random(rng) % 4);
      b->lengths[f * g_batch + s] = len;
      for (k = 0; k < len; ++k) {
        uint64_t r = next_random(rng) % (uint64_t)kRows[f];
        b->ids[n++] = (int64_t)(r * r / (uint64_t)kRows[f]); /* skewed */
      }
    }
  }
  b->num_ids = n;
}

static void* run_rank(void* arg) {
  const int rank = (int)(intptr_t)arg;
  shardrec_embedding_t* coll = NULL;
  shardrec_optimizer_config_t opt;
  shardrec_embedding_options_t options;
  batch_t pool[POOL];
  shardrec_kjt_view_t views[POOL];
  float* out = NULL;
  float* grad = NULL;
  int64_t dim = 0;
  uint64_t rng = 1234567u + 7919u * (uint64_t)rank;
  int i, step;
  memset(pool, 0, sizeof(pool));
  for (i = 0; i < POOL; ++i) {
    make_batch(&pool[i], &rng);
    memset(&views[i], 0, sizeof(views[i]));
    views[i].batch_size = g_batch;
    views[i].num_features = NUM_FEATURES;
    views[i].lengths = pool[i].lengths;
    views[i].num_lengths = (size_t)NUM_FEATURES * g_batch;
    views[i].values = pool[i].ids;
    views[i].values_dtype = SHARDREC_DTYPE_INT64;
    views[i].num_values = pool[i].num_ids;
  }
  shardrec_optimizer_config_init(&opt, SHARDREC_OPTIMIZER_CONFIG_VERSION);
  opt.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  opt.learning_rate = 0.05f;
  shardrec_embedding_options_init(&options, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  options.seed = 42;
  CHECK(shardrec_embedding_create(&coll, g_plan, g_comms[rank], &opt, &options));
  CHECK(shardrec_embedding_output_dim(coll, &dim));
  out = malloc(sizeof(float) * (size_t)(g_batch * dim));
  grad = malloc(sizeof(float) * (size_t)(g_batch * dim));

  CHECK(shardrec_embedding_input_dist_start(coll, &views[0], NULL));
  CHECK(shardrec_embedding_input_dist_wait(coll, NULL));
  for (step = 0; step < g_steps; ++step) {
    float loss = 0.0f;
    int64_t j;
    const double t0 = now_seconds();
    CHECK(shardrec_embedding_forward_distributed(coll, out, (size_t)(g_batch * dim), NULL));
    /* Distribute the next batch while this one finishes. */
    if (step + 1 < g_steps)
      CHECK(shardrec_embedding_input_dist_start(coll, &views[(step + 1) % POOL], NULL));
    for (j = 0; j < g_batch * dim; ++j) {
      const float target = 0.05f * (float)((j % dim) % 5 - 2);
      const float diff = out[j] - target;
      loss += diff * diff;
      grad[j] = 2.0f * diff / (float)(g_batch * dim);
    }
    loss /= (float)(g_batch * dim);
    CHECK(shardrec_comm_allreduce(g_comms[rank], &loss, &loss, 1, SHARDREC_DTYPE_FLOAT32,
                                  SHARDREC_REDUCE_AVG, NULL));
    CHECK(shardrec_embedding_backward(coll, grad, (size_t)(g_batch * dim), NULL));
    if (step + 1 < g_steps) CHECK(shardrec_embedding_input_dist_wait(coll, NULL));
    if (rank == 0) {
      const double dt = now_seconds() - t0;
      printf("step %3d  loss %.6f  %.1f ms/step  %.0f samples/s\n", step, loss, dt * 1e3,
             (double)(g_batch * WORLD) / dt);
      if (step == 0) g_first_loss = loss;
      g_last_loss = loss;
    }
  }
  if (rank == 0) {
    double comm_s = 0, total_s = 0;
    CHECK(shardrec_embedding_timings(coll, &comm_s, &total_s));
    printf("rank 0: %.1f ms in forward/backward, %.1f ms of it in collectives\n", total_s * 1e3,
           comm_s * 1e3);
    print_phases(coll);
  }
done:
  shardrec_embedding_destroy(coll);
  free(out);
  free(grad);
  for (i = 0; i < POOL; ++i) {
    free(pool[i].lengths);
    free(pool[i].ids);
  }
  return NULL;
}

int main(int argc, char** argv) {
  pthread_t threads[WORLD];
  char* stats = NULL;
  int i;
  const int rank = -1;
  for (i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--steps") == 0) g_steps = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--batch") == 0) g_batch = atoi(argv[i + 1]);
  }
  if (g_steps < 2 || g_batch < 1) {
    fprintf(stderr, "usage: train_sharded [--steps N>=2] [--batch B>=1]\n");
    return 2;
  }
  CHECK(make_plan());
  CHECK(shardrec_plan_stats(g_plan, &stats, NULL));
  printf("%s\n", stats);
  shardrec_free(stats);
  CHECK(shardrec_comm_create_local_group(g_comms, WORLD, NULL));
  for (i = 0; i < WORLD; ++i) pthread_create(&threads[i], NULL, run_rank, (void*)(intptr_t)i);
  for (i = 0; i < WORLD; ++i) pthread_join(threads[i], NULL);
  for (i = 0; i < WORLD; ++i) shardrec_comm_destroy(g_comms[i]);
done:
  shardrec_plan_destroy(g_plan);
  if (g_failed) return 1;
  printf("loss %.6f -> %.6f\n", g_first_loss, g_last_loss);
  if (!(g_last_loss < 0.9f * g_first_loss)) {
    fprintf(stderr, "the loss did not go down\n");
    return 1;
  }
  return 0;
}
