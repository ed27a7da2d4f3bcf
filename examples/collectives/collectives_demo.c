/* collectives_demo: N ranks as threads of this process (a local group, through shared memory)
 * measure all-reduce, all-gather and broadcast from 4 KiB up to --max-bytes and print the
 * algorithm and bus bandwidth of each, plus the barrier latency.
 *
 *   collectives_demo [--ranks N] [--max-bytes B] [--iters K]
 *
 * Bus bandwidth follows the usual convention: all-reduce moves 2(n-1)/n of the buffer per rank,
 * all-gather (n-1)/n of the gathered buffer, broadcast the whole buffer. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardrec/comm.h"

enum { kAllReduce, kAllGather, kBroadcast, kNumOps };
static const char* const kOpNames[kNumOps] = {"allreduce", "allgather", "broadcast"};

typedef struct {
  shardrec_comm_t* comm;
  int rank;
  int ranks;
  size_t max_bytes;
  int iters; /* 0: chosen per size */
  int failed;
  char error[512];
} rank_ctx_t;

/* Results written by rank 0 only: seconds per iteration for [op][size index]. */
#define MAX_SIZES 32
static double g_seconds[kNumOps][MAX_SIZES];
static double g_barrier_us;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int iterations_for(size_t bytes, int fixed) {
  if (fixed > 0) return fixed;
  if (bytes <= (1u << 20)) return 20;
  if (bytes <= (16u << 20)) return 5;
  return 2;
}

static shardrec_status_t run_op(rank_ctx_t* c, int op, float* a, float* b, size_t bytes) {
  const size_t count = bytes / sizeof(float);
  switch (op) {
    case kAllReduce:
      return shardrec_comm_allreduce(c->comm, a, a, count, SHARDREC_DTYPE_FLOAT32,
                                     SHARDREC_REDUCE_SUM, NULL);
    case kAllGather: /* `bytes` is the gathered size: each rank contributes bytes / ranks */
      return shardrec_comm_allgather(c->comm, a, b, count / (size_t)c->ranks,
                                     SHARDREC_DTYPE_FLOAT32, NULL);
    default:
      return shardrec_comm_broadcast(c->comm, a, count, SHARDREC_DTYPE_FLOAT32, 0, NULL);
  }
}

static void* rank_main(void* arg) {
  rank_ctx_t* c = (rank_ctx_t*)arg;
  float* a = (float*)calloc(c->max_bytes / sizeof(float) + 1, sizeof(float));
  float* b = (float*)calloc(c->max_bytes / sizeof(float) + 1, sizeof(float));
  if (a == NULL || b == NULL) {
    snprintf(c->error, sizeof(c->error), "out of memory");
    c->failed = 1;
    free(a);
    free(b);
    return NULL;
  }
  for (int op = 0; op < kNumOps && !c->failed; ++op) {
    int s = 0;
    for (size_t bytes = 4096; bytes <= c->max_bytes && s < MAX_SIZES; bytes *= 4, ++s) {
      const int iters = iterations_for(bytes, c->iters);
      shardrec_status_t rc = run_op(c, op, a, b, bytes); /* warm-up */
      if (rc == SHARDREC_OK) rc = shardrec_comm_barrier(c->comm);
      const double start = now_seconds();
      for (int i = 0; i < iters && rc == SHARDREC_OK; ++i) rc = run_op(c, op, a, b, bytes);
      if (rc == SHARDREC_OK) rc = shardrec_comm_barrier(c->comm);
      if (rc != SHARDREC_OK) {
        snprintf(c->error, sizeof(c->error), "%s at %zu bytes: %s: %s", kOpNames[op], bytes,
                 shardrec_status_string(rc), shardrec_last_error());
        c->failed = 1;
        break;
      }
      if (c->rank == 0) g_seconds[op][s] = (now_seconds() - start) / iters;
    }
  }
  if (!c->failed) {
    const int iters = 50;
    const double start = now_seconds();
    for (int i = 0; i < iters && !c->failed; ++i) {
      if (shardrec_comm_barrier(c->comm) != SHARDREC_OK) {
        snprintf(c->error, sizeof(c->error), "barrier: %s", shardrec_last_error());
        c->failed = 1;
      }
    }
    if (c->rank == 0) g_barrier_us = (now_seconds() - start) / iters * 1e6;
  }
  free(a);
  free(b);
  return NULL;
}

static double bus_factor(int op, int n) {
  if (op == kAllReduce) return 2.0 * (n - 1) / n;
  if (op == kAllGather) return (double)(n - 1) / n;
  return 1.0;
}

int main(int argc, char** argv) {
  int ranks = 4, iters = 0;
  size_t max_bytes = (size_t)64 << 20;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      ranks = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc) {
      max_bytes = (size_t)strtoull(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--ranks N] [--max-bytes B] [--iters K]\n", argv[0]);
      return 2;
    }
  }
  if (ranks < 1 || ranks > 64 || max_bytes < 4096) {
    fprintf(stderr, "collectives_demo: need 1 <= ranks <= 64 and max-bytes >= 4096\n");
    return 2;
  }

  shardrec_comm_t* comms[64];
  shardrec_comm_options_t opts = SHARDREC_COMM_OPTIONS_INIT;
  opts.timeout_ms = 60000;
  if (shardrec_comm_create_local_group(comms, ranks, &opts) != SHARDREC_OK) {
    fprintf(stderr, "collectives_demo: cannot create the group: %s\n", shardrec_last_error());
    return 1;
  }
  rank_ctx_t ctx[64];
  pthread_t threads[64];
  for (int r = 0; r < ranks; ++r) {
    memset(&ctx[r], 0, sizeof(ctx[r]));
    ctx[r].comm = comms[r];
    ctx[r].rank = r;
    ctx[r].ranks = ranks;
    ctx[r].max_bytes = max_bytes;
    ctx[r].iters = iters;
    pthread_create(&threads[r], NULL, rank_main, &ctx[r]);
  }
  int failed = 0;
  for (int r = 0; r < ranks; ++r) {
    pthread_join(threads[r], NULL);
    if (ctx[r].failed) {
      fprintf(stderr, "collectives_demo: rank %d failed: %s\n", r, ctx[r].error);
      failed = 1;
    }
  }
  for (int r = ranks - 1; r >= 0; --r) shardrec_comm_destroy(comms[r]);
  if (failed) return 1;

  printf("collectives_demo: %d ranks as threads, shared memory, libshardrec %s\n", ranks,
         shardrec_version_string());
  printf("%-10s %12s %12s %12s %12s\n", "collective", "bytes", "time_us", "algbw_GB/s",
         "busbw_GB/s");
  for (int op = 0; op < kNumOps; ++op) {
    int s = 0;
    for (size_t bytes = 4096; bytes <= max_bytes && s < MAX_SIZES; bytes *= 4, ++s) {
      const double t = g_seconds[op][s];
      const double algbw = t > 0 ? (double)bytes / t / 1e9 : 0.0;
      printf("%-10s %12zu %12.1f %12.3f %12.3f\n", kOpNames[op], bytes, t * 1e6, algbw,
             algbw * bus_factor(op, ranks));
    }
  }
  printf("%-10s %12s %12.1f\n", "barrier", "-", g_barrier_us);
  return 0;
}
