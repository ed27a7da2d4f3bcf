/*
 * @file serve_main.c
 * @brief Serves the DLRM example's saved model (dlrm --save DIR) from N threads with each table
 *        stored as fp32, int8 and int4 in turn, and prints, side by side, throughput, p50/p99
 *        request latency and the held-out AUC, so the quality cost of quantization is measured.
 *
 * The held-out samples are the DLRM example's own (the synthetic stream from
 * DLRM_HELD_OUT_FIRST, same seed, in requests of the training's local batch), so with fp32
 * storage the AUC equals the training side's evaluation exactly: --expect-auc checks that, and
 * that int8 and int4 lose at most --max-drop-int8 / --max-drop-int4 of AUC.
 *
 * Usage: serve --checkpoint DIR [--threads N] [--batch B] [--samples S] [--rounds R]
 *              [--seed X] [--storage fp32,int8,int4] [--expect-auc A]
 *              [--max-drop-int8 D] [--max-drop-int4 D]
 */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrm_data.h"
#include "dlrm_eval.h"
#include "serve_bench.h"
#include "serve_model.h"

static const char* g_checkpoint = NULL;
static int g_threads = 2, g_batch = 256, g_samples = 2048, g_rounds = 5;
static uint64_t g_seed = 7;
static const char* g_storages = "fp32,int8,int4";
static double g_expect_auc = NAN, g_max_drop_int8 = 0.005, g_max_drop_int4 = 0.02;

static int usage(const char* argv0) {
  fprintf(stderr,
          "usage: %s --checkpoint DIR [--threads N] [--batch B] [--samples S] [--rounds R]\n"
          "          [--seed X] [--storage fp32,int8,int4] [--expect-auc A]\n"
          "          [--max-drop-int8 D] [--max-drop-int4 D]\n"
          "  DIR is what `dlrm --save DIR` wrote; B must be its --batch (the local batch) and\n"
          "  --seed its --seed for the held-out set to be the one it evaluated; S is a multiple\n"
          "  of B; --expect-auc A (the AUC dlrm printed when saving) turns the checks on\n",
          argv0);
  return 2;
}

typedef struct storage_kind {
  const char* name;
  int32_t value;
} storage_kind_t;

static const storage_kind_t kKinds[] = {
    {"fp32", SHARDREC_SERVING_FP32}, {"fp16", SHARDREC_SERVING_FP16},
    {"bf16", SHARDREC_SERVING_BF16}, {"int8", SHARDREC_SERVING_INT8},
    {"int4", SHARDREC_SERVING_INT4}, {"as-trained", SHARDREC_SERVING_AS_TRAINED}};

static const storage_kind_t* find_kind(const char* name, size_t len) {
  size_t i;
  for (i = 0; i < sizeof(kKinds) / sizeof(kKinds[0]); ++i) {
    if (strlen(kKinds[i].name) == len && strncmp(kKinds[i].name, name, len) == 0) return &kKinds[i];
  }
  return NULL;
}

/* Table bytes as stored: fp32 4 per value, fp16/bf16 2, int8 1 and int4 1/2 plus 8 per row. */
static double table_mib(const serve_model_t* m) {
  size_t n = 0, i;
  double bytes = 0;
  shardrec_inference_num_tables(m->inf, &n);
  for (i = 0; i < n; ++i) {
    const char* name;
    int64_t rows = 0;
    int32_t dim = 0, storage = 0;
    double per_row;
    shardrec_inference_table_info(m->inf, i, &name, &rows, &dim, &storage);
    switch (storage) {
      case SHARDREC_SERVING_FP16:
      case SHARDREC_SERVING_BF16:
        per_row = 2.0 * dim;
        break;
      case SHARDREC_SERVING_INT8:
        per_row = dim + 8.0;
        break;
      case SHARDREC_SERVING_INT4:
        per_row = (dim + 1) / 2 + 8.0;
        break;
      default:
        per_row = 4.0 * dim;
    }
    bytes += per_row * (double)rows;
  }
  return bytes / (1024.0 * 1024.0);
}

/* The table sizes in feature order (table "t<f>" serves feature f, as the DLRM names them). */
static int table_rows(const serve_model_t* m, int64_t* rows) {
  size_t n = 0, i;
  if (shardrec_inference_num_tables(m->inf, &n) != SHARDREC_OK || n != (size_t)m->num_sparse)
    return -1;
  for (i = 0; i < n; ++i) {
    const char* name;
    int64_t r = 0;
    int32_t dim = 0, storage = 0;
    int f = -1;
    if (shardrec_inference_table_info(m->inf, i, &name, &r, &dim, &storage) != SHARDREC_OK ||
        sscanf(name, "t%d", &f) != 1 || f < 0 || f >= (int)n)
      return -1;
    rows[f] = r;
  }
  return 0;
}

int main(int argc, char** argv) {
  int i, failed = 0;
  double fp32_auc = NAN;
  const char* s;
  for (i = 1; i < argc; i += 2) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) return usage(argv[0]);
    if (strcmp(a, "--checkpoint") == 0)
      g_checkpoint = v;
    else if (strcmp(a, "--threads") == 0)
      g_threads = atoi(v);
    else if (strcmp(a, "--batch") == 0)
      g_batch = atoi(v);
    else if (strcmp(a, "--samples") == 0)
      g_samples = atoi(v);
    else if (strcmp(a, "--rounds") == 0)
      g_rounds = atoi(v);
    else if (strcmp(a, "--seed") == 0)
      g_seed = strtoull(v, NULL, 10);
    else if (strcmp(a, "--storage") == 0)
      g_storages = v;
    else if (strcmp(a, "--expect-auc") == 0)
      g_expect_auc = strtod(v, NULL);
    else if (strcmp(a, "--max-drop-int8") == 0)
      g_max_drop_int8 = strtod(v, NULL);
    else if (strcmp(a, "--max-drop-int4") == 0)
      g_max_drop_int4 = strtod(v, NULL);
    else
      return usage(argv[0]);
  }
  if (g_checkpoint == NULL || g_threads < 1 || g_threads > SERVE_MAX_THREADS || g_batch < 1 ||
      g_samples < g_batch || g_samples % g_batch != 0 || g_rounds < 1)
    return usage(argv[0]);
  /* Each request runs on its own thread: one BLAS thread per request, or they oversubscribe. */
  shardrec_dense_set_blas_threads(1);
  printf(
      "libshardrec %s: serving %s, %d held-out samples in requests of %d, %d thread(s), "
      "%d timed round(s)\n",
      shardrec_version_string(), g_checkpoint, g_samples, g_batch, g_threads, g_rounds);
  printf("%-10s %10s %12s %9s %9s %14s %10s\n", "storage", "table MiB", "samples/s", "p50 ms",
         "p99 ms", "held-out AUC", "vs fp32");
  for (s = g_storages; *s != '\0';) {
    const size_t len = strcspn(s, ",");
    const storage_kind_t* kind = find_kind(s, len);
    serve_model_t model;
    serve_data_t data;
    serve_result_t r;
    int64_t rows[64];
    if (kind == NULL) {
      fprintf(stderr, "serve: unknown storage '%.*s'\n", (int)len, s);
      return 2;
    }
    s += len + (s[len] == ',');
    if (serve_model_open(&model, g_checkpoint, kind->value) != 0 || model.num_sparse > 64 ||
        table_rows(&model, rows) != 0 ||
        serve_data_make(&data, &model, rows, g_seed, g_samples, g_batch) != 0 ||
        serve_run(&model, &data, g_threads, g_rounds, &r) != 0) {
      fprintf(stderr, "serve: %s failed\n", kind->name);
      serve_model_destroy(&model);
      return 1;
    }
    if (kind->value == SHARDREC_SERVING_FP32) fp32_auc = r.auc;
    printf("%-10s %10.2f %12.0f %9.3f %9.3f %14.6f %+10.6f\n", kind->name, table_mib(&model),
           r.samples_per_s, 1e3 * r.p50_s, 1e3 * r.p99_s, r.auc,
           isnan(fp32_auc) ? 0.0 : r.auc - fp32_auc);
    if (!isnan(g_expect_auc)) {
      double limit = kind->value == SHARDREC_SERVING_INT8   ? g_max_drop_int8
                     : kind->value == SHARDREC_SERVING_INT4 ? g_max_drop_int4
                                                            : 0.0;
      if (kind->value == SHARDREC_SERVING_FP32 && r.auc != g_expect_auc) {
        fprintf(stderr, "serve: fp32 AUC %.17g differs from the training side's %.17g\n", r.auc,
                g_expect_auc);
        failed = 1;
      } else if (limit > 0 && g_expect_auc - r.auc > limit) {
        fprintf(stderr, "serve: %s loses %.6f AUC, more than the allowed %.6f\n", kind->name,
                g_expect_auc - r.auc, limit);
        failed = 1;
      }
    }
    serve_data_free(&data);
    serve_model_destroy(&model);
  }
  if (!isnan(g_expect_auc) && !failed) {
    printf(
        "fp32 AUC equals the training side's evaluation (%.17g); int8 within %.4f, int4 within "
        "%.4f\n",
        g_expect_auc, g_max_drop_int8, g_max_drop_int4);
  }
  if (failed) return 1;
  printf("done\n");
  return 0;
}
