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
 * The hidden teacher's click probability of samples [first, first + count) of the same stream:
 * the labels of dlrm_synth_fill are Bernoulli draws of these. Scoring held-out samples with it
 * gives the Bayes-optimal AUC and log loss, the ceiling a trained model approaches.
 */
void dlrm_synth_probability(const dlrm_synth_t* s, uint64_t first, int count, float* probs);

/*
 * Raw 64-bit ids for dynamic tables: replaces each id of ids [num_sparse, count] (the layout of
 * dlrm_synth_fill) by a 64-bit hash of (feature, id), as production pipelines hash raw
 * categorical values. The hash is a bijection for each feature, so the stream and its labels
 * carry the same information; the values cover the whole int64 range (negative ones too).
 */
void dlrm_raw_ids(int num_sparse, int count, int64_t* ids);

/*
 * A reader of Criteo's TSV format: "label \t I1..I13 \t C1..C26", exactly 40 tab-separated
 * fields per line: label 0 or 1; I an integer (may be empty or negative) that becomes
 * log(1 + max(x, 0)); C a hexadecimal string (Criteo's are 8 digits; may be empty) that becomes
 * (value mod rows[f]), or with rows NULL the value itself (up to 16 digits, as a two's
 * complement int64: raw ids for dynamic tables); an empty field is 0. A trailing carriage return is
 * ignored. One reader per thread; open fills every field, close releases them (safe after a failed
 * open).
 */
typedef struct dlrm_criteo {
  FILE* file;       /* owned */
  const char* path; /* borrowed, for messages */
  int64_t line;     /* lines consumed so far (the 1-based number of the last one read) */
  char* buf;        /* the current line */
  size_t cap;
  char error[256]; /* "path:line: what is wrong" after a failure */
} dlrm_criteo_t;

/* 0, or -1 with the reason in r->error. */
int dlrm_criteo_open(dlrm_criteo_t* r, const char* path);
void dlrm_criteo_close(dlrm_criteo_t* r);

/* Skips @p lines lines unparsed (the samples of other ranks); returns how many there were
   (fewer at end of file), -1 out of memory. */
int64_t dlrm_criteo_skip(dlrm_criteo_t* r, int64_t lines);

/*
 * Reads up to @p count lines into the layout of dlrm_synth_fill (dense [count, 13], ids
 * [26, count] feature-major with stride @p count, labels [count]); rows[26] are the table
 * sizes, or NULL for raw ids (not folded). Returns the number of samples read (< count only at end
 * of file), or -1 on a malformed line with r->error naming the file, the line number and the field.
 */
int dlrm_criteo_read(dlrm_criteo_t* r, int count, const int64_t* rows, float* dense, int64_t* ids,
                     float* labels);

/* Area under the ROC curve of scores against 0/1 labels (ties count one half). */
double dlrm_auc(const float* scores, const float* labels, int64_t n);
/* Mean binary cross-entropy of logits against 0/1 labels. */
double dlrm_logloss(const float* logits, const float* labels, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* DLRM_DATA_H_ */
