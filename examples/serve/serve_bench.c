/*
 * @file serve_bench.c
 * @brief The serving example's load and measurements (serve_bench.h).
 */
#define _POSIX_C_SOURCE 200112L
#include "serve_bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlrm_data.h"
#include "dlrm_eval.h"

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int serve_data_make(serve_data_t* d, const serve_model_t* m, const int64_t* rows, uint64_t seed,
                    int samples, int batch) {
  const size_t n = (size_t)samples;
  dlrm_synth_t synth;
  int k;
  memset(d, 0, sizeof(*d));
  d->requests = samples / batch;
  d->batch = batch;
  d->num_dense = (int)m->num_dense;
  d->num_sparse = (int)m->num_sparse;
  d->dense = malloc(sizeof(float) * n * (size_t)d->num_dense);
  d->ids = malloc(sizeof(int64_t) * n * (size_t)d->num_sparse);
  d->labels = malloc(sizeof(float) * n);
  if (!d->dense || !d->ids || !d->labels) {
    serve_data_free(d);
    return -1;
  }
  synth.seed = seed;
  synth.num_dense = d->num_dense;
  synth.num_sparse = d->num_sparse;
  synth.rows = rows;
  for (k = 0; k < d->requests; ++k) {
    const size_t first = (size_t)k * (size_t)batch;
    dlrm_synth_fill(&synth, DLRM_HELD_OUT_FIRST + first, batch, d->dense + first * d->num_dense,
                    d->ids + first * d->num_sparse, d->labels + first);
  }
  return 0;
}

void serve_data_free(serve_data_t* d) {
  free(d->dense);
  free(d->ids);
  free(d->labels);
  memset(d, 0, sizeof(*d));
}

static shardrec_status_t score(const serve_model_t* m, serve_scratch_t* s, const serve_data_t* d,
                               int k, float* logits) {
  const size_t first = (size_t)k * (size_t)d->batch;
  return serve_model_score(m, s, d->dense + first * d->num_dense, d->ids + first * d->num_sparse,
                           d->batch, logits);
}

typedef struct worker {
  const serve_model_t* model;
  const serve_data_t* data;
  atomic_int* next; /* the next request slot of the timed rounds, shared */
  int total;        /* slots: rounds * requests */
  double* latency;  /* [total], each slot written by the thread that served it */
  int failed;
} worker_t;

static void* work(void* arg) {
  worker_t* w = (worker_t*)arg;
  serve_scratch_t s;
  float* logits = malloc(sizeof(float) * (size_t)w->data->batch);
  if (logits == NULL || serve_scratch_alloc(&s, w->model, w->data->batch) != 0) {
    free(logits);
    w->failed = 1;
    return NULL;
  }
  for (;;) {
    const int slot = atomic_fetch_add(w->next, 1);
    double t0;
    if (slot >= w->total) break;
    t0 = now_seconds();
    if (score(w->model, &s, w->data, slot % w->data->requests, logits) != SHARDREC_OK) {
      fprintf(stderr, "serve: request failed: %s\n", shardrec_last_error());
      w->failed = 1;
      break;
    }
    w->latency[slot] = now_seconds() - t0;
  }
  serve_scratch_free(&s);
  free(logits);
  return NULL;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int serve_run(const serve_model_t* m, const serve_data_t* d, int threads, int rounds,
              serve_result_t* out) {
  const int total = rounds * d->requests;
  const size_t n = (size_t)d->requests * (size_t)d->batch;
  float* logits = malloc(sizeof(float) * n);
  double* latency = calloc((size_t)total, sizeof(double));
  worker_t w[SERVE_MAX_THREADS];
  pthread_t tid[SERVE_MAX_THREADS];
  atomic_int next;
  serve_scratch_t s;
  double start;
  int k, t, failed = 0;
  if (logits == NULL || latency == NULL || serve_scratch_alloc(&s, m, d->batch) != 0) {
    free(logits);
    free(latency);
    return -1;
  }
  /* The quality pass, which also warms the caches and the page tables for the timed rounds. */
  for (k = 0; k < d->requests && !failed; ++k) {
    if (score(m, &s, d, k, logits + (size_t)k * d->batch) != SHARDREC_OK) {
      fprintf(stderr, "serve: request %d failed: %s\n", k, shardrec_last_error());
      failed = 1;
    }
  }
  serve_scratch_free(&s);
  if (!failed) out->auc = dlrm_auc(logits, d->labels, (int64_t)n);
  atomic_init(&next, 0);
  start = now_seconds();
  for (t = 0; t < threads && !failed; ++t) {
    w[t].model = m;
    w[t].data = d;
    w[t].next = &next;
    w[t].total = total;
    w[t].latency = latency;
    w[t].failed = 0;
    pthread_create(&tid[t], NULL, work, &w[t]);
  }
  for (t = 0; t < threads && !failed; ++t) {
    pthread_join(tid[t], NULL);
    failed |= w[t].failed;
  }
  if (!failed) {
    out->samples_per_s = (double)total * d->batch / (now_seconds() - start);
    qsort(latency, (size_t)total, sizeof(double), by_value);
    out->p50_s = latency[(total - 1) / 2];
    out->p99_s = latency[(int)((total - 1) * 0.99)];
  }
  free(logits);
  free(latency);
  return failed ? -1 : 0;
}
