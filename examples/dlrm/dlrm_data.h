/*
 * @file dlrm_data.h
 * @brief Data for the DLRM example: a synthetic Criteo-shaped generator (13 dense, 26 sparse
 *        features, labels from a hidden logistic teacher so there is something to learn), a
 *        reader of Criteo's TSV format, and the metrics (AUC, log loss).
 */
#ifndef DLRM_DATA_H_
#define DLRM_DATA_H_

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Criteo 1TB / Kaggle cardinalities of the 26 categorical features (capped by the caller). */
extern const int64_t kCriteoRows[26];

typedef struct dlrm_synth {
  uint64_t seed;
  int num_dense, num_sparse;
  const int64_t* rows; /* num_sparse */
} dlrm_synth_t;

/*
 * Samples [first, first + count) of the synthetic stream: a pure function of (seed, index), so
 * any rank can produce any slice of a global batch. dense [count, num_dense] (log(1 + x) of
 * heavy-tailed counts, as Criteo preprocessing does), ids [num_sparse, count] feature-major
 * (power-law skewed ids), labels [count].
 */
void dlrm_synth_fill(const dlrm_synth_t* s, uint64_t first, int count, float* dense, int64_t* ids,
                     float* labels);

/*
 * Criteo TSV: "label \t I1..I13 \t C1..C26" with integers for I (may be empty or negative) and
 * 8-hex-digit strings for C (may be empty). Dense values become log(1 + max(x, 0)); a
 * categorical value becomes (hex value mod rows[f]); empty fields are 0.
 * Reads @p count lines into the same layout as dlrm_synth_fill, skipping @p skip lines first
 * (the samples of lower ranks). Returns the number of samples read (< count at end of file) or
 * -1 on a malformed line (message on stderr).
 */
int dlrm_criteo_read(FILE* f, int skip, int count, const int64_t* rows, float* dense, int64_t* ids,
                     float* labels);

/* Area under the ROC curve of scores against 0/1 labels (ties count one half). */
double dlrm_auc(const float* scores, const float* labels, int64_t n);
/* Mean binary cross-entropy of logits against 0/1 labels. */
double dlrm_logloss(const float* logits, const float* labels, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* DLRM_DATA_H_ */
