/*
 * @file train_2d.c
 * @brief Trains a sharded embedding collection with 2D parallelism: 4 CPU ranks (threads) as
 *        2 replica groups x 2-way sharding, on synthetic data, through the public C API only.
 *
 * Each sample has three sparse features. A hidden "teacher" assigns every id a fixed embedding;
 * the target of a sample is the teacher's pooled embedding of its bags, and the collection (the
 * student) is trained to reproduce it with a mean squared error, so the loss must fall. Every step:
 * forward, loss and its gradient, backward (fused Adagrad update), then shardrec_mesh_step,
 * which averages weights and optimizer state across each replica group.
 *
 * Usage: train_2d [--steps N] [--batch B] [--sync-every K] [--inter-host]
 */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardrec/shardrec.h"

#define WORLD 4
#define SHARD 2
#define NUM_FEATURES 3

static int g_steps = 40;
static int g_batch = 128;
static int g_sync_every = 1;
static int g_layout = SHARDREC_MESH_LAYOUT_DEFAULT;
static shardrec_comm_t* g_comms[WORLD];
static shardrec_plan_t* g_plan;
static int g_failed;

#define CHECK(call)                                                                              \
  do {                                                                                           \
    shardrec_status_t rc_ = (call);                                                              \
    if (rc_ != SHARDREC_OK) {                                                                    \
      fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #call, shardrec_status_string(rc_), \
              shardrec_last_error());                                                            \
      g_failed = 1;                                                                              \
      return NULL;                                                                               \
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

/* The teacher's embedding value of (feature, id, column), in [-0.1, 0.1). */
static float teacher(int feature, int64_t id, int64_t col) {
  uint64_t h = (uint64_t)id * 0x9E3779B97F4A7C15ULL ^ (uint64_t)(col + 1) * 0xC2B2AE3D27D4EB4FULL ^
               (uint64_t)(feature + 7) * 0x165667B19E3779F9ULL;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  return (float)(h % 2000) / 10000.0f - 0.1f;
}

/* A cheap deterministic generator, so every run sees the same data. */
static uint64_t next_random(uint64_t* state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return *state >> 33;
}

static shardrec_status_t make_plan(void) {
  static const char* feature_names[NUM_FEATURES] = {"user", "item", "category"};
  static const int32_t user_features[] = {0};
  static const int32_t item_features[] = {1};
  static const int32_t cat_features[] = {2};
  shardrec_feature_config_t features[NUM_FEATURES];
  shardrec_table_config_t tables[3];
  shardrec_table_constraints_t constraints[3];
  shardrec_topology_t topology;
  int i;
  for (i = 0; i < NUM_FEATURES; ++i) {
    shardrec_feature_config_init(&features[i], SHARDREC_FEATURE_CONFIG_VERSION);
    features[i].name = feature_names[i];
    features[i].pooling_factor = 3.0f;
  }
  for (i = 0; i < 3; ++i) {
    shardrec_table_config_init(&tables[i], SHARDREC_TABLE_CONFIG_VERSION);
    shardrec_table_constraints_init(&constraints[i], SHARDREC_TABLE_CONSTRAINTS_VERSION);
  }
  tables[0].name = "users";
  tables[0].rows = 5000;
  tables[0].dim = 16;
  tables[0].features = user_features;
  tables[0].num_features = 1;
  tables[1].name = "items";
  tables[1].rows = 20000;
  tables[1].dim = 16;
  tables[1].features = item_features;
  tables[1].num_features = 1;
  tables[2].name = "categories";
  tables[2].rows = 100;
  tables[2].dim = 8;
  tables[2].pooling = SHARDREC_POOLING_MEAN;
  tables[2].features = cat_features;
  tables[2].num_features = 1;
  /* Mixed sharding: users row-wise, items column-wise, categories table-wise. */
  constraints[0].table = "users";
  constraints[0].sharding_types = 1u << SHARDREC_SHARDING_ROW_WISE;
  constraints[1].table = "items";
  constraints[1].sharding_types = 1u << SHARDREC_SHARDING_COLUMN_WISE;
  constraints[1].min_partition = 8;
  constraints[2].table = "categories";
  constraints[2].sharding_types = 1u << SHARDREC_SHARDING_TABLE_WISE;
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  topology.world_size = SHARD; /* the plan is made once for one sharding group */
  topology.ranks_per_node = SHARD;
  topology.batch_size = g_batch;
  topology.optimizer = SHARDREC_OPTIMIZER_ADAGRAD;
  /* Measure this machine (~0.2 s) so the stats' estimated step is in its time: all WORLD ranks
   * (both sharding groups) run at once as threads of this process. */
  {
    shardrec_calibrate_options_t calibrate;
    shardrec_status_t rc;
    shardrec_calibrate_options_init(&calibrate, SHARDREC_CALIBRATE_OPTIONS_VERSION);
    calibrate.ranks_share_memory = 1;
    calibrate.ranks_per_machine = WORLD;
    rc = shardrec_topology_calibrate(&topology, &calibrate, NULL);
    if (rc != SHARDREC_OK) return rc;
  }
  return shardrec_plan_create(&g_plan, tables, 3, features, NUM_FEATURES, &topology, constraints,
                              3);
}

static void* run_rank(void* arg) {
  const int rank = (int)(intptr_t)arg;
  shardrec_mesh_options_t mesh_options;
  shardrec_mesh_t* mesh = NULL;
  shardrec_optimizer_config_t optimizer;
  shardrec_embedding_options_t options;
  shardrec_embedding_t* coll = NULL;
  int64_t dim = 0;
  int step, b, f, k;
  uint64_t rng = 1234567u + (uint64_t)rank * 7919u;
  const int max_ids = g_batch * NUM_FEATURES * 4;
  int32_t* lengths = malloc(sizeof(int32_t) * g_batch * NUM_FEATURES);
  int64_t* ids = malloc(sizeof(int64_t) * max_ids);
  float *out = NULL, *grad = NULL, *target = NULL;
  static const int64_t rows[NUM_FEATURES] = {5000, 20000, 100};

  CHECK(shardrec_mesh_options_init(&mesh_options, SHARDREC_MESH_OPTIONS_VERSION));
  mesh_options.sharding_group_size = SHARD;
  mesh_options.layout = g_layout;
  mesh_options.ranks_per_node = 2;
  mesh_options.sync_interval = g_sync_every;
  CHECK(shardrec_mesh_create(&mesh, g_comms[rank], &mesh_options));
  if (rank == 0) {
    char* text = NULL;
    CHECK(shardrec_mesh_describe(mesh, &text, NULL));
    printf("%s", text);
    shardrec_free(text);
    CHECK(shardrec_plan_stats(g_plan, &text, NULL));
    printf("%s\n", text);
    shardrec_free(text);
  }
  CHECK(shardrec_optimizer_config_init(&optimizer, SHARDREC_OPTIMIZER_CONFIG_VERSION));
  optimizer.type = SHARDREC_OPTIMIZER_ADAGRAD;
  optimizer.learning_rate = 0.03f;
  CHECK(shardrec_embedding_options_init(&options, SHARDREC_EMBEDDING_OPTIONS_VERSION));
  options.seed = 2024;
  CHECK(shardrec_mesh_embedding_create(&coll, mesh, g_plan, &optimizer, &options));
  CHECK(shardrec_embedding_output_dim(coll, &dim));
  out = malloc(sizeof(float) * g_batch * dim);
  grad = malloc(sizeof(float) * g_batch * dim);
  target = malloc(sizeof(float) * g_batch * dim);

  for (step = 0; step < g_steps; ++step) {
    shardrec_kjt_view_t batch;
    int64_t n = 0;
    double loss[2] = {0.0, 0.0};
    const double t0 = now_seconds();
    /* Bags of 1..4 ids, features in configuration order. Each sample's target depends on its
       first user id, so the tables can learn it. */
    for (f = 0; f < NUM_FEATURES; ++f) {
      for (b = 0; b < g_batch; ++b) {
        int len = 1 + (int)(next_random(&rng) % 4);
        lengths[f * g_batch + b] = len;
        for (k = 0; k < len; ++k) ids[n++] = (int64_t)(next_random(&rng) % (uint64_t)rows[f]);
      }
    }
    memset(&batch, 0, sizeof(batch));
    batch.batch_size = g_batch;
    batch.num_features = NUM_FEATURES;
    batch.lengths = lengths;
    batch.num_lengths = (size_t)g_batch * NUM_FEATURES;
    batch.values = ids;
    batch.values_dtype = SHARDREC_DTYPE_INT64;
    batch.num_values = (size_t)n;
    CHECK(shardrec_embedding_forward(coll, &batch, out, (size_t)(g_batch * dim), NULL));
    {
      /* Output columns: users (16), items (16), categories (8, MEAN), as in the plan. */
      static const int dims[NUM_FEATURES] = {16, 16, 8};
      int64_t pos = 0;
      int col0 = 0;
      memset(target, 0, sizeof(float) * g_batch * dim);
      for (f = 0; f < NUM_FEATURES; ++f) {
        for (b = 0; b < g_batch; ++b) {
          int len = lengths[f * g_batch + b];
          for (k = 0; k < len; ++k, ++pos) {
            int c;
            for (c = 0; c < dims[f]; ++c) {
              float v = teacher(f, ids[pos], c);
              target[b * dim + col0 + c] += f == 2 ? v / (float)len : v;
            }
          }
        }
        col0 += dims[f];
      }
    }
    for (k = 0; k < g_batch * dim; ++k) {
      double d = out[k] - target[k];
      loss[0] += 0.5 * d * d / (double)(g_batch * dim);
      grad[k] = (float)(d / (double)(g_batch * dim));
    }
    CHECK(shardrec_embedding_backward(coll, grad, (size_t)(g_batch * dim), NULL));
    CHECK(shardrec_mesh_step(mesh, coll, NULL));
    loss[1] = 1.0;
    CHECK(shardrec_comm_allreduce(g_comms[rank], loss, loss, 2, SHARDREC_DTYPE_FLOAT64,
                                  SHARDREC_REDUCE_SUM, NULL));
    if (rank == 0 && (step % 5 == 0 || step == g_steps - 1)) {
      const double dt = now_seconds() - t0;
      printf("step %3d  loss %.6f  %.1f ms/step  %.0f samples/s\n", step, loss[0] / loss[1],
             dt * 1e3, (double)(g_batch * WORLD) / dt);
      fflush(stdout);
    }
  }
  if (rank == 0) {
    uint64_t bytes = 0;
    int32_t collectives = 0;
    int64_t syncs = 0;
    CHECK(shardrec_mesh_sync_stats(mesh, &bytes, &collectives, &syncs));
    printf("replica syncs: %lld, last sync reduced %llu bytes in %d collective(s)\n",
           (long long)syncs, (unsigned long long)bytes, collectives);
    print_phases(coll);
  }
  shardrec_embedding_destroy(coll);
  shardrec_mesh_destroy(mesh);
  free(lengths);
  free(ids);
  free(out);
  free(grad);
  free(target);
  return NULL;
}

int main(int argc, char** argv) {
  pthread_t threads[WORLD];
  shardrec_comm_options_t comm_options = SHARDREC_COMM_OPTIONS_INIT;
  int i;
  const int rank = -1; /* for CHECK in main */
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      g_steps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
      g_batch = atoi(argv[++i]);
    else if (strcmp(argv[i], "--sync-every") == 0 && i + 1 < argc)
      g_sync_every = atoi(argv[++i]);
    else if (strcmp(argv[i], "--inter-host") == 0)
      g_layout = SHARDREC_MESH_LAYOUT_INTER_HOST;
    else {
      fprintf(stderr, "usage: %s [--steps N] [--batch B] [--sync-every K] [--inter-host]\n",
              argv[0]);
      return 2;
    }
  }
  printf("libshardrec %s: 2D training, %d ranks = %d replicas x %d-way sharding (CPU, Gloo)\n",
         shardrec_version_string(), WORLD, WORLD / SHARD, SHARD);
  if (make_plan() != SHARDREC_OK) {
    fprintf(stderr, "planning failed: %s\n", shardrec_last_error());
    return 1;
  }
  if (shardrec_comm_create_local_group(g_comms, WORLD, &comm_options) != SHARDREC_OK) {
    fprintf(stderr, "rank %d: communicators: %s\n", rank, shardrec_last_error());
    return 1;
  }
  for (i = 0; i < WORLD; ++i) pthread_create(&threads[i], NULL, run_rank, (void*)(intptr_t)i);
  for (i = 0; i < WORLD; ++i) pthread_join(threads[i], NULL);
  for (i = 0; i < WORLD; ++i) shardrec_comm_destroy(g_comms[i]);
  shardrec_plan_destroy(g_plan);
  if (g_failed) return 1;
  printf("done\n");
  return 0;
}
