/*
 * @file mh_train.c
 * @brief A training job of the multi-host test bed (netns_bed.sh) that checkpoints as it goes,
 *        through the public C API only: what a user's job across hosts does, and what it sees
 *        when a host dies or the network fails under it.
 *
 * Usage: mh_train DIR STEPS EVERY [resume]
 *   Two tables: "big" (fixed, 20000 x 16, table-row-wise: its row blocks on the ranks of one
 *   host, from the hosts the ranks found themselves on) kept on disk under a small DRAM cache
 *   (tiered, this rank's store in DIR/tier/rank<r>), and "dyn" (dynamic, raw 64-bit ids,
 *   row-wise over every rank). Adagrad. A global batch of 32 samples a step, split over the
 *   ranks in order, so every world size trains on the same samples. Steps 1..STEPS; after every
 *   EVERY-th step a checkpoint is saved into DIR/ck (one directory, each save replacing the
 *   last), with the step as a dense tensor. With "resume", DIR/ck is loaded first (when it has
 *   a manifest), both tables are exported right after the load (DIR/out/resume<world>.<table>.st)
 *   and training goes on from its step. At the end both tables are exported to
 *   DIR/out/final<world>.<table>.st. With SHARDREC_BED_EXPORT_SAVES=1 both tables are also
 *   exported after every save (DIR/out/step<S>.<table>.st): the reference a resumed run's
 *   loaded state is compared with.
 *
 * Environment (beside the bed's launcher variables):
 *   SHARDREC_BED_TIMEOUT_MS   the communicator timeout (default 10000)
 *   SHARDREC_BED_TIERS        the tiered tables: 0 none, 1 "big" (default), 2 "dyn" too (48 KB of
 *                             cache a rank); the results do not depend on it
 *   SHARDREC_BED_PAUSE_MS     pause between steps (default 20), so a timed fault lands mid-run
 *   SHARDREC_BED_FAULT_IN_SAVE  "KIND:H:S:MS", MS ms into the save after step S (S = 0: into
 *                             the load of a resumed run): with KIND
 *                             "kill" the ranks of host H kill themselves (SIGKILL: a host lost in
 *                             the middle of a save); with "linkdown" host H's last rank sets the
 *                             host's link down (the ranks run as root in their namespace)
 *   SHARDREC_BED_WATCHDOG_MS  a watchdog thread aborts the communicator (shardrec_comm_abort)
 *                             when one call has run this long; the rank prints how long the call
 *                             took to return after the abort
 * Every call prints "step S ..." / "save S ..." lines; a failing call prints
 * "<what> S failed after T ms: STATUS: message". Exit 0 on success, 3 on a library error,
 * 1 on a failed check, 2 for bad usage.
 */
#define _POSIX_C_SOURCE 200112L
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mh_util.h"
#include "shardrec/checkpoint.h"
#include "shardrec/comm.h"
#include "shardrec/embedding.h"
#include "shardrec/plan.h"
#include "shardrec/tier.h"

#define BIG_ROWS 20000
#define DYN_ROWS 4096 /* capacity: never full in these runs (no eviction) */
#define DIM 16
#define GLOBAL_BATCH 32
#define MAX_BAG 3

/* ---- The watchdog: one call at a time is watched; past its limit the communicator is aborted. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static shardrec_comm_t* g_comm;
static double g_call_start = -1; /* < 0: no call in flight */
static double g_aborted_at = -1;
static int g_watchdog_ms;

static void* watchdog(void* arg) {
  (void)arg;
  for (;;) {
    const struct timespec tick = {0, 10000000L};
    nanosleep(&tick, NULL);
    pthread_mutex_lock(&g_mu);
    if (g_call_start >= 0 && g_aborted_at < 0 && now_ms() - g_call_start > g_watchdog_ms) {
      g_aborted_at = now_ms();
      shardrec_comm_abort(g_comm);
    }
    pthread_mutex_unlock(&g_mu);
  }
  return NULL;
}

static void call_begins(void) {
  pthread_mutex_lock(&g_mu);
  g_call_start = now_ms();
  pthread_mutex_unlock(&g_mu);
}

/* Prints the failure of call `what` (S) and how long it took; -1 when it succeeded. */
static int call_ends(shardrec_status_t rc, const char* what, int step, int rank) {
  double start, aborted;
  pthread_mutex_lock(&g_mu);
  start = g_call_start;
  aborted = g_aborted_at;
  g_call_start = -1;
  pthread_mutex_unlock(&g_mu);
  if (rc == SHARDREC_OK) return -1;
  printf("rank %d: %s %d failed after %.0f ms: %s: %s\n", rank, what, step, now_ms() - start,
         shardrec_status_string(rc), shardrec_last_error());
  if (aborted >= 0) printf("rank %d: returned %.0f ms after the abort\n", rank, now_ms() - aborted);
  fflush(stdout);
  return 3;
}

/* ---- A fault in the middle of a save, MS ms into it: the host's ranks killed, or its link
 * down. */
static int g_fault_host = -1, g_fault_step = -1, g_fault_ms, g_fault_linkdown;

static void* fault_later(void* arg) {
  (void)arg;
  const struct timespec d = {g_fault_ms / 1000, (long)(g_fault_ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
  if (g_fault_linkdown) {
    printf("setting my host's link down in the save: %s\n",
           system("ip link set eth0 down") == 0 ? "done" : "FAILED");
    fflush(stdout);
    return NULL;
  }
  printf("killing myself in the save\n");
  fflush(stdout);
  raise(SIGKILL);
  return NULL;
}

/* Starts the fault of SHARDREC_BED_FAULT_IN_SAVE when this is its host and step (0: the load). */
static void start_fault(int host, int step) {
  pthread_t t;
  if (host != g_fault_host || step != g_fault_step) return;
  /* The link is set down by the host's last rank alone. */
  if (g_fault_linkdown && env_int("LOCAL_RANK", 0) != env_int("LOCAL_WORLD_SIZE", 1) - 1) return;
  pthread_create(&t, NULL, fault_later, NULL);
  pthread_detach(t);
}

/* ---- The model. */
static shardrec_status_t make_plan(int world, int rpn, shardrec_plan_t** plan) {
  static const int32_t f0 = 0, f1 = 1;
  shardrec_feature_config_t features[2];
  shardrec_table_config_t tables[2];
  shardrec_table_constraints_t constraints[2];
  shardrec_topology_t topology;
  shardrec_dynamic_table_config_t dyn = SHARDREC_DYNAMIC_TABLE_CONFIG_INIT;
  int i;
  for (i = 0; i < 2; ++i) {
    shardrec_feature_config_init(&features[i], SHARDREC_FEATURE_CONFIG_VERSION);
    features[i].pooling_factor = 2.0f;
    shardrec_table_config_init(&tables[i], SHARDREC_TABLE_CONFIG_VERSION);
    tables[i].dim = DIM;
    tables[i].pooling = SHARDREC_POOLING_SUM;
    tables[i].num_features = 1;
    shardrec_table_constraints_init(&constraints[i], SHARDREC_TABLE_CONSTRAINTS_VERSION);
  }
  features[0].name = "fbig";
  features[1].name = "fdyn";
  tables[0].name = constraints[0].table = "big";
  tables[0].rows = BIG_ROWS;
  tables[0].features = &f0;
  constraints[0].sharding_types = 1u << SHARDREC_SHARDING_TABLE_ROW_WISE;
  tables[1].name = constraints[1].table = "dyn";
  tables[1].rows = DYN_ROWS;
  tables[1].features = &f1;
  tables[1].dynamic = &dyn;
  constraints[1].sharding_types = 1u << SHARDREC_SHARDING_ROW_WISE;
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  topology.world_size = world;
  topology.ranks_per_node = rpn;
  topology.batch_size = GLOBAL_BATCH / world;
  topology.optimizer = SHARDREC_OPTIMIZER_ADAGRAD;
  return shardrec_plan_create(plan, tables, 2, features, 2, &topology, constraints, 2);
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 32);
}

/* The bags of global sample g at step s: 1-3 ids of each feature, the same at every world size.
 * Fills the feature-major KJT of this rank's samples [first, first + n). */
static size_t make_batch(int step, int first, int n, int32_t* lengths, int64_t* ids) {
  size_t k = 0;
  int f, i, j;
  for (f = 0; f < 2; ++f)
    for (i = 0; i < n; ++i) {
      const uint64_t g = (uint64_t)(first + i);
      const int len = 1 + (int)(mix((uint64_t)step * 1000003u + g * 7u + (uint64_t)f) % MAX_BAG);
      lengths[f * n + i] = len;
      for (j = 0; j < len; ++j) {
        const uint64_t x = mix((uint64_t)step * 7919u + g * 131u + (uint64_t)(f * 17 + j));
        /* big: a skew towards low rows (hits and misses both); dyn: 1500 raw 64-bit ids. */
        ids[k++] = f == 0 ? (int64_t)((x % 97 < 60) ? x % 500 : x % BIG_ROWS)
                          : (int64_t)(mix(x % 1500) | 1u);
      }
    }
  return k;
}

static void export_both(shardrec_embedding_t* coll, const char* dir, const char* tag, int* rc) {
  char path[4096];
  static const char* const names[2] = {"big", "dyn"};
  int t;
  for (t = 0; t < 2 && *rc == 0; ++t) {
    snprintf(path, sizeof(path), "%s/out/%s.%s.st", dir, tag, names[t]);
    const shardrec_status_t s = shardrec_checkpoint_export_table(coll, names[t], path, 1);
    if (s != SHARDREC_OK) {
      printf("export %s failed: %s: %s\n", path, shardrec_status_string(s), shardrec_last_error());
      *rc = 3;
    }
  }
}

int main(int argc, char** argv) {
  shardrec_comm_t* comm = NULL;
  shardrec_topology_t topology;
  shardrec_plan_t* plan = NULL;
  shardrec_embedding_t* coll = NULL;
  shardrec_comm_options_t co = SHARDREC_COMM_OPTIONS_INIT;
  shardrec_optimizer_config_t opt;
  shardrec_embedding_options_t options;
  shardrec_table_tier_t tiers[2];
  shardrec_checkpoint_options_t ck = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  shardrec_dense_tensor_t dense;
  float step_f = 0;
  int32_t rank = -1, world = 0;
  char path[4200], ckdir[4096], tierdir[4096], tag[64];
  int i, status = 0, step, first_step = 1, steps, every, resume, n, first, pause_ms, host;
  int32_t lengths[2 * GLOBAL_BATCH];
  int64_t ids[2 * GLOBAL_BATCH * MAX_BAG];
  float out[GLOBAL_BATCH * 2 * DIM], grad[GLOBAL_BATCH * 2 * DIM];
  shardrec_kjt_view_t view;
  shardrec_status_t rc;
  const char* fault;
  char kind[16] = "";

  if (argc < 4) {
    fprintf(stderr, "usage: mh_train DIR STEPS EVERY [resume]\n");
    return 2;
  }
  steps = atoi(argv[2]);
  every = atoi(argv[3]);
  resume = argc >= 5 && strcmp(argv[4], "resume") == 0;
  pause_ms = env_int("SHARDREC_BED_PAUSE_MS", 20);
  host = env_int("SHARDREC_BED_HOST", 0);
  fault = getenv("SHARDREC_BED_FAULT_IN_SAVE");
  if (fault != NULL &&
      sscanf(fault, "%15[a-z]:%d:%d:%d", kind, &g_fault_host, &g_fault_step, &g_fault_ms) != 4) {
    fprintf(stderr, "bad SHARDREC_BED_FAULT_IN_SAVE '%s'\n", fault);
    return 2;
  }
  g_fault_linkdown = strcmp(kind, "linkdown") == 0;
  snprintf(ckdir, sizeof(ckdir), "%s/ck", argv[1]);
  snprintf(path, sizeof(path), "%s/out", argv[1]);
  mkdir(argv[1], 0755);
  mkdir(path, 0755);

  co.timeout_ms = env_int("SHARDREC_BED_TIMEOUT_MS", 10000);
  call_begins();
  rc = shardrec_comm_create_from_env(&comm, &co);
  if ((status = call_ends(rc, "create", 0, env_int("RANK", -1))) > 0) goto done;
  status = 0;
  g_comm = comm;
  g_watchdog_ms = env_int("SHARDREC_BED_WATCHDOG_MS", 0);
  if (g_watchdog_ms > 0) {
    pthread_t t;
    pthread_create(&t, NULL, watchdog, NULL);
    pthread_detach(t);
  }
  shardrec_comm_rank(&rank, comm);
  shardrec_comm_size(&world, comm);
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  if (shardrec_topology_from_comm(&topology, comm) != SHARDREC_OK ||
      make_plan(world, topology.ranks_per_node, &plan) != SHARDREC_OK) {
    printf("rank %d: plan failed: %s\n", rank, shardrec_last_error());
    status = 3;
    goto done;
  }
  printf("rank %d of %d: ranks_per_node %d\n", rank, world, topology.ranks_per_node);
  shardrec_optimizer_config_init(&opt, SHARDREC_OPTIMIZER_CONFIG_VERSION);
  opt.type = SHARDREC_OPTIMIZER_ADAGRAD;
  opt.learning_rate = 0.05f;
  shardrec_embedding_options_init(&options, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  options.seed = 11;
  snprintf(tierdir, sizeof(tierdir), "%s/tier/rank%d", argv[1], rank);
  snprintf(path, sizeof(path), "%s/tier", argv[1]);
  mkdir(path, 0755);
  for (i = 0; i < 2; ++i) {
    shardrec_table_tier_init(&tiers[i], SHARDREC_TABLE_TIER_VERSION);
    tiers[i].dir = tierdir;
  }
  tiers[0].table = "big";
  tiers[0].cache_bytes = 64 * 1024; /* ~400 rows of 20000: evicts every step */
  tiers[1].table = "dyn";
  tiers[1].cache_bytes = 48 * 1024; /* ~300 rows of the ~1400 live ones */
  options.tiers = tiers;
  options.num_tiers = (size_t)env_int("SHARDREC_BED_TIERS", 1);
  if (options.num_tiers > 2) return 2;
  call_begins();
  rc = shardrec_embedding_create(&coll, plan, comm, &opt, &options);
  if ((status = call_ends(rc, "create_collection", 0, rank)) > 0) goto done;
  status = 0;

  dense.name = "step";
  dense.data = &step_f;
  dense.count = 1;
  ck.dense = &dense;
  ck.num_dense = 1;
  if (resume) {
    struct stat st;
    snprintf(path, sizeof(path), "%s/manifest.json", ckdir);
    if (stat(path, &st) == 0) {
      const double t0 = now_ms();
      start_fault(host, 0);
      call_begins();
      rc = shardrec_checkpoint_load(coll, ckdir, &ck);
      if ((status = call_ends(rc, "load", 0, rank)) > 0) goto done;
      status = 0;
      first_step = (int)step_f + 1;
      printf("rank %d: loaded the checkpoint of step %d in %.0f ms\n", rank, (int)step_f,
             now_ms() - t0);
      snprintf(tag, sizeof(tag), "resume%d", world);
      export_both(coll, argv[1], tag, &status);
      if (status != 0) goto done;
    }
  }

  n = GLOBAL_BATCH / world;
  first = rank * n;
  memset(&view, 0, sizeof(view));
  view.batch_size = n;
  view.num_features = 2;
  view.lengths = lengths;
  view.num_lengths = (size_t)(2 * n);
  view.values = ids;
  view.values_dtype = SHARDREC_DTYPE_INT64;
  for (step = first_step; step <= steps; ++step) {
    int j;
    view.num_values = make_batch(step, first, n, lengths, ids);
    call_begins();
    rc = shardrec_embedding_forward(coll, &view, out, (size_t)(n * 2 * DIM), NULL);
    if ((status = call_ends(rc, "step", step, rank)) > 0) goto done;
    /* The gradient of the rank's mean loss (the library sums row gradients over the global
     * batch and divides by the world: docs/semantics.md), so every world size trains one model
     * on the global batch with a mean loss; n and the world are powers of two, exact. */
    for (j = 0; j < n * 2 * DIM; ++j)
      grad[j] = (out[j] - 0.01f * (float)((first * 2 * DIM + j) % 7)) / (float)n;
    call_begins();
    rc = shardrec_embedding_backward(coll, grad, (size_t)(n * 2 * DIM), NULL);
    if ((status = call_ends(rc, "step", step, rank)) > 0) goto done;
    status = 0;
    printf("step %d\n", step);
    if (step % every == 0) {
      const double t0 = now_ms();
      step_f = (float)step;
      start_fault(host, step);
      printf("save %d begins\n", step);
      fflush(stdout);
      call_begins();
      rc = shardrec_checkpoint_save(coll, ckdir, &ck);
      if ((status = call_ends(rc, "save", step, rank)) > 0) goto done;
      status = 0;
      printf("save %d done in %.0f ms\n", step, now_ms() - t0);
      if (env_int("SHARDREC_BED_EXPORT_SAVES", 0) == 1) {
        snprintf(tag, sizeof(tag), "step%d", step);
        export_both(coll, argv[1], tag, &status);
        if (status != 0) goto done;
      }
    }
    fflush(stdout);
    if (pause_ms > 0) {
      const struct timespec p = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
      nanosleep(&p, NULL);
    }
  }
  snprintf(tag, sizeof(tag), "final%d", world);
  export_both(coll, argv[1], tag, &status);
  if (status == 0) printf("rank %d: trained to step %d\n", rank, steps);

done:
  fflush(stdout);
  {
    const double t0 = now_ms();
    shardrec_embedding_destroy(coll);
    shardrec_plan_destroy(plan);
    shardrec_comm_destroy(comm);
    printf("rank %d: destroyed in %.0f ms\n", rank, now_ms() - t0);
  }
  return status;
}
