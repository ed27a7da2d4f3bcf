/*
 * @file dlrm_main.c
 * @brief Trains a DLRM (or DLRM-DCNv2) end to end through the public C API: ranks are threads
 *        of this process over the CPU (Gloo) backend, in 2D: replica groups x S-way sharding of
 *        26 embedding tables, with the dense side data-parallel over every rank.
 *
 * Data: the synthetic Criteo-shaped stream of dlrm_data.h, or a Criteo TSV file (--criteo).
 * Every report prints the training loss, the progressive-validation AUC and log loss (each
 * batch is scored before it is trained on), step time and samples/s; the end prints where a
 * step's time went.
 *
 * Usage: dlrm [--world W] [--shard S] [--steps N] [--batch B] [--interaction dot|dcn]
 *             [--max-rows R] [--report K] [--criteo FILE] [--seed X]
 */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlrm_data.h"
#include "dlrm_model.h"

#define MAX_WORLD 64

static int g_world = 4, g_shard = 2, g_steps = 60, g_batch = 256, g_report = 10;
static int g_interaction = DLRM_INTERACTION_DOT;
static int64_t g_max_rows = 100000;
static uint64_t g_seed = 7;
static const char* g_criteo = NULL;
static int64_t g_rows[26];
static shardrec_comm_t* g_comms[MAX_WORLD];
static int g_failed;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define CHECK(call)                                                                              \
  do {                                                                                           \
    shardrec_status_t rc_ = (call);                                                              \
    if (rc_ != SHARDREC_OK) {                                                                    \
      fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #call, shardrec_status_string(rc_), \
              shardrec_last_error());                                                            \
      g_failed = 1;                                                                              \
      goto out;                                                                                  \
    }                                                                                            \
  } while (0)

static void print_breakdown(const dlrm_t* model, shardrec_ddp_t* ddp) {
  const dlrm_timings_t* t = dlrm_timings(model);
  const double n = t->steps > 0 ? (double)t->steps : 1.0;
  shardrec_ddp_stats_t s;
  printf(
      "rank 0 per step (ms): bottom fwd %.2f, embedding fwd %.2f, interaction fwd %.2f, "
      "top fwd %.2f, loss %.2f,\n  top bwd %.2f, interaction bwd %.2f, embedding bwd %.2f, "
      "bottom bwd %.2f, dense sync wait %.2f, dense optimizer %.2f, replica sync %.2f; "
      "total %.2f\n",
      1e3 * t->bottom_fwd / n, 1e3 * t->embedding_fwd / n, 1e3 * t->interaction_fwd / n,
      1e3 * t->top_fwd / n, 1e3 * t->loss / n, 1e3 * t->top_bwd / n, 1e3 * t->interaction_bwd / n,
      1e3 * t->embedding_bwd / n, 1e3 * t->bottom_bwd / n, 1e3 * t->dense_sync_wait / n,
      1e3 * t->dense_optimizer / n, 1e3 * t->replica_sync / n, 1e3 * t->total / n);
  if (shardrec_ddp_stats(ddp, &s) == SHARDREC_OK && s.steps > 0) {
    printf(
        "dense gradients: %lld bucket(s), %lld bytes per step; averaging took %.2f ms per "
        "step, %.2f ms of it not hidden by the backward\n",
        (long long)s.buckets, (long long)s.bytes_reduced, 1e3 * s.comm_seconds / (double)s.steps,
        1e3 * s.exposed_seconds / (double)s.steps);
  }
}

static void* run_rank(void* arg) {
  const int rank = (int)(intptr_t)arg;
  const int B = g_batch, W = g_world;
  dlrm_config_t cfg;
  dlrm_t* model = NULL;
  dlrm_synth_t synth;
  FILE* criteo = NULL;
  float* dense = malloc(sizeof(float) * (size_t)B * 13);
  int64_t* ids = malloc(sizeof(int64_t) * (size_t)B * 26);
  float* labels = malloc(sizeof(float) * (size_t)B);
  /* Progressive validation window: this rank's scores and labels of the last report period,
     then every rank's. */
  const size_t window = (size_t)g_report * (size_t)B;
  float* mine = malloc(sizeof(float) * window * 2);
  float* all = malloc(sizeof(float) * window * 2 * (size_t)W);
  int step;
  double period_start = now_seconds(), loss_sum = 0;
  if (!dense || !ids || !labels || !mine || !all) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    g_failed = 1;
    goto out;
  }
  dlrm_config_defaults(&cfg);
  cfg.rows = g_rows;
  cfg.interaction = g_interaction;
  cfg.shard_size = g_shard;
  cfg.local_batch = B;
  cfg.seed = g_seed;
  /* Small buckets, so this small model's dense gradients travel in several pieces that overlap
     the backward (a production model's MLPs fill the default 1 MiB + 25 MiB buckets). */
  cfg.first_bucket_bytes = 32 << 10;
  cfg.bucket_cap_bytes = 128 << 10;
  if (g_interaction == DLRM_INTERACTION_DCN) {
    static const int64_t top[] = {256, 64, 1};
    cfg.top = top;
    cfg.dcn_layers = 3;
    cfg.dcn_rank = 64;
  }
  CHECK(dlrm_create(&model, &cfg, g_comms[rank]));
  if (rank == 0) {
    char* text = NULL;
    CHECK(shardrec_mesh_describe(dlrm_mesh(model), &text, NULL));
    printf("%s", text);
    shardrec_free(text);
  }
  synth.seed = g_seed;
  synth.num_dense = 13;
  synth.num_sparse = 26;
  synth.rows = g_rows;
  if (g_criteo != NULL && (criteo = fopen(g_criteo, "r")) == NULL) {
    fprintf(stderr, "rank %d: cannot open %s\n", rank, g_criteo);
    g_failed = 1;
    goto out;
  }
  for (step = 0; step < g_steps; ++step) {
    double loss = 0;
    const size_t slot = (size_t)(step % g_report) * (size_t)B;
    int i;
    if (criteo != NULL) {
      /* Global batch = W consecutive local batches; this rank reads its own. */
      int got = dlrm_criteo_read(criteo, rank * B, B, g_rows, dense, ids, labels);
      int skip = dlrm_criteo_read(criteo, (W - 1 - rank) * B, 0, g_rows, dense, ids, labels);
      (void)skip;
      if (got < B) {
        if (rank == 0) printf("end of %s after %d steps\n", g_criteo, step);
        break; /* every rank reaches the end at the same step */
      }
    } else {
      dlrm_synth_fill(&synth, (uint64_t)step * (uint64_t)B * (uint64_t)W + (uint64_t)rank * B, B,
                      dense, ids, labels);
    }
    CHECK(dlrm_train_step(model, dense, ids, labels, &loss, mine + slot));
    for (i = 0; i < B; ++i) mine[window + slot + (size_t)i] = labels[i];
    loss_sum += loss;
    if ((step + 1) % g_report == 0) {
      double totals[1];
      const double dt = now_seconds() - period_start;
      int r;
      totals[0] = loss_sum;
      CHECK(shardrec_comm_allreduce(g_comms[rank], totals, totals, 1, SHARDREC_DTYPE_FLOAT64,
                                    SHARDREC_REDUCE_SUM, NULL));
      CHECK(shardrec_comm_allgather(g_comms[rank], mine, all, window * 2, SHARDREC_DTYPE_FLOAT32,
                                    NULL));
      if (rank == 0) {
        /* Regroup as [scores of every rank..., labels of every rank...]. */
        float* scores = malloc(sizeof(float) * window * (size_t)W);
        float* truth = malloc(sizeof(float) * window * (size_t)W);
        if (scores && truth) {
          for (r = 0; r < W; ++r) {
            memcpy(scores + (size_t)r * window, all + (size_t)r * 2 * window,
                   sizeof(float) * window);
            memcpy(truth + (size_t)r * window, all + (size_t)r * 2 * window + window,
                   sizeof(float) * window);
          }
          printf(
              "step %4d  train loss %.4f  progressive AUC %.4f  log loss %.4f  %.1f ms/step  "
              "%.0f samples/s\n",
              step + 1, totals[0] / (double)(W * g_report),
              dlrm_auc(scores, truth, (int64_t)window * W),
              dlrm_logloss(scores, truth, (int64_t)window * W), 1e3 * dt / g_report,
              (double)B * W * g_report / dt);
          fflush(stdout);
        }
        free(scores);
        free(truth);
      }
      loss_sum = 0;
      period_start = now_seconds();
    }
  }
  if (rank == 0) print_breakdown(model, dlrm_ddp(model));
out:
  if (criteo != NULL) fclose(criteo);
  dlrm_destroy(model);
  free(dense);
  free(ids);
  free(labels);
  free(mine);
  free(all);
  return NULL;
}

static int usage(const char* argv0) {
  fprintf(stderr,
          "usage: %s [--world W] [--shard S] [--steps N] [--batch B] [--interaction dot|dcn]\n"
          "          [--max-rows R] [--report K] [--criteo FILE] [--seed X]\n",
          argv0);
  return 2;
}

int main(int argc, char** argv) {
  pthread_t threads[MAX_WORLD];
  shardrec_comm_options_t comm_options = SHARDREC_COMM_OPTIONS_INIT;
  int i;
  for (i = 1; i < argc; i += 2) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL && strcmp(a, "--help") != 0) return usage(argv[0]);
    if (strcmp(a, "--world") == 0)
      g_world = atoi(v);
    else if (strcmp(a, "--shard") == 0)
      g_shard = atoi(v);
    else if (strcmp(a, "--steps") == 0)
      g_steps = atoi(v);
    else if (strcmp(a, "--batch") == 0)
      g_batch = atoi(v);
    else if (strcmp(a, "--report") == 0)
      g_report = atoi(v);
    else if (strcmp(a, "--max-rows") == 0)
      g_max_rows = atoll(v);
    else if (strcmp(a, "--seed") == 0)
      g_seed = (uint64_t)atoll(v);
    else if (strcmp(a, "--criteo") == 0)
      g_criteo = v;
    else if (strcmp(a, "--interaction") == 0 && strcmp(v, "dot") == 0)
      g_interaction = DLRM_INTERACTION_DOT;
    else if (strcmp(a, "--interaction") == 0 && strcmp(v, "dcn") == 0)
      g_interaction = DLRM_INTERACTION_DCN;
    else
      return usage(argv[0]);
  }
  if (g_world < 1 || g_world > MAX_WORLD || g_shard < 1 || g_world % g_shard != 0 || g_steps < 1 ||
      g_batch < 1 || g_report < 1 || g_max_rows < 1)
    return usage(argv[0]);
  for (i = 0; i < 26; ++i) g_rows[i] = kCriteoRows[i] < g_max_rows ? kCriteoRows[i] : g_max_rows;
  printf(
      "libshardrec %s: %s on %d CPU ranks = %d replica group(s) x %d-way sharding, local "
      "batch %d, %s data\n",
      shardrec_version_string(),
      g_interaction == DLRM_INTERACTION_DOT ? "DLRM (dot interaction)" : "DLRM-DCNv2", g_world,
      g_world / g_shard, g_shard, g_batch, g_criteo ? g_criteo : "synthetic Criteo-shaped");
  /* The ranks are threads of this process: one BLAS thread each, or they oversubscribe. */
  if (g_world > 1) shardrec_dense_set_blas_threads(1);
  if (shardrec_comm_create_local_group(g_comms, g_world, &comm_options) != SHARDREC_OK) {
    fprintf(stderr, "communicators: %s\n", shardrec_last_error());
    return 1;
  }
  for (i = 0; i < g_world; ++i) pthread_create(&threads[i], NULL, run_rank, (void*)(intptr_t)i);
  for (i = 0; i < g_world; ++i) pthread_join(threads[i], NULL);
  for (i = 0; i < g_world; ++i) shardrec_comm_destroy(g_comms[i]);
  if (g_failed) return 1;
  printf("done\n");
  return 0;
}
