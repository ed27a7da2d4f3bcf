/*
 * @file dlrm_main.c
 * @brief Trains a DLRM (or DLRM-DCNv2) end to end through the public C API, in 2D: replica
 *        groups x S-way sharding of 26 embedding tables, with the dense side data-parallel over
 *        every rank. Ranks are threads of this process over the CPU (Gloo) backend, or one
 *        rank per process (--rank) meeting through a unique id, for several machines.
 *
 * Data: the synthetic Criteo-shaped stream of dlrm_data.h, or a Criteo TSV file (--criteo).
 * With --dynamic CAPACITY the categorical features are raw 64-bit ids (the synthetic ids hashed
 * to 64 bits, or Criteo's hexadecimal values not folded into a range) trained by dynamic tables
 * of at most CAPACITY rows each (docs/dynamic-tables.md); each report then adds the tables'
 * rows and evictions. The held-out evaluation then runs in the collection's evaluation mode
 * (dlrm_eval.h): held-out ids without a row read as zeros and nothing is inserted or touched.
 * Every report prints the training loss, the progressive-validation AUC and log loss (each
 * batch is scored before it is trained on), step time and samples/s; every --eval-every steps
 * a held-out set disjoint from training is scored with the forward-only pass (AUC, log loss,
 * and for synthetic data the Bayes-optimal AUC of the generator itself); the end prints where
 * a step's time went.
 *
 * Usage: dlrm [--world W] [--shard S] [--steps N] [--batch B] [--interaction dot|dcn]
 *             [--max-rows R] [--report K] [--eval-every K] [--eval-batches E]
 *             [--sync-every N] [--criteo FILE] [--seed X] [--plan-tables 0|1]
 *             [--rank R --world W [--unique-id HEX] [--unique-id-file PATH]]
 *             [--mpi 1]   (under mpirun: one rank per process on MPI_COMM_WORLD, MPI backend)
 *             [--launcher env] [--save DIR]
 *             [--dynamic CAPACITY [--eviction none|lru|lfu|ttl] [--ttl-steps N]
 *              [--admission N [--admission-decay K]]] [--tiered DIR]
 *             [--tables fp32|fp16|bf16|fp8_e4m3|fp8_e5m2] [--rounding nearest|stochastic]
 * --tables: every table's weight storage (FP8: no replica groups, --shard = --world).
 * --rounding: how a 16-bit or FP8 table's updated weights round (the optimizer's
 * stochastic_rounding; default nearest).
 * --tiered DIR: the largest table's rows and optimizer state on local disk under a DRAM cache of
 * a fifth of its rows (docs/disk-tier.md); the end prints its hit rate and disk reads.
 * --launcher env: one rank per process, rank and world from the launcher (torchrun, mpirun,
 * srun; see docs/launch.md), no unique id to ship.
 */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlrm_data.h"
#include "dlrm_eval.h"
#include "dlrm_model.h"
#include "dlrm_progress.h"
#include "dlrm_rendezvous.h"
#include "dlrm_save.h"

#define MAX_WORLD 64

static int g_world = 4, g_shard = 2, g_steps = 200, g_batch = 256, g_report = 20;
static int g_eval_every = 50, g_eval_batches = 8, g_sync_every = 1;
static int g_interaction = DLRM_INTERACTION_DOT;
static int64_t g_max_rows = 100000;
static uint64_t g_seed = 7;
static const char* g_criteo = NULL;
static const char* g_save = NULL; /* --save DIR: checkpoint for serving after training */
static int g_rank = -1;           /* >= 0: one rank per process */
static int g_plan_tables = 0;
static const char* g_unique_id = NULL;
static const char* g_unique_id_file = NULL;
static int g_mpi = 0; /* 1: ranks and world from MPI_COMM_WORLD, collectives over MPI */
static int g_launcher_env = 0;
static int64_t g_rows[26];
/* --dynamic: every table's capacity (0: fixed tables) and its eviction and admission. */
static int64_t g_dynamic = 0;
/* --tiered DIR: the largest table on local disk under a cache of a fifth of its rows. */
static const char* g_tiered = NULL;
/* --tables: every table's weight storage type (a SHARDREC_DTYPE_* value). */
static int32_t g_table_dtype = SHARDREC_DTYPE_FLOAT32;
/* --rounding stochastic: shardrec_optimizer_config_t.stochastic_rounding of the tables. */
static int g_stochastic = 0;
static int g_tier_table = 0;
static int64_t g_capacity[26];
static shardrec_dynamic_table_config_t g_dynamic_config = SHARDREC_DYNAMIC_TABLE_CONFIG_INIT;
static shardrec_comm_t* g_comms[MAX_WORLD];
static dlrm_progress_t g_out;
static volatile int g_failed;

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
  const double n = t->steps > 0 ? (double)t->steps / 1e3 : 1.0;
  shardrec_ddp_stats_t s;
  dlrm_progress_line(
      &g_out,
      "rank 0 per step (ms): input dist %.2f, lookup %.2f, output dist %.2f (embedding fwd "
      "%.2f);\n  dense fwd %.2f (bottom %.2f, interaction %.2f, top %.2f, loss %.2f); dense bwd "
      "%.2f (top %.2f, interaction %.2f, bottom %.2f);\n  embedding bwd %.2f; dense sync wait "
      "%.2f; dense optimizer %.2f; 2D replica sync %.2f; total %.2f",
      t->input_dist / n, t->lookup / n, t->output_dist / n, t->embedding_fwd / n,
      (t->bottom_fwd + t->interaction_fwd + t->top_fwd + t->loss) / n, t->bottom_fwd / n,
      t->interaction_fwd / n, t->top_fwd / n, t->loss / n,
      (t->top_bwd + t->interaction_bwd + t->bottom_bwd) / n, t->top_bwd / n, t->interaction_bwd / n,
      t->bottom_bwd / n, t->embedding_bwd / n, t->dense_sync_wait / n, t->dense_optimizer / n,
      t->replica_sync / n, t->total / n);
  if (shardrec_ddp_stats(ddp, &s) == SHARDREC_OK && s.steps > 0) {
    dlrm_progress_line(&g_out,
                       "dense gradients: %lld bucket(s), %lld bytes per step; averaging took "
                       "%.2f ms per step, %.2f ms of it not hidden by the backward",
                       (long long)s.buckets, (long long)s.bytes_reduced,
                       1e3 * s.comm_seconds / (double)s.steps,
                       1e3 * s.exposed_seconds / (double)s.steps);
  }
}

/* Reads this rank's local batch of the next global batch (W consecutive local batches) and
   agrees with every rank on the outcome: B, fewer at end of file, -1 if any rank failed. */
static int read_batch(dlrm_criteo_t* r, shardrec_comm_t* comm, int rank, int W, float* dense,
                      int64_t* ids, float* labels) {
  const int B = g_batch;
  int64_t got = -1;
  if (dlrm_criteo_skip(r, (int64_t)rank * B) >= 0) {
    /* Dynamic tables take Criteo's hashed values as they are; fixed ones fold them. */
    got = dlrm_criteo_read(r, B, g_dynamic > 0 ? NULL : g_rows, dense, ids, labels);
    if (got >= 0 && dlrm_criteo_skip(r, (int64_t)(W - 1 - rank) * B) < 0) got = -1;
  }
  if (got < 0) fprintf(stderr, "rank %d: %s\n", rank, r->error);
  if (shardrec_comm_allreduce(comm, &got, &got, 1, SHARDREC_DTYPE_INT64, SHARDREC_REDUCE_MIN,
                              NULL) != SHARDREC_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, shardrec_last_error());
    return -1;
  }
  return (int)got;
}

/* The held-out set: synthetic samples from DLRM_HELD_OUT_FIRST, or the file's first
   batches * B * W lines (which training then skips). 0, or -1 (message printed). */
static int make_eval_set(dlrm_eval_set_t* set, const dlrm_synth_t* synth, dlrm_criteo_t* criteo,
                         shardrec_comm_t* comm, int rank, int W) {
  int k;
  if (dlrm_eval_set_alloc(set, g_eval_batches, g_batch, 13, 26, criteo == NULL) != 0) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    return -1;
  }
  if (criteo == NULL) {
    dlrm_eval_set_synth(set, synth, DLRM_HELD_OUT_FIRST, rank, W);
    /* Raw ids as in training (a Criteo file's are read raw already). */
    if (g_dynamic > 0)
      for (k = 0; k < set->batches; ++k)
        dlrm_raw_ids(26, g_batch, set->ids + (size_t)k * (size_t)g_batch * 26);
    return 0;
  }
  for (k = 0; k < set->batches; ++k) {
    const size_t B = (size_t)g_batch;
    const int got = read_batch(criteo, comm, rank, W, set->dense + k * B * 13,
                               set->ids + k * B * 26, set->labels + k * B);
    if (got < g_batch) {
      if (got >= 0 && rank == 0) fprintf(stderr, "%s: too short for the held-out set\n", g_criteo);
      return -1;
    }
  }
  return 0;
}

static void print_eval(int step, const dlrm_eval_result_t* e) {
  if (isnan(e->bayes_auc)) {
    dlrm_progress_line(&g_out, "step %4d  held-out AUC %.4f  log loss %.4f  (%lld samples)", step,
                       e->auc, e->logloss, (long long)e->samples);
  } else {
    dlrm_progress_line(&g_out,
                       "step %4d  held-out AUC %.4f (Bayes-optimal %.4f)  log loss %.4f "
                       "(Bayes-optimal %.4f)  (%lld samples)",
                       step, e->auc, e->bayes_auc, e->logloss, e->bayes_logloss,
                       (long long)e->samples);
  }
}

/* Dynamic tables: each table's stats summed over the ranks of sharding group 0 (in 2D the other
   groups hold copies of its tables), printed by rank 0 (collective). */
/* The tiered table's cache and disk counters, summed over the ranks that hold a part of it
   (rank 0 prints them). */
static shardrec_status_t print_tier(dlrm_t* model, shardrec_comm_t* comm, int rank) {
  double v[7] = {0, 0, 0, 0, 0, 0, 0};
  shardrec_tier_stats_t s = SHARDREC_TIER_STATS_INIT;
  /* EINVAL: this rank holds no part of the table (table-wise sharding puts it on one rank). */
  if (shardrec_embedding_tier_stats(dlrm_embedding(model), dlrm_table_name(model, g_tier_table),
                                    &s) == SHARDREC_OK) {
    v[0] = (double)s.cache_slots;
    v[1] = (double)s.hits;
    v[2] = (double)s.misses;
    v[3] = (double)s.disk_reads;
    v[4] = (double)s.write_backs;
    v[5] = s.exposed_fetch_seconds;
    v[6] = (double)s.steps;
  }
  {
    const shardrec_status_t rc =
        shardrec_comm_allreduce(comm, v, v, 7, SHARDREC_DTYPE_FLOAT64, SHARDREC_REDUCE_SUM, NULL);
    if (rc != SHARDREC_OK) return rc;
  }
  if (rank == 0)
    dlrm_progress_line(&g_out,
                       "tiered table %s: %lld rows, cache of %.0f slots (%.0f%% of the rows), hit "
                       "rate %.4f, disk reads %.0f, write-backs %.0f, exposed fetch %.3f ms per "
                       "forward",
                       dlrm_table_name(model, g_tier_table), (long long)g_rows[g_tier_table], v[0],
                       100.0 * v[0] / (double)g_rows[g_tier_table],
                       v[1] + v[2] > 0 ? v[1] / (v[1] + v[2]) : 0.0, v[3], v[4],
                       v[6] > 0 ? 1e3 * v[5] / v[6] : 0.0);
  return SHARDREC_OK;
}

enum { kStatSize, kStatCapacity, kStatInserted, kStatEvicted, kStatAdmission, kStatFull, kStats };

static shardrec_status_t print_dynamic(dlrm_t* model, shardrec_comm_t* comm, int rank, int step,
                                       int summary, int per_table) {
  int64_t sums[26 * kStats], total[kStats] = {0, 0, 0, 0, 0, 0};
  int32_t group = 0;
  int f, k;
  {
    const shardrec_status_t rc = shardrec_mesh_coords(dlrm_mesh(model), &group, NULL, NULL, NULL);
    if (rc != SHARDREC_OK) return rc;
  }
  for (f = 0; f < 26; ++f) {
    shardrec_dynamic_table_stats_t s = SHARDREC_DYNAMIC_TABLE_STATS_INIT;
    const shardrec_status_t rc =
        shardrec_embedding_dynamic_stats(dlrm_embedding(model), dlrm_table_name(model, f), &s);
    if (rc != SHARDREC_OK) return rc;
    sums[f * kStats + kStatSize] = s.size;
    sums[f * kStats + kStatCapacity] = s.capacity;
    sums[f * kStats + kStatInserted] = s.total_inserted;
    sums[f * kStats + kStatEvicted] = s.total_evicted;
    sums[f * kStats + kStatAdmission] = s.total_rejected_admission;
    sums[f * kStats + kStatFull] = s.total_rejected_full;
  }
  /* Each rank holds its row blocks' part, so sharding group 0's sums are the tables. */
  if (group != 0)
    for (k = 0; k < 26 * kStats; ++k) sums[k] = 0;
  {
    const shardrec_status_t rc = shardrec_comm_allreduce(
        comm, sums, sums, 26 * kStats, SHARDREC_DTYPE_INT64, SHARDREC_REDUCE_SUM, NULL);
    if (rc != SHARDREC_OK) return rc;
  }
  if (rank != 0) return SHARDREC_OK;
  for (f = 0; f < 26; ++f)
    for (k = 0; k < kStats; ++k) total[k] += sums[f * kStats + k];
  if (summary)
    dlrm_progress_line(&g_out,
                       "step %4d  dynamic tables: %lld rows of %lld slots, inserted %lld, evicted "
                       "%lld, rejected by admission %lld, rejected full %lld",
                       step, (long long)total[kStatSize], (long long)total[kStatCapacity],
                       (long long)total[kStatInserted], (long long)total[kStatEvicted],
                       (long long)total[kStatAdmission], (long long)total[kStatFull]);
  for (f = 0; per_table && f < 26; ++f) {
    const int64_t* t = sums + f * kStats;
    dlrm_progress_line(&g_out,
                       "  %-3s %9lld rows of %9lld, inserted %9lld, evicted %9lld, rejected "
                       "by admission %9lld, full %9lld",
                       dlrm_table_name(model, f), (long long)t[kStatSize],
                       (long long)t[kStatCapacity], (long long)t[kStatInserted],
                       (long long)t[kStatEvicted], (long long)t[kStatAdmission],
                       (long long)t[kStatFull]);
  }
  return SHARDREC_OK;
}

typedef struct rank_arg {
  int rank;
  shardrec_comm_t* comm;
} rank_arg_t;

static void* run_rank(void* arg) {
  const int rank = ((rank_arg_t*)arg)->rank;
  shardrec_comm_t* const comm = ((rank_arg_t*)arg)->comm;
  const int B = g_batch, W = g_world;
  dlrm_config_t cfg;
  dlrm_t* model = NULL;
  dlrm_synth_t synth;
  dlrm_criteo_t criteo;
  dlrm_eval_set_t eval;
  dlrm_eval_result_t result;
  float* dense = malloc(sizeof(float) * (size_t)B * 13);
  int64_t* ids = malloc(sizeof(int64_t) * (size_t)B * 26);
  float* labels = malloc(sizeof(float) * (size_t)B);
  /* Progressive validation window: this rank's scores and labels of the last report period,
     then every rank's. */
  const size_t window = (size_t)g_report * (size_t)B;
  float* mine = malloc(sizeof(float) * window * 2);
  float* all = malloc(sizeof(float) * window * 2 * (size_t)W);
  int step, use_criteo = 0;
  double start = now_seconds(), period_start = start, loss_sum = 0, last_loss = NAN;
  memset(&criteo, 0, sizeof(criteo));
  memset(&eval, 0, sizeof(eval));
  if (!dense || !ids || !labels || !mine || !all) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    g_failed = 1;
    goto out;
  }
  dlrm_config_defaults(&cfg);
  cfg.rows = g_dynamic > 0 ? g_capacity : g_rows;
  cfg.interaction = g_interaction;
  cfg.shard_size = g_shard;
  cfg.local_batch = B;
  cfg.seed = g_seed;
  cfg.sync_interval = g_sync_every;
  if (g_dynamic > 0) cfg.dynamic = &g_dynamic_config;
  cfg.table_dtype = g_table_dtype;
  cfg.sparse_optimizer.stochastic_rounding = g_stochastic;
  if (g_tiered != NULL) {
    /* A fifth of the table's rows over the ranks (the planner splits this table by rows over
       every rank of the sharding group): each row is 16 fp32 values, one row-wise Adagrad
       value and 32 bytes of cache metadata (shardrec_table_tier_t). */
    cfg.tier_dir = g_tiered;
    cfg.tier_table = g_tier_table;
    cfg.tier_cache_bytes = g_rows[g_tier_table] / 5 / W * (16 * 4 + 4 + 32);
  }
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
  CHECK(dlrm_create(&model, &cfg, comm));
  if (rank == 0) {
    char* text = NULL;
    CHECK(shardrec_mesh_describe(dlrm_mesh(model), &text, NULL));
    printf("%s", text);
    shardrec_free(text);
    text = NULL;
    CHECK(shardrec_plan_stats(dlrm_plan(model), &text, NULL));
    {
      /* The per-rank summary; the per-table rows (one per table) only with --plan-tables. */
      const char* tables = g_plan_tables ? NULL : strstr(text, "\nTable ");
      printf("plan of each sharding group:\n%.*s\n",
             (int)(tables ? tables - text : (long)strlen(text)), text);
    }
    shardrec_free(text);
  }
  synth.seed = g_seed;
  synth.num_dense = 13;
  synth.num_sparse = 26;
  synth.rows = g_rows;
  if (g_criteo != NULL) {
    if (dlrm_criteo_open(&criteo, g_criteo) != 0) {
      fprintf(stderr, "rank %d: %s\n", rank, criteo.error);
      g_failed = 1;
      goto out;
    }
    use_criteo = 1;
  }
  if (g_eval_every > 0) {
    if (make_eval_set(&eval, &synth, use_criteo ? &criteo : NULL, comm, rank, W) != 0) {
      g_failed = 1;
      goto out;
    }
    CHECK(dlrm_evaluate(model, comm, &eval, &result));
    if (rank == 0) print_eval(0, &result);
  }
  for (step = 0; step < g_steps; ++step) {
    double loss = 0;
    const size_t slot = (size_t)(step % g_report) * (size_t)B;
    int i;
    if (use_criteo) {
      const int got = read_batch(&criteo, comm, rank, W, dense, ids, labels);
      if (got < 0) {
        g_failed = 1;
        goto out;
      }
      if (got < B) {
        if (rank == 0) dlrm_progress_line(&g_out, "end of %s after %d steps", g_criteo, step);
        break; /* every rank agreed on the end */
      }
    } else {
      dlrm_synth_fill(&synth, (uint64_t)step * (uint64_t)B * (uint64_t)W + (uint64_t)rank * B, B,
                      dense, ids, labels);
      if (g_dynamic > 0) dlrm_raw_ids(26, B, ids);
    }
    CHECK(dlrm_train_step(model, dense, ids, labels, &loss, mine + slot));
    for (i = 0; i < B; ++i) mine[window + slot + (size_t)i] = labels[i];
    loss_sum += loss;
    if (rank == 0) {
      const double dt = now_seconds() - start;
      dlrm_progress_update(&g_out, "step %d/%d  loss %.4f (rank 0)  %.0f samples/s", step + 1,
                           g_steps, loss, (double)B * W * (step + 1) / dt);
    }
    if ((step + 1) % g_report == 0) {
      double totals[1];
      const double dt = now_seconds() - period_start;
      int r;
      totals[0] = loss_sum;
      CHECK(shardrec_comm_allreduce(comm, totals, totals, 1, SHARDREC_DTYPE_FLOAT64,
                                    SHARDREC_REDUCE_SUM, NULL));
      CHECK(shardrec_comm_allgather(comm, mine, all, window * 2, SHARDREC_DTYPE_FLOAT32, NULL));
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
          dlrm_progress_line(&g_out,
                             "step %4d  train loss %.4f  progressive AUC %.4f  log loss %.4f  "
                             "%.1f ms/step  %.0f samples/s",
                             step + 1, totals[0] / (double)(W * g_report),
                             dlrm_auc(scores, truth, (int64_t)window * W),
                             dlrm_logloss(scores, truth, (int64_t)window * W), 1e3 * dt / g_report,
                             (double)B * W * g_report / dt);
        }
        free(scores);
        free(truth);
      }
      if (g_dynamic > 0) CHECK(print_dynamic(model, comm, rank, step + 1, 1, 0));
      loss_sum = 0;
      period_start = now_seconds();
    }
    if (g_eval_every > 0 && ((step + 1) % g_eval_every == 0 || step + 1 == g_steps)) {
      const double t0 = now_seconds();
      CHECK(dlrm_evaluate(model, comm, &eval, &result));
      if (rank == 0) print_eval(step + 1, &result);
      /* Evaluation time is not training time. */
      start += now_seconds() - t0;
      period_start += now_seconds() - t0;
    }
    last_loss = loss;
  }
  /* The mean loss over the last global batch: the same number on every rank and process. */
  CHECK(shardrec_comm_allreduce(comm, &last_loss, &last_loss, 1, SHARDREC_DTYPE_FLOAT64,
                                SHARDREC_REDUCE_SUM, NULL));
  last_loss /= W;
  /* Per table at the end (the summary unless the last report just printed it). */
  if (g_dynamic > 0) CHECK(print_dynamic(model, comm, rank, step, step % g_report != 0, 1));
  if (g_tiered != NULL) CHECK(print_tier(model, comm, rank));
  if (g_save != NULL) {
    CHECK(dlrm_save(model, g_save, g_dynamic > 0));
    /* The exact held-out AUC of the saved model (evaluated again: a Criteo file may have ended
       the loop before its last evaluation), which examples/serve reproduces from it. */
    if (g_eval_every > 0) CHECK(dlrm_evaluate(model, comm, &eval, &result));
    if (rank == 0 && g_eval_every > 0) {
      dlrm_progress_line(&g_out, "saved %s (held-out AUC %.17g over %lld samples)", g_save,
                         result.auc, (long long)result.samples);
    } else if (rank == 0) {
      dlrm_progress_line(&g_out, "saved %s", g_save);
    }
  }
  if (rank == 0) print_breakdown(model, dlrm_ddp(model));
  if (rank == 0 || g_rank >= 0) {
    dlrm_progress_line(&g_out, "rank %d: final loss %.9g (mean over the last global batch)", rank,
                       last_loss);
  }
out:
  dlrm_criteo_close(&criteo);
  dlrm_eval_set_free(&eval);
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
          "          [--max-rows R] [--report K] [--eval-every K] [--eval-batches E]\n"
          "          [--sync-every N] [--criteo FILE] [--seed X] [--plan-tables 0|1]\n"
          "          [--rank R --world W [--unique-id HEX] [--unique-id-file PATH]]\n"
          "          [--launcher env] [--save DIR]\n"
          "          [--dynamic CAPACITY [--eviction none|lru|lfu|ttl] [--ttl-steps N]\n"
          "           [--admission N [--admission-decay K]]] [--tiered DIR]\n"
          "          [--tables fp32|fp16|bf16|fp8_e4m3|fp8_e5m2] [--rounding nearest|stochastic]\n"
          "  --tables: every table's weight storage (fp8_*: --shard = --world, fixed tables);\n"
          "  --rounding: how 16-bit and FP8 tables round updated weights (default nearest);\n"
          "  --tiered DIR: the largest table's rows on local disk (DIR/rank<R>) under a DRAM\n"
          "  cache of a fifth of them (no replica groups: --shard = --world; fixed tables);\n"
          "  --launcher env: one rank per process, placed by torchrun, mpirun or srun;\n"
          "  --eval-every 0 turns the held-out evaluation off; --sync-every N averages the\n"
          "  replica groups every N steps (1: exact 2D); --rank runs one rank in this process\n"
          "  (rank 0 prints the unique id the others need, or writes it to --unique-id-file);\n"
          "  --mpi 1 under mpirun takes rank and world from MPI_COMM_WORLD (MPI backend);\n"
          "  --save DIR writes the trained model (tables and dense tensors) for serving;\n"
          "  --dynamic CAPACITY trains raw 64-bit ids with dynamic tables of at most CAPACITY\n"
          "  rows (default eviction lru, admission 1; --admission-decay K halves the admission\n"
          "  counts every K steps); in 2D each replica sync merges the\n"
          "  groups' rows by id; held-out ids it never trained read as zeros\n",
          argv0);
  return 2;
}

int main(int argc, char** argv) {
  pthread_t threads[MAX_WORLD];
  rank_arg_t args[MAX_WORLD];
  shardrec_comm_options_t comm_options = SHARDREC_COMM_OPTIONS_INIT;
  int i;
  g_dynamic_config.eviction = SHARDREC_EVICTION_LRU;
  g_dynamic_config.ttl_steps = 100; /* read with --eviction ttl only */
  for (i = 1; i < argc; i += 2) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) return usage(argv[0]);
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
    else if (strcmp(a, "--eval-every") == 0)
      g_eval_every = atoi(v);
    else if (strcmp(a, "--eval-batches") == 0)
      g_eval_batches = atoi(v);
    else if (strcmp(a, "--plan-tables") == 0)
      g_plan_tables = atoi(v);
    else if (strcmp(a, "--sync-every") == 0)
      g_sync_every = atoi(v);
    else if (strcmp(a, "--max-rows") == 0)
      g_max_rows = atoll(v);
    else if (strcmp(a, "--seed") == 0)
      g_seed = (uint64_t)atoll(v);
    else if (strcmp(a, "--criteo") == 0)
      g_criteo = v;
    else if (strcmp(a, "--save") == 0)
      g_save = v;
    else if (strcmp(a, "--rank") == 0)
      g_rank = atoi(v);
    else if (strcmp(a, "--unique-id") == 0)
      g_unique_id = v;
    else if (strcmp(a, "--unique-id-file") == 0)
      g_unique_id_file = v;
    else if (strcmp(a, "--mpi") == 0)
      g_mpi = atoi(v);
    else if (strcmp(a, "--dynamic") == 0) {
      char* end = NULL;
      g_dynamic = strtoll(v, &end, 10);
      if (end == v || *end != '\0' || g_dynamic < 1) return usage(argv[0]);
    } else if (strcmp(a, "--tiered") == 0)
      g_tiered = v;
    else if (strcmp(a, "--tables") == 0 && strcmp(v, "fp32") == 0)
      g_table_dtype = SHARDREC_DTYPE_FLOAT32;
    else if (strcmp(a, "--tables") == 0 && strcmp(v, "fp16") == 0)
      g_table_dtype = SHARDREC_DTYPE_FLOAT16;
    else if (strcmp(a, "--tables") == 0 && strcmp(v, "bf16") == 0)
      g_table_dtype = SHARDREC_DTYPE_BFLOAT16;
    else if (strcmp(a, "--tables") == 0 && strcmp(v, "fp8_e4m3") == 0)
      g_table_dtype = SHARDREC_DTYPE_FP8_E4M3;
    else if (strcmp(a, "--tables") == 0 && strcmp(v, "fp8_e5m2") == 0)
      g_table_dtype = SHARDREC_DTYPE_FP8_E5M2;
    else if (strcmp(a, "--rounding") == 0 && strcmp(v, "nearest") == 0)
      g_stochastic = 0;
    else if (strcmp(a, "--rounding") == 0 && strcmp(v, "stochastic") == 0)
      g_stochastic = 1;
    else if (strcmp(a, "--admission") == 0)
      g_dynamic_config.admission_threshold = atoi(v);
    else if (strcmp(a, "--admission-decay") == 0)
      g_dynamic_config.admission_decay_steps = atoll(v);
    else if (strcmp(a, "--ttl-steps") == 0)
      g_dynamic_config.ttl_steps = atoll(v);
    else if (strcmp(a, "--eviction") == 0 && strcmp(v, "none") == 0)
      g_dynamic_config.eviction = SHARDREC_EVICTION_NONE;
    else if (strcmp(a, "--eviction") == 0 && strcmp(v, "lru") == 0)
      g_dynamic_config.eviction = SHARDREC_EVICTION_LRU;
    else if (strcmp(a, "--eviction") == 0 && strcmp(v, "lfu") == 0)
      g_dynamic_config.eviction = SHARDREC_EVICTION_LFU;
    else if (strcmp(a, "--eviction") == 0 && strcmp(v, "ttl") == 0)
      g_dynamic_config.eviction = SHARDREC_EVICTION_TTL;
    else if (strcmp(a, "--launcher") == 0 && strcmp(v, "env") == 0)
      g_launcher_env = 1;
    else if (strcmp(a, "--interaction") == 0 && strcmp(v, "dot") == 0)
      g_interaction = DLRM_INTERACTION_DOT;
    else if (strcmp(a, "--interaction") == 0 && strcmp(v, "dcn") == 0)
      g_interaction = DLRM_INTERACTION_DCN;
    else
      return usage(argv[0]);
  }
  if (g_mpi) {
    /* mpirun decides the ranks: this process is one of them, on MPI_COMM_WORLD. */
    shardrec_comm_options_t mpi_options = SHARDREC_COMM_OPTIONS_INIT;
    mpi_options.backend = SHARDREC_BACKEND_MPI;
    if (shardrec_comm_create_mpi(&args[0].comm, 0, &mpi_options) != SHARDREC_OK) {
      fprintf(stderr, "MPI communicator: %s\n", shardrec_last_error());
      return 1;
    }
    shardrec_comm_rank(&g_rank, args[0].comm);
    shardrec_comm_size(&g_world, args[0].comm);
    if (g_world % g_shard != 0) g_shard = g_world;
  } else if (g_launcher_env) {
    /* The launcher placed this process: the communicator says which rank of how many it is. */
    if (shardrec_comm_create_from_env(&args[0].comm, &comm_options) != SHARDREC_OK) {
      fprintf(stderr, "communicator from the launcher's environment: %s\n", shardrec_last_error());
      return 1;
    }
    if (shardrec_comm_rank(&g_rank, args[0].comm) != SHARDREC_OK ||
        shardrec_comm_size(&g_world, args[0].comm) != SHARDREC_OK)
      return 1;
  }
  if (g_world < 1 || g_world > MAX_WORLD || g_shard < 1 || g_world % g_shard != 0 || g_steps < 1 ||
      g_batch < 1 || g_report < 1 || g_max_rows < 1 || g_eval_every < 0 || g_eval_batches < 1 ||
      g_sync_every < 1 || g_rank >= g_world || g_dynamic < 0 ||
      (g_tiered != NULL && (g_shard != g_world || g_dynamic > 0)) ||
      ((g_table_dtype == SHARDREC_DTYPE_FP8_E4M3 || g_table_dtype == SHARDREC_DTYPE_FP8_E5M2) &&
       (g_shard != g_world || g_dynamic > 0)))
    return usage(argv[0]);
  for (i = 0; i < 26; ++i) g_rows[i] = kCriteoRows[i] < g_max_rows ? kCriteoRows[i] : g_max_rows;
  for (i = 1; i < 26; ++i)
    if (g_rows[i] > g_rows[g_tier_table]) g_tier_table = i;
  /* Synthetic ids of feature f take at most g_rows[f] distinct values, so its table never needs
     more slots; a Criteo file's raw ids have whatever cardinality the file has. */
  for (i = 0; i < 26; ++i)
    g_capacity[i] = g_criteo == NULL && g_rows[i] < g_dynamic ? g_rows[i] : g_dynamic;
  dlrm_progress_init(&g_out, stdout, isatty(STDOUT_FILENO));
  if (g_rank <= 0) {
    printf(
        "libshardrec %s: %s on %d CPU ranks (%s) = %d replica group(s) x %d-way sharding, "
        "local batch %d, %s data\n",
        shardrec_version_string(),
        g_interaction == DLRM_INTERACTION_DOT ? "DLRM (dot interaction)" : "DLRM-DCNv2", g_world,
        g_mpi         ? "one per process, MPI"
        : g_rank >= 0 ? "one per process"
                      : "threads",
        g_world / g_shard, g_shard, g_batch, g_criteo ? g_criteo : "synthetic Criteo-shaped");
    if (g_dynamic > 0) {
      static const char* const kEviction[] = {"none", "LRU", "LFU", "TTL"};
      printf(
          "raw 64-bit ids, dynamic tables of at most %lld rows (eviction %s, admission after "
          "%d sighting(s), counts halved every %lld steps (0: never)); held-out evaluation in "
          "evaluation mode (no insertion)\n",
          (long long)g_dynamic, kEviction[g_dynamic_config.eviction & 3],
          g_dynamic_config.admission_threshold > 1 ? g_dynamic_config.admission_threshold : 1,
          (long long)g_dynamic_config.admission_decay_steps);
    }
  }
  if (g_rank >= 0) {
    args[0].rank = g_rank;
    const char* id = g_unique_id != NULL ? g_unique_id : getenv("DLRM_UNIQUE_ID");
    if (!g_mpi && !g_launcher_env &&
        dlrm_rendezvous(&args[0].comm, g_rank, g_world, id, g_unique_id_file) != 0)
      return 1;
    /* Several ranks on this host: one BLAS thread each, as the ranks that are threads of one
       process use below. The cores are shared, and OpenBLAS's threaded GEMM rounds some shapes
       differently from its single-threaded one (measured on an AMD EPYC: 32 x 128 x 367), so
       only with the same BLAS thread count does a launched world train bit for bit as the same
       world in one process. */
    {
      int32_t local_size = 1;
      if (shardrec_comm_local_size(&local_size, args[0].comm) == SHARDREC_OK && local_size > 1)
        shardrec_dense_set_blas_threads(1);
    }
    run_rank(&args[0]);
    shardrec_comm_destroy(args[0].comm);
  } else {
    /* The ranks are threads of this process: one BLAS thread each, or they oversubscribe. */
    if (g_world > 1) shardrec_dense_set_blas_threads(1);
    if (shardrec_comm_create_local_group(g_comms, g_world, &comm_options) != SHARDREC_OK) {
      fprintf(stderr, "communicators: %s\n", shardrec_last_error());
      return 1;
    }
    for (i = 0; i < g_world; ++i) {
      args[i].rank = i;
      args[i].comm = g_comms[i];
      pthread_create(&threads[i], NULL, run_rank, &args[i]);
    }
    for (i = 0; i < g_world; ++i) pthread_join(threads[i], NULL);
    for (i = 0; i < g_world; ++i) shardrec_comm_destroy(g_comms[i]);
  }
  dlrm_progress_finish(&g_out);
  if (g_failed) return 1;
  printf("done\n");
  return 0;
}
