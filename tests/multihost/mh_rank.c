/*
 * @file mh_rank.c
 * @brief One rank of the multi-host test bed (netns_bed.sh), through the public C API only.
 *
 * Usage: mh_rank netbw                the inter-host bandwidth shardrec_topology_calibrate_network
 *                                     measures (every rank prints it)
 *        mh_rank info                 local rank / size and ranks_per_node; checked against the
 *                                     bed's host layout (SHARDREC_BED_HOSTS x SHARDREC_BED_RANKS)
 *        mh_rank shard [--dynamic] [--local W --rpn P]
 *                                     every sharding type trained 3 steps; prints each type's
 *                                     per-rank output sums (hexadecimal floats, exact) so that a
 *                                     run across hosts compares with one process (--local: W
 *                                     ranks as threads of this process, P ranks per node)
 *        mh_rank steps N              N all-reduces 50 ms apart; a failure prints how long the
 *                                     failing call took and its message
 *        mh_rank ckpt save|load DIR   trains (after loading DIR with "load"), saves DIR with
 *                                     "save", and exports the table to DIR/<save|load>.st
 *        mh_rank restart              the last rank first tries to join with
 *                                     TORCHELASTIC_RESTART_COUNT one lower (a rank left from the
 *                                     previous attempt) and prints how it was refused; then every
 *                                     rank meets
 * Ranks meet through shardrec_comm_create_from_env (shardrec_comm_create_tcp with
 * SHARDREC_BED_TCP=1); SHARDREC_BED_TIMEOUT_MS sets the timeout
 * (default 10000). Exit 0 on success, 1 on a failed check, 3 on a library error.
 */
#define _POSIX_C_SOURCE 200112L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mh_util.h"
#include "shardrec/checkpoint.h"
#include "shardrec/comm.h"
#include "shardrec/embedding.h"
#include "shardrec/plan.h"

#define MAX_WORLD 16
#define ROWS 96
#define DIM 8
#define BATCH 8
#define STEPS 3
#define NUM_TYPES 7

static int g_dynamic;
static int g_rpn;
static const char* const kTypeNames[NUM_TYPES] = {
    "data_parallel",  "table_wise",        "row_wise", "column_wise",
    "table_row_wise", "table_column_wise", "grid"};

#define CHECK(call)                                                                              \
  do {                                                                                           \
    shardrec_status_t rc_ = (call);                                                              \
    if (rc_ != SHARDREC_OK) {                                                                    \
      fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #call, shardrec_status_string(rc_), \
              shardrec_last_error());                                                            \
      status = 3;                                                                                \
      goto done;                                                                                 \
    }                                                                                            \
  } while (0)

/* With SHARDREC_BED_PET=1 the rank's environment is rewritten into what Kubeflow Trainer v2's
 * TrainJob gives a process started without torchrun: PET_NNODES, PET_NPROC_PER_NODE,
 * PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, and the LOCAL_RANK the manifest adds; every
 * torchrun variable is removed. Needs the bed's LOCAL_* (no --no-local). */
static shardrec_status_t create_as_trainjob(shardrec_comm_t** comm,
                                            const shardrec_comm_options_t* o) {
  static const char* const torchrun[] = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                                         "LOCAL_WORLD_SIZE"};
  char value[256];
  const int per_node = env_int("LOCAL_WORLD_SIZE", 1);
  const int world = env_int("WORLD_SIZE", 1), rank = env_int("RANK", 0);
  snprintf(value, sizeof(value), "%d", world / per_node);
  setenv("PET_NNODES", value, 1);
  snprintf(value, sizeof(value), "%d", per_node);
  setenv("PET_NPROC_PER_NODE", value, 1);
  snprintf(value, sizeof(value), "%d", rank / per_node);
  setenv("PET_NODE_RANK", value, 1);
  setenv("PET_MASTER_ADDR", getenv("MASTER_ADDR") != NULL ? getenv("MASTER_ADDR") : "", 1);
  setenv("PET_MASTER_PORT", getenv("MASTER_PORT") != NULL ? getenv("MASTER_PORT") : "", 1);
  for (size_t i = 0; i < sizeof(torchrun) / sizeof(torchrun[0]); ++i) unsetenv(torchrun[i]);
  printf("trainjob PET_NODE_RANK %s LOCAL_RANK %s\n", getenv("PET_NODE_RANK"),
         getenv("LOCAL_RANK"));
  return shardrec_comm_create_from_env(comm, o);
}

/* With SHARDREC_BED_TCP=1 the rank takes the bed's torchrun variables as a host such as Ray
 * Train hands them in code, removes every launcher variable from its environment, and meets
 * through shardrec_comm_create_tcp. */
static shardrec_status_t create_comm(shardrec_comm_t** comm) {
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = env_int("SHARDREC_BED_TIMEOUT_MS", 10000);
  if (env_int("SHARDREC_BED_PET", 0) == 1) return create_as_trainjob(comm, &o);
  if (env_int("SHARDREC_BED_TCP", 0) != 1) return shardrec_comm_create_from_env(comm, &o);
  static const char* const launcher[] = {"MASTER_ADDR", "MASTER_PORT", "RANK",
                                         "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE"};
  char addr[256];
  const char* a = getenv("MASTER_ADDR");
  snprintf(addr, sizeof(addr), "%s", a != NULL ? a : "");
  const int port = env_int("MASTER_PORT", 0), rank = env_int("RANK", -1);
  const int world = env_int("WORLD_SIZE", 0);
  for (size_t i = 0; i < sizeof(launcher) / sizeof(launcher[0]); ++i) unsetenv(launcher[i]);
  printf("create_tcp %s %d rank %d of %d\n", addr, port, rank, world);
  return shardrec_comm_create_tcp(comm, addr, port, rank, world, &o);
}

/* One table of type `type` (dynamic with --dynamic), one feature. */
static shardrec_status_t make_plan(int type, int world, int rpn, shardrec_plan_t** plan) {
  static const int32_t feature0 = 0;
  shardrec_feature_config_t feature;
  shardrec_table_config_t table;
  shardrec_table_constraints_t constraint;
  shardrec_topology_t topology;
  shardrec_dynamic_table_config_t dyn = SHARDREC_DYNAMIC_TABLE_CONFIG_INIT;
  shardrec_feature_config_init(&feature, SHARDREC_FEATURE_CONFIG_VERSION);
  feature.name = "f";
  feature.pooling_factor = 2.0f;
  shardrec_table_config_init(&table, SHARDREC_TABLE_CONFIG_VERSION);
  table.name = "t";
  table.rows = ROWS;
  table.dim = DIM;
  table.pooling = SHARDREC_POOLING_SUM;
  table.features = &feature0;
  table.num_features = 1;
  if (g_dynamic) table.dynamic = &dyn;
  shardrec_table_constraints_init(&constraint, SHARDREC_TABLE_CONSTRAINTS_VERSION);
  constraint.table = "t";
  constraint.sharding_types = 1u << type;
  constraint.min_partition = 4; /* column-split types: two 4-wide blocks */
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  topology.world_size = world;
  topology.ranks_per_node = rpn;
  topology.batch_size = BATCH;
  topology.optimizer = SHARDREC_OPTIMIZER_ADAGRAD;
  return shardrec_plan_create(plan, &table, 1, &feature, 1, &topology, &constraint, 1);
}

/* The ids of (rank, step): 1-3 per bag; raw 64-bit values for a dynamic table. */
static size_t make_batch(int rank, int step, int32_t* lengths, int64_t* ids) {
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank * 131 + step + 1);
  size_t n = 0;
  int s, k;
  for (s = 0; s < BATCH; ++s) {
    lengths[s] = 1 + (int)((x >> 13) % 3);
    for (k = 0; k < lengths[s]; ++k) {
      x ^= x << 7;
      x ^= x >> 9;
      ids[n++] = g_dynamic ? (int64_t)(x | 1u) : (int64_t)(x % ROWS);
    }
  }
  return n;
}

/* Trains one collection STEPS steps and returns this rank's output sum of one more forward. */
static shardrec_status_t train(shardrec_embedding_t* coll, int rank, int first_step, double* sum) {
  int32_t lengths[BATCH];
  int64_t ids[BATCH * 3];
  float out[BATCH * DIM], grad[BATCH * DIM];
  shardrec_kjt_view_t view;
  shardrec_status_t rc = SHARDREC_OK;
  int step, j;
  memset(&view, 0, sizeof(view));
  view.batch_size = BATCH;
  view.num_features = 1;
  view.lengths = lengths;
  view.num_lengths = BATCH;
  view.values = ids;
  view.values_dtype = SHARDREC_DTYPE_INT64;
  for (step = first_step; step <= first_step + STEPS; ++step) {
    view.num_values = make_batch(rank, step, lengths, ids);
    rc = shardrec_embedding_forward(coll, &view, out, BATCH * DIM, NULL);
    if (rc != SHARDREC_OK || step == first_step + STEPS) break;
    for (j = 0; j < BATCH * DIM; ++j) grad[j] = out[j] - 0.1f * (float)(j % 5);
    rc = shardrec_embedding_backward(coll, grad, BATCH * DIM, NULL);
    if (rc != SHARDREC_OK) break;
  }
  *sum = 0;
  for (j = 0; j < BATCH * DIM; ++j) *sum += (double)out[j] * (double)(j + 1);
  return rc;
}

static shardrec_status_t make_collection(shardrec_plan_t* plan, shardrec_comm_t* comm,
                                         shardrec_embedding_t** coll) {
  shardrec_optimizer_config_t opt;
  shardrec_embedding_options_t options;
  shardrec_optimizer_config_init(&opt, SHARDREC_OPTIMIZER_CONFIG_VERSION);
  opt.type = SHARDREC_OPTIMIZER_ADAGRAD;
  opt.learning_rate = 0.1f;
  shardrec_embedding_options_init(&options, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  options.seed = 7;
  return shardrec_embedding_create(coll, plan, comm, &opt, &options);
}

/* Whether every shard of each node-local row block is on one host (`host` of each rank). */
static int node_local_ok(const shardrec_plan_t* plan, const int* host, int rank) {
  int32_t type = 0;
  size_t n = 0, i;
  shardrec_shard_t s, first;
  if (shardrec_plan_table_sharding(plan, 0, &type, &n) != SHARDREC_OK) return 0;
  if (type != SHARDREC_SHARDING_TABLE_ROW_WISE && type != SHARDREC_SHARDING_TABLE_COLUMN_WISE &&
      type != SHARDREC_SHARDING_GRID)
    return 1;
  for (i = 0; i < n; ++i) {
    size_t j = 0;
    shardrec_plan_shard(plan, 0, i, &s);
    /* Grid: the row blocks of one column block; the table-wise variants: the whole table. */
    for (j = 0; j < i; ++j) {
      shardrec_plan_shard(plan, 0, j, &first);
      if (type != SHARDREC_SHARDING_GRID || first.col_offset == s.col_offset) break;
    }
    if (j == i) first = s;
    if (host[s.rank] != host[first.rank]) {
      if (rank == 0)
        fprintf(stderr, "%s: shard %zu on rank %d (host %d), its block's on rank %d (host %d)\n",
                kTypeNames[type], i, s.rank, host[s.rank], first.rank, host[first.rank]);
      return 0;
    }
  }
  return 1;
}

typedef struct {
  shardrec_comm_t* comm;
  int rank, world, rpn;
  const int* host; /* NULL: no host check (threads of one process) */
  double sums[NUM_TYPES];
  int status;
} shard_job_t;

static void* shard_rank(void* arg) {
  shard_job_t* job = arg;
  const int rank = job->rank;
  int status = 0, type;
  for (type = 0; type < NUM_TYPES; ++type) {
    shardrec_plan_t* plan = NULL;
    shardrec_embedding_t* coll = NULL;
    CHECK(make_plan(type, job->world, job->rpn, &plan));
    if (job->host != NULL && !node_local_ok(plan, job->host, rank)) status = 1;
    CHECK(make_collection(plan, job->comm, &coll));
    CHECK(train(coll, rank, 0, &job->sums[type]));
    shardrec_embedding_destroy(coll);
    shardrec_plan_destroy(plan);
    continue;
  done:
    shardrec_embedding_destroy(coll);
    shardrec_plan_destroy(plan);
    break;
  }
  job->status = status;
  return NULL;
}

static void print_sums(const double* sums, int world) {
  int type, r;
  for (type = 0; type < NUM_TYPES; ++type) {
    printf("sums %s%s:", kTypeNames[type], g_dynamic ? " dynamic" : "");
    for (r = 0; r < world; ++r) printf(" %a", sums[r * NUM_TYPES + type]);
    printf("\n");
  }
}

static int run_shard_local(int world) {
  shard_job_t jobs[MAX_WORLD];
  shardrec_comm_t* comms[MAX_WORLD];
  pthread_t threads[MAX_WORLD];
  double sums[MAX_WORLD * NUM_TYPES];
  int r, status = 0;
  const int rank = -1;
  CHECK(shardrec_comm_create_local_group(comms, world, NULL));
  for (r = 0; r < world; ++r) {
    memset(&jobs[r], 0, sizeof(jobs[r]));
    jobs[r].comm = comms[r];
    jobs[r].rank = r;
    jobs[r].world = world;
    jobs[r].rpn = g_rpn;
    pthread_create(&threads[r], NULL, shard_rank, &jobs[r]);
  }
  for (r = 0; r < world; ++r) pthread_join(threads[r], NULL);
  for (r = 0; r < world; ++r) {
    if (jobs[r].status != 0) status = jobs[r].status;
    memcpy(&sums[r * NUM_TYPES], jobs[r].sums, sizeof(jobs[r].sums));
    shardrec_comm_destroy(comms[r]);
  }
  if (status == 0) print_sums(sums, world);
done:
  return status;
}

static int run_shard_env(void) {
  shardrec_comm_t* comm = NULL;
  shardrec_topology_t topology;
  shard_job_t job;
  int32_t rank = -1, world = 0, host[MAX_WORLD];
  double sums[MAX_WORLD * NUM_TYPES];
  int status = 0, mine;
  CHECK(create_comm(&comm));
  CHECK(shardrec_comm_rank(&rank, comm));
  CHECK(shardrec_comm_size(&world, comm));
  if (world > MAX_WORLD) {
    fprintf(stderr, "world %d > %d\n", world, MAX_WORLD);
    status = 1;
    goto done;
  }
  /* The planner's node size comes from the hosts the ranks found themselves on. */
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  CHECK(shardrec_topology_from_comm(&topology, comm));
  printf("ranks_per_node %d\n", topology.ranks_per_node);
  mine = env_int("SHARDREC_BED_HOST", 0);
  CHECK(shardrec_comm_allgather(comm, &mine, host, 1, SHARDREC_DTYPE_INT32, NULL));
  memset(&job, 0, sizeof(job));
  job.comm = comm;
  job.rank = rank;
  job.world = world;
  job.rpn = topology.ranks_per_node;
  job.host = host;
  shard_rank(&job);
  status = job.status;
  if (status == 3) goto done;
  CHECK(shardrec_comm_allgather(comm, job.sums, sums, NUM_TYPES, SHARDREC_DTYPE_FLOAT64, NULL));
  if (rank == 0) print_sums(sums, world);
done:
  shardrec_comm_destroy(comm);
  return status;
}

static int run_info(void) {
  shardrec_comm_t* comm = NULL;
  shardrec_topology_t topology;
  int32_t rank = -1, lr = -1, ls = -1;
  const int per_host = env_int("SHARDREC_BED_RANKS", 1);
  int status = 0;
  CHECK(create_comm(&comm));
  CHECK(shardrec_comm_rank(&rank, comm));
  CHECK(shardrec_comm_local_rank(&lr, comm));
  CHECK(shardrec_comm_local_size(&ls, comm));
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  CHECK(shardrec_topology_from_comm(&topology, comm));
  printf("rank %d local_rank %d local_size %d ranks_per_node %d\n", rank, lr, ls,
         topology.ranks_per_node);
  if (lr != rank % per_host || ls != per_host || topology.ranks_per_node != per_host) {
    fprintf(stderr, "rank %d: expected local_rank %d, local_size and ranks_per_node %d\n", rank,
            rank % per_host, per_host);
    status = 1;
  }
done:
  shardrec_comm_destroy(comm);
  return status;
}

/* The network between the hosts as shardrec_topology_calibrate_network measures it. */
static int run_netbw(void) {
  shardrec_comm_t* comm = NULL;
  shardrec_topology_t topology;
  double measured = -1;
  int32_t rank = -1;
  int status = 0;
  CHECK(create_comm(&comm));
  CHECK(shardrec_comm_rank(&rank, comm));
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  CHECK(shardrec_topology_from_comm(&topology, comm));
  CHECK(shardrec_topology_calibrate_network(&topology, comm, 1.0, &measured));
  printf("inter_node_bandwidth %.0f measured %.0f\n", topology.inter_node_bandwidth, measured);
done:
  shardrec_comm_destroy(comm);
  return status;
}

static int run_steps(int n) {
  shardrec_comm_t* comm = NULL;
  int32_t rank = -1;
  float buf[1024];
  int status = 0, step;
  memset(buf, 0, sizeof(buf));
  CHECK(create_comm(&comm));
  CHECK(shardrec_comm_rank(&rank, comm));
  printf("rank %d: formed\n", rank);
  fflush(stdout);
  for (step = 0; step < n; ++step) {
    const double t0 = now_ms();
    const shardrec_status_t rc = shardrec_comm_allreduce(
        comm, buf, buf, 1024, SHARDREC_DTYPE_FLOAT32, SHARDREC_REDUCE_SUM, NULL);
    if (rc != SHARDREC_OK) {
      printf("rank %d: step %d failed after %.0f ms: %s: %s\n", rank, step, now_ms() - t0,
             shardrec_status_string(rc), shardrec_last_error());
      status = 3;
      goto done;
    }
    {
      const struct timespec pause = {0, 50000000L};
      nanosleep(&pause, NULL);
    }
  }
  printf("rank %d: %d steps\n", rank, n);
done:
  shardrec_comm_destroy(comm);
  return status;
}

/* A restarted job (the bed gives every rank TORCHELASTIC_RESTART_COUNT) and a rank left from its
 * previous attempt: the last rank first tries to join as that stale rank would (the count one
 * lower), which rank 0's store must refuse, and prints how long the refusal took; then it joins
 * as itself and every rank meets in a barrier. */
static int run_restart(void) {
  shardrec_comm_t* comm = NULL;
  int32_t rank = env_int("RANK", 0);
  const int world = env_int("WORLD_SIZE", 1), count = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  int status = 0;
  char text[32];
  if (rank == world - 1 && count > 0) {
    const double t0 = now_ms();
    shardrec_status_t rc;
    snprintf(text, sizeof(text), "%d", count - 1);
    setenv("TORCHELASTIC_RESTART_COUNT", text, 1);
    rc = create_comm(&comm);
    printf("stale attempt %s: %s after %.0f ms: %s\n", text, shardrec_status_string(rc),
           now_ms() - t0, rc == SHARDREC_OK ? "joined" : shardrec_last_error());
    fflush(stdout);
    if (rc == SHARDREC_OK) {
      status = 1;
      goto done;
    }
    snprintf(text, sizeof(text), "%d", count);
    setenv("TORCHELASTIC_RESTART_COUNT", text, 1);
  }
  CHECK(create_comm(&comm));
  CHECK(shardrec_comm_rank(&rank, comm));
  CHECK(shardrec_comm_barrier(comm));
  printf("rank %d: met at restart %d\n", rank, count);
done:
  shardrec_comm_destroy(comm);
  return status;
}

static int run_ckpt(int load, const char* dir) {
  shardrec_comm_t* comm = NULL;
  shardrec_topology_t topology;
  shardrec_plan_t* plan = NULL;
  shardrec_embedding_t* coll = NULL;
  int32_t rank = -1, world = 0;
  char path[4096];
  double sum = 0;
  int status = 0;
  CHECK(create_comm(&comm));
  CHECK(shardrec_comm_rank(&rank, comm));
  CHECK(shardrec_comm_size(&world, comm));
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  CHECK(shardrec_topology_from_comm(&topology, comm));
  /* Row-wise over every rank: a different world size reshards every row. */
  CHECK(make_plan(SHARDREC_SHARDING_ROW_WISE, world, topology.ranks_per_node, &plan));
  CHECK(make_collection(plan, comm, &coll));
  snprintf(path, sizeof(path), "%s/%s.st", dir, load ? "load" : "save");
  if (load) {
    CHECK(shardrec_checkpoint_load(coll, dir, NULL));
    /* The loaded table, before it trains on: compared byte for byte with the saved one. */
    CHECK(shardrec_checkpoint_export_table(coll, "t", path, 1));
    CHECK(train(coll, rank, 100, &sum));
    printf("rank %d of %d: loaded and trained on\n", rank, world);
  } else {
    CHECK(train(coll, rank, 0, &sum));
    CHECK(shardrec_checkpoint_save(coll, dir, NULL));
    CHECK(shardrec_checkpoint_export_table(coll, "t", path, 1));
    printf("rank %d of %d: saved\n", rank, world);
  }
done:
  shardrec_embedding_destroy(coll);
  shardrec_plan_destroy(plan);
  shardrec_comm_destroy(comm);
  return status;
}

int main(int argc, char** argv) {
  int i, local = 0;
  if (argc >= 2 && strcmp(argv[1], "info") == 0) return run_info();
  if (argc >= 2 && strcmp(argv[1], "netbw") == 0) return run_netbw();
  if (argc >= 2 && strcmp(argv[1], "restart") == 0) return run_restart();
  if (argc >= 3 && strcmp(argv[1], "steps") == 0) return run_steps(atoi(argv[2]));
  if (argc >= 4 && strcmp(argv[1], "ckpt") == 0)
    return run_ckpt(strcmp(argv[2], "load") == 0, argv[3]);
  if (argc >= 2 && strcmp(argv[1], "shard") == 0) {
    for (i = 2; i < argc; ++i) {
      if (strcmp(argv[i], "--dynamic") == 0) g_dynamic = 1;
      if (strcmp(argv[i], "--local") == 0 && i + 1 < argc) local = atoi(argv[++i]);
      if (strcmp(argv[i], "--rpn") == 0 && i + 1 < argc) g_rpn = atoi(argv[++i]);
    }
    if (local > 0) return local <= MAX_WORLD ? run_shard_local(local) : 2;
    return run_shard_env();
  }
  fprintf(stderr,
          "usage: mh_rank info | shard [--dynamic] [--local W --rpn P] | steps N | "
          "ckpt save|load DIR | restart\n");
  return 2;
}
