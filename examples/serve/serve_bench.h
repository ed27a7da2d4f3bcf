/*
 * @file serve_bench.h
 * @brief The serving example's load: the DLRM example's held-out samples cut into requests,
 *        one scoring pass for the AUC, then timed rounds from N threads for throughput and
 *        per-request latency percentiles.
 */
#ifndef SERVE_BENCH_H_
#define SERVE_BENCH_H_

#include <stdint.h>

#include "serve_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SERVE_MAX_THREADS 64

/* The held-out samples as requests of `batch`: request k holds samples
   DLRM_HELD_OUT_FIRST + k * batch onwards, laid out as one DLRM batch. */
typedef struct serve_data {
  int requests, batch, num_dense, num_sparse;
  float* dense;  /* [requests][batch * num_dense] */
  int64_t* ids;  /* [requests][num_sparse * batch], feature-major within a request */
  float* labels; /* [requests * batch] */
} serve_data_t;

/* 0, or -1 out of memory (the data is then empty and safe to free). */
int serve_data_make(serve_data_t* data, const serve_model_t* model, const int64_t* rows,
                    uint64_t seed, int samples, int batch);
void serve_data_free(serve_data_t* data);

typedef struct serve_result {
  double auc;           /* of the logits of every held-out sample */
  double samples_per_s; /* over the timed rounds, all threads together */
  double p50_s, p99_s;  /* per-request latency over the timed rounds */
} serve_result_t;

/* Scores every request once on this thread (for the AUC), then runs `rounds` passes over them
   from `threads` threads at once. 0, or -1 with the failing call printed. */
int serve_run(const serve_model_t* model, const serve_data_t* data, int threads, int rounds,
              serve_result_t* out);

#ifdef __cplusplus
}
#endif

#endif /* SERVE_BENCH_H_ */
