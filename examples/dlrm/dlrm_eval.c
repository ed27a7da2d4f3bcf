/*
 * @file dlrm_eval.c
 * @brief Held-out evaluation of the DLRM example (dlrm_eval.h).
 */
#include "dlrm_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dlrm_eval_set_alloc(dlrm_eval_set_t* set, int batches, int batch, int num_dense, int num_sparse,
                        int with_probs) {
  const size_t n = (size_t)batches * (size_t)batch;
  memset(set, 0, sizeof(*set));
  set->batches = batches;
  set->batch = batch;
  set->num_dense = num_dense;
  set->num_sparse = num_sparse;
  set->dense = calloc(n * (size_t)num_dense + 1, sizeof(float));
  set->ids = calloc(n * (size_t)num_sparse + 1, sizeof(int64_t));
  set->labels = calloc(n + 1, sizeof(float));
  if (with_probs) set->probs = calloc(n + 1, sizeof(float));
  if (!set->dense || !set->ids || !set->labels || (with_probs && !set->probs)) {
    dlrm_eval_set_free(set);
    return -1;
  }
  return 0;
}

void dlrm_eval_set_free(dlrm_eval_set_t* set) {
  free(set->dense);
  free(set->ids);
  free(set->labels);
  free(set->probs);
  memset(set, 0, sizeof(*set));
}

void dlrm_eval_set_synth(dlrm_eval_set_t* set, const dlrm_synth_t* synth, uint64_t first, int rank,
                         int world) {
  const size_t B = (size_t)set->batch;
  int k;
  for (k = 0; k < set->batches; ++k) {
    const uint64_t start = first + ((uint64_t)k * (uint64_t)world + (uint64_t)rank) * B;
    dlrm_synth_fill(synth, start, set->batch, set->dense + k * B * (size_t)set->num_dense,
                    set->ids + k * B * (size_t)set->num_sparse, set->labels + k * B);
    if (set->probs != NULL) dlrm_synth_probability(synth, start, set->batch, set->probs + k * B);
  }
}

/* Mean binary cross-entropy of probabilities (clamped away from 0 and 1) against labels. */
static double prob_logloss(const float* p, const float* y, int64_t n) {
  double sum = 0;
  int64_t i;
  for (i = 0; i < n; ++i) {
    const double q = fmin(fmax((double)p[i], 1e-12), 1.0 - 1e-12);
    sum -= y[i] > 0.5f ? log(q) : log1p(-q);
  }
  return n > 0 ? sum / (double)n : NAN;
}

shardrec_status_t dlrm_evaluate(dlrm_t* model, shardrec_comm_t* world, const dlrm_eval_set_t* set,
                                dlrm_eval_result_t* out) {
  const size_t n = (size_t)set->batches * (size_t)set->batch;
  const size_t B = (size_t)set->batch;
  /* This rank's [logits | labels | probs], then every rank's, then regrouped by kind. */
  float* mine = malloc(sizeof(float) * (3 * n + 1));
  float* all = NULL;
  float* by_kind = NULL;
  int32_t W = 1;
  shardrec_status_t rc = shardrec_comm_size(&W, world);
  int k, r;
  out->samples = 0;
  out->auc = out->logloss = out->bayes_auc = out->bayes_logloss = NAN;
  if (rc == SHARDREC_OK && mine != NULL) {
    all = malloc(sizeof(float) * (3 * n * (size_t)W + 1));
    by_kind = malloc(sizeof(float) * (3 * n * (size_t)W + 1));
  }
  if (rc == SHARDREC_OK && (mine == NULL || all == NULL || by_kind == NULL)) rc = SHARDREC_ENOMEM;
  /* Scored in evaluation mode: a dynamic table then reads held-out ids it has never seen as
     zeros instead of inserting them (and touches, counts and admits nothing), so evaluating
     leaves the tables as training left them. A collection that has no evaluation mode (a GPU
     one: fixed tables only, which a forward without backward does not change) is scored as is. */
  if (rc == SHARDREC_OK) {
    rc = shardrec_embedding_set_training(dlrm_embedding(model), 0);
    if (rc == SHARDREC_EUNSUPPORTED) rc = SHARDREC_OK;
  }
  for (k = 0; rc == SHARDREC_OK && k < set->batches; ++k) {
    rc = dlrm_predict(model, set->dense + k * B * (size_t)set->num_dense,
                      set->ids + k * B * (size_t)set->num_sparse, mine + k * B);
  }
  {
    const shardrec_status_t back = shardrec_embedding_set_training(dlrm_embedding(model), 1);
    if (rc == SHARDREC_OK && back != SHARDREC_EUNSUPPORTED) rc = back;
  }
  if (rc == SHARDREC_OK) {
    memcpy(mine + n, set->labels, sizeof(float) * n);
    if (set->probs != NULL) {
      memcpy(mine + 2 * n, set->probs, sizeof(float) * n);
    } else {
      memset(mine + 2 * n, 0, sizeof(float) * n);
    }
    rc = shardrec_comm_allgather(world, mine, all, 3 * n, SHARDREC_DTYPE_FLOAT32, NULL);
  }
  if (rc == SHARDREC_OK) {
    const size_t total = n * (size_t)W;
    for (r = 0; r < W; ++r) {
      for (k = 0; k < 3; ++k) {
        memcpy(by_kind + (size_t)k * total + (size_t)r * n, all + (size_t)r * 3 * n + (size_t)k * n,
               sizeof(float) * n);
      }
    }
    out->samples = (int64_t)total;
    out->auc = dlrm_auc(by_kind, by_kind + total, (int64_t)total);
    out->logloss = dlrm_logloss(by_kind, by_kind + total, (int64_t)total);
    if (set->probs != NULL) {
      out->bayes_auc = dlrm_auc(by_kind + 2 * total, by_kind + total, (int64_t)total);
      out->bayes_logloss = prob_logloss(by_kind + 2 * total, by_kind + total, (int64_t)total);
    }
  }
  free(mine);
  free(all);
  free(by_kind);
  return rc;
}
