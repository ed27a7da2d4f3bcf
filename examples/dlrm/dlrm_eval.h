/*
 * @file dlrm_eval.h
 * @brief Held-out evaluation of the DLRM example: a fixed set of samples disjoint from the
 *        training stream, sharded across ranks, scored with the forward-only pass and summarised
 *        as AUC and log loss over the whole set (and, for synthetic data, the Bayes-optimal AUC
 *        and log loss of the generator's own click probabilities on the same samples).
 */
#ifndef DLRM_EVAL_H_
#define DLRM_EVAL_H_

#include <stdint.h>

#include "dlrm_data.h"
#include "dlrm_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * First index of the synthetic held-out range: training reads the stream from index 0 upwards
 * and would need 2^62 samples to reach it, so the two never overlap.
 */
#define DLRM_HELD_OUT_FIRST (UINT64_C(1) << 62)

/* One rank's slice of a held-out set: @p batches local batches of @p batch samples. */
typedef struct dlrm_eval_set {
  int batches, batch, num_dense, num_sparse;
  float* dense;  /* [batches][batch * num_dense] */
  int64_t* ids;  /* [batches][num_sparse * batch], feature-major within a batch */
  float* labels; /* [batches * batch] */
  float* probs;  /* the generator's click probabilities, or NULL (real data) */
} dlrm_eval_set_t;

/* Allocates a zeroed set (probs only when @p with_probs); 0, or -1 out of memory (the set is
   then empty and safe to free). */
int dlrm_eval_set_alloc(dlrm_eval_set_t* set, int batches, int batch, int num_dense, int num_sparse,
                        int with_probs);
void dlrm_eval_set_free(dlrm_eval_set_t* set);

/*
 * Fills this rank's slice of the synthetic held-out set [first, first + batches * batch *
 * world): batch k of rank r holds samples first + (k * world + r) * batch onwards. Fills probs
 * when the set has them.
 */
void dlrm_eval_set_synth(dlrm_eval_set_t* set, const dlrm_synth_t* synth, uint64_t first, int rank,
                         int world);

typedef struct dlrm_eval_result {
  int64_t samples;      /* over every rank */
  double auc, logloss;  /* of the model */
  double bayes_auc;     /* of the generator's probabilities; NaN without them */
  double bayes_logloss; /* likewise */
} dlrm_eval_result_t;

/*
 * Scores this rank's slice with dlrm_predict in the embedding collection's evaluation mode
 * (shardrec_embedding_set_training 0, restored to 1 after: no gradient, no optimizer step, no
 * row inserted or touched in dynamic tables; the model's parameters, optimizer state and table
 * statistics are left as they were), gathers every rank's scores over
 * @p world and summarises them. Collective over @p world: every rank passes a slice of the same
 * shape and receives the same result. The set's batch must be the model's local batch.
 */
shardrec_status_t dlrm_evaluate(dlrm_t* model, shardrec_comm_t* world, const dlrm_eval_set_t* set,
                                dlrm_eval_result_t* out);

#ifdef __cplusplus
}
#endif

#endif /* DLRM_EVAL_H_ */
