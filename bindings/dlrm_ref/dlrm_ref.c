/*
 * @file dlrm_ref.c
 * @brief The C side of the bindings' DLRM check: trains the small DLRM of
 *        examples/dlrm/dlrm_model.c (bottom MLP, sharded embedding collection, dot interaction,
 *        top MLP, BCE, Adam, gradient bucketer) at world 2 (ranks as threads) on the
 *        deterministic batches the Java, Go and Rust tests generate, and writes every rank's
 *        loss per step and rank 0's final dense parameters (as float bits) to a file those
 *        tests compare with, bit for bit.
 *
 * The shapes, the batch formulas and the file format are the contract with
 * bindings/java/src/test/java/org/shardrec/DlrmTest.java, bindings/go/dlrm_test.go and
 * bindings/rust/shardrec/tests/dlrm.rs; change them together.
 *
 * Usage: dlrm_ref <output file>
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrm_model.h"

#define WORLD 2
#define STEPS 4
#define BATCH 8
#define NUM_DENSE 4
#define NUM_SPARSE 3
#define EMB_DIM 4

static const int64_t kRows[NUM_SPARSE] = {40, 30, 20};
static const int64_t kBottom[] = {8, EMB_DIM};
static const int64_t kTop[] = {8, 1};

typedef struct rank_ctx {
  shardrec_comm_t* comm;
  int interaction; /* DLRM_INTERACTION_DOT or DLRM_INTERACTION_DCN */
  int rank;
  double losses[STEPS];
  shardrec_status_t status;
  char message[512];
  FILE* out; /* rank 0 writes its dense tensors here */
} rank_ctx_t;

/* The batch of (step, rank): global sample g = rank * BATCH + b. */
static void make_batch(int step, int rank, float* dense, int64_t* ids, float* labels) {
  int b, j, f;
  for (b = 0; b < BATCH; ++b) {
    const int g = rank * BATCH + b;
    for (j = 0; j < NUM_DENSE; ++j) {
      dense[b * NUM_DENSE + j] = (float)((step * 7 + g * 5 + j * 3) % 17) / 8.0f - 1.0f;
    }
    for (f = 0; f < NUM_SPARSE; ++f) ids[f * BATCH + b] = (step * 13 + g * 11 + f * 7) % kRows[f];
    labels[b] = (step * 3 + g * 5) % 3 == 0 ? 1.0f : 0.0f;
  }
}

static void fail(rank_ctx_t* ctx, shardrec_status_t rc) {
  ctx->status = rc;
  snprintf(ctx->message, sizeof(ctx->message), "%s", shardrec_last_error());
}

static void* run_rank(void* arg) {
  rank_ctx_t* ctx = (rank_ctx_t*)arg;
  dlrm_config_t c;
  dlrm_t* model = NULL;
  float dense[BATCH * NUM_DENSE], labels[BATCH];
  int64_t ids[NUM_SPARSE * BATCH];
  shardrec_status_t rc;
  int step;
  size_t i;
  dlrm_config_defaults(&c);
  c.num_dense = NUM_DENSE;
  c.num_sparse = NUM_SPARSE;
  c.rows = kRows;
  c.emb_dim = EMB_DIM;
  c.bottom = kBottom;
  c.num_bottom = 2;
  c.top = kTop;
  c.num_top = 2;
  c.dense_optimizer.learning_rate = 0.01f; /* Adam */
  c.shard_size = WORLD;
  c.local_batch = BATCH;
  c.seed = 7;
  c.interaction = ctx->interaction;
  c.dcn_layers = 2;
  c.dcn_rank = 4;
  c.first_bucket_bytes = 256;
  c.bucket_cap_bytes = 512;
  rc = dlrm_create(&model, &c, ctx->comm);
  if (rc != SHARDREC_OK) {
    fail(ctx, rc);
    return NULL;
  }
  for (step = 0; step < STEPS; ++step) {
    make_batch(step, ctx->rank, dense, ids, labels);
    rc = dlrm_train_step(model, dense, ids, labels, &ctx->losses[step], NULL);
    if (rc != SHARDREC_OK) {
      fail(ctx, rc);
      dlrm_destroy(model);
      return NULL;
    }
  }
  if (ctx->out != NULL) {
    for (i = 0; i < dlrm_num_dense_tensors(model); ++i) {
      shardrec_dense_param_t t;
      int64_t k;
      rc = dlrm_dense_tensor(model, i, &t);
      if (rc != SHARDREC_OK) {
        fail(ctx, rc);
        break;
      }
      fprintf(ctx->out, "tensor %s %lld", t.name, (long long)t.count);
      for (k = 0; k < t.count; ++k) {
        uint32_t bits;
        memcpy(&bits, &t.param[k], sizeof(bits));
        fprintf(ctx->out, " %08x", (unsigned)bits);
      }
      fprintf(ctx->out, "\n");
    }
  }
  dlrm_destroy(model);
  return NULL;
}

/* Trains one variant at world 2 and appends its section to @p out. */
static int run_variant(shardrec_comm_t** comms, int interaction, FILE* out) {
  rank_ctx_t ctx[WORLD];
  pthread_t threads[WORLD];
  int r, step, ok = 1;
  memset(ctx, 0, sizeof(ctx));
  for (r = 0; r < WORLD; ++r) {
    ctx[r].comm = comms[r];
    ctx[r].interaction = interaction;
    ctx[r].rank = r;
    ctx[r].status = SHARDREC_OK;
  }
  /* Rank 0's tensors are written after the losses: collect them in a temporary file first. */
  ctx[0].out = tmpfile();
  if (ctx[0].out == NULL) {
    perror("tmpfile");
    return 0;
  }
  for (r = 0; r < WORLD; ++r) pthread_create(&threads[r], NULL, run_rank, &ctx[r]);
  for (r = 0; r < WORLD; ++r) pthread_join(threads[r], NULL);
  for (r = 0; r < WORLD; ++r) {
    if (ctx[r].status != SHARDREC_OK) {
      fprintf(stderr, "dlrm_ref: rank %d: %s (%s)\n", r, shardrec_status_string(ctx[r].status),
              ctx[r].message);
      ok = 0;
    }
  }
  fprintf(out, "variant %s\n", interaction == DLRM_INTERACTION_DOT ? "dot" : "dcn");
  for (step = 0; step < STEPS && ok; ++step) {
    for (r = 0; r < WORLD; ++r) fprintf(out, "loss %d %d %.17g\n", step, r, ctx[r].losses[step]);
  }
  if (ok) {
    char buf[4096];
    size_t n;
    rewind(ctx[0].out);
    while ((n = fread(buf, 1, sizeof(buf), ctx[0].out)) > 0) fwrite(buf, 1, n, out);
    printf("dlrm_ref: %s losses at step %d: %.6f %.6f\n",
           interaction == DLRM_INTERACTION_DOT ? "dot" : "dcn", STEPS - 1, ctx[0].losses[STEPS - 1],
           ctx[1].losses[STEPS - 1]);
  }
  fclose(ctx[0].out);
  return ok;
}

int main(int argc, char** argv) {
  shardrec_comm_t* comms[WORLD];
  FILE* out;
  int r, ok;
  if (argc != 2) {
    fprintf(stderr, "usage: dlrm_ref <output file>\n");
    return 2;
  }
  /* Process-wide, and what the binding tests set: sgemm results then do not depend on the
     core count. */
  if (shardrec_dense_set_blas_threads(1) != SHARDREC_OK ||
      shardrec_comm_create_local_group(comms, WORLD, NULL) != SHARDREC_OK) {
    fprintf(stderr, "dlrm_ref: %s\n", shardrec_last_error());
    return 1;
  }
  out = fopen(argv[1], "w");
  if (out == NULL) {
    perror(argv[1]);
    return 1;
  }
  fprintf(out, "world %d\nsteps %d\n", WORLD, STEPS);
  ok = run_variant(comms, DLRM_INTERACTION_DOT, out) &&
       run_variant(comms, DLRM_INTERACTION_DCN, out);
  for (r = 0; r < WORLD; ++r) shardrec_comm_destroy(comms[r]);
  if (fclose(out) != 0 || !ok) return 1;
  printf("dlrm_ref: wrote %s\n", argv[1]);
  return 0;
}
