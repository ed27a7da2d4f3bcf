/*
 * @file dlrm_data.c
 * @brief Synthetic and Criteo data and the metrics of the DLRM example (dlrm_data.h).
 */
#include "dlrm_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const int64_t kCriteoRows[26] = {1460,  583,  10131227, 2202608, 305, 24,     12517,   633,   3,
                                 93145, 5683, 8351593,  3194,    27,  14992,  5461306, 10,    5652,
                                 2173,  4,    7046547,  18,      15,  286181, 105,     142572};

/* A counter-based generator (splitmix64's finaliser): u(key) is a pure function of the key. */
static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/* Uniform in (0, 1). */
static double uniform(uint64_t seed, uint64_t a, uint64_t b) {
  const uint64_t h = mix(mix(mix(seed) ^ a) ^ (b * 0xD6E8FEB86659FD93ULL));
  return ((double)(h >> 11) + 0.5) / 9007199254740992.0;
}

void dlrm_synth_fill(const dlrm_synth_t* s, uint64_t first, int count, float* dense, int64_t* ids,
                     float* labels) {
  int i, j, f;
  for (i = 0; i < count; ++i) {
    const uint64_t idx = first + (uint64_t)i;
    /* The teacher: a logistic model over the dense values and one hidden value per id. */
    double z = -1.0;
    for (j = 0; j < s->num_dense; ++j) {
      const double raw = floor(exp(4.0 * uniform(s->seed, idx, (uint64_t)j))) - 1.0;
      const float v = (float)log1p(raw);
      const double a = (uniform(s->seed ^ 0x5151, 7, (uint64_t)j) - 0.5) * 0.6;
      dense[(size_t)i * (size_t)s->num_dense + (size_t)j] = v;
      z += a * (v - 1.5);
    }
    for (f = 0; f < s->num_sparse; ++f) {
      const double u = uniform(s->seed, idx, 1000u + (uint64_t)f);
      int64_t id = (int64_t)((double)s->rows[f] * u * u * u * u);
      if (id >= s->rows[f]) id = s->rows[f] - 1;
      ids[(size_t)f * (size_t)count + (size_t)i] = id;
      z += (uniform(s->seed ^ 0xA5A5, (uint64_t)f, (uint64_t)id) - 0.5) * 0.9;
    }
    labels[i] = uniform(s->seed, idx, 99999u) < 1.0 / (1.0 + exp(-z)) ? 1.0f : 0.0f;
  }
}

/* Reads one line into buf (grown as needed); 0 at end of file. */
static int read_line(FILE* f, char** buf, size_t* cap) {
  size_t n = 0;
  int c;
  while ((c = fgetc(f)) != EOF) {
    if (n + 1 >= *cap) {
      size_t grown = *cap ? *cap * 2 : 1024;
      char* p = realloc(*buf, grown);
      if (p == NULL) return -1;
      *buf = p;
      *cap = grown;
    }
    if (c == '\n') break;
    (*buf)[n++] = (char)c;
  }
  if (n == 0 && c == EOF) return 0;
  (*buf)[n] = '\0';
  return 1;
}

int dlrm_criteo_read(FILE* f, int skip, int count, const int64_t* rows, float* dense, int64_t* ids,
                     float* labels) {
  char* line = NULL;
  size_t cap = 0;
  int i, got = 0;
  for (i = 0; i < skip; ++i) {
    if (read_line(f, &line, &cap) <= 0) {
      free(line);
      return 0;
    }
  }
  for (i = 0; i < count; ++i) {
    char* p;
    int field;
    const int rc = read_line(f, &line, &cap);
    if (rc < 0) {
      free(line);
      return -1;
    }
    if (rc == 0) break;
    p = line;
    for (field = 0; field < 40; ++field) {
      char* end = strchr(p, '\t');
      if (end == NULL && field < 39) {
        fprintf(stderr, "criteo: line %d has %d fields; 40 are expected\n", i + skip + 1,
                field + 1);
        free(line);
        return -1;
      }
      if (end != NULL) *end = '\0';
      if (field == 0) {
        if (strcmp(p, "0") != 0 && strcmp(p, "1") != 0) {
          fprintf(stderr, "criteo: line %d: label '%s' is not 0 or 1\n", i + skip + 1, p);
          free(line);
          return -1;
        }
        labels[i] = p[0] == '1' ? 1.0f : 0.0f;
      } else if (field <= 13) {
        const double x = *p ? strtod(p, NULL) : 0.0;
        dense[(size_t)i * 13 + (size_t)(field - 1)] = (float)log1p(x > 0.0 ? x : 0.0);
      } else {
        const int sparse = field - 14;
        const unsigned long long h = *p ? strtoull(p, NULL, 16) : 0ULL;
        ids[(size_t)sparse * (size_t)count + (size_t)i] =
            (int64_t)(h % (unsigned long long)rows[sparse]);
      }
      if (end != NULL) p = end + 1;
    }
    ++got;
  }
  free(line);
  return got;
}

typedef struct scored {
  float score;
  float label;
} scored_t;

static int by_score(const void* a, const void* b) {
  const float x = ((const scored_t*)a)->score, y = ((const scored_t*)b)->score;
  return (x > y) - (x < y);
}

double dlrm_auc(const float* scores, const float* labels, int64_t n) {
  scored_t* v = malloc(sizeof(scored_t) * (size_t)(n > 0 ? n : 1));
  double pos = 0, neg = 0, rank_sum = 0;
  int64_t i = 0;
  if (v == NULL) return NAN;
  for (i = 0; i < n; ++i) {
    v[i].score = scores[i];
    v[i].label = labels[i];
  }
  qsort(v, (size_t)n, sizeof(scored_t), by_score);
  /* Mann-Whitney: the sum of the positives' ranks, ties sharing their mean rank. */
  i = 0;
  while (i < n) {
    int64_t j = i, k;
    double p = 0;
    while (j < n && v[j].score == v[i].score) ++j;
    for (k = i; k < j; ++k) p += v[k].label;
    rank_sum += p * (double)(i + j + 1) / 2.0;
    pos += p;
    neg += (double)(j - i) - p;
    i = j;
  }
  free(v);
  if (pos == 0 || neg == 0) return NAN;
  return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg);
}

double dlrm_logloss(const float* logits, const float* labels, int64_t n) {
  double sum = 0;
  int64_t i;
  for (i = 0; i < n; ++i) {
    const double z = logits[i];
    sum += (z > 0 ? z : 0) - z * labels[i] + log1p(exp(-fabs(z)));
  }
  return n > 0 ? sum / (double)n : NAN;
}
