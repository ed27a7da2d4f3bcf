/*
 * @file dlrm_data.c
 * @brief Synthetic and Criteo data and the metrics of the DLRM example (dlrm_data.h).
 */
#include "dlrm_data.h"

#include <errno.h>
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

/* Sample idx of the stream: writes its dense values (stride 1) and ids (stride id_stride) when
   the pointers are not NULL, and returns the hidden teacher's logit: a logistic model over the
   dense values and one hidden value per id. */
static double draw(const dlrm_synth_t* s, uint64_t idx, float* dense, int64_t* ids,
                   size_t id_stride) {
  double z = -1.0;
  int j, f;
  for (j = 0; j < s->num_dense; ++j) {
    const double raw = floor(exp(4.0 * uniform(s->seed, idx, (uint64_t)j))) - 1.0;
    const float v = (float)log1p(raw);
    const double a = (uniform(s->seed ^ 0x5151, 7, (uint64_t)j) - 0.5) * 0.6;
    if (dense != NULL) dense[j] = v;
    z += a * (v - 1.5);
  }
  for (f = 0; f < s->num_sparse; ++f) {
    const double u = uniform(s->seed, idx, 1000u + (uint64_t)f);
    int64_t id = (int64_t)((double)s->rows[f] * u * u * u * u);
    if (id >= s->rows[f]) id = s->rows[f] - 1;
    if (ids != NULL) ids[(size_t)f * id_stride] = id;
    z += (uniform(s->seed ^ 0xA5A5, (uint64_t)f, (uint64_t)id) - 0.5) * 0.9;
  }
  return z;
}

void dlrm_synth_fill(const dlrm_synth_t* s, uint64_t first, int count, float* dense, int64_t* ids,
                     float* labels) {
  int i;
  for (i = 0; i < count; ++i) {
    const uint64_t idx = first + (uint64_t)i;
    const double z = draw(s, idx, dense + (size_t)i * (size_t)s->num_dense, ids + i, (size_t)count);
    labels[i] = uniform(s->seed, idx, 99999u) < 1.0 / (1.0 + exp(-z)) ? 1.0f : 0.0f;
  }
}

void dlrm_raw_ids(int num_sparse, int count, int64_t* ids) {
  const size_t n = (size_t)num_sparse * (size_t)count;
  size_t k;
  /* mix is a bijection of uint64; the feature in the top bits keys it per feature. */
  for (k = 0; k < n; ++k) {
    const uint64_t f = (uint64_t)(k / (size_t)count);
    ids[k] = (int64_t)mix((uint64_t)ids[k] ^ (f << 56));
  }
}

void dlrm_synth_probability(const dlrm_synth_t* s, uint64_t first, int count, float* probs) {
  int i;
  for (i = 0; i < count; ++i) {
    probs[i] = (float)(1.0 / (1.0 + exp(-draw(s, first + (uint64_t)i, NULL, NULL, 0))));
  }
}

/* Reads one line of r->file into r->buf (grown as needed, without its newline or a trailing
   carriage return): 1, 0 at end of file, -1 out of memory. */
static int read_line(dlrm_criteo_t* r) {
  size_t n = 0;
  int c;
  while ((c = fgetc(r->file)) != EOF) {
    if (n + 1 >= r->cap) {
      const size_t grown = r->cap ? r->cap * 2 : 1024;
      char* p = realloc(r->buf, grown);
      if (p == NULL) {
        snprintf(r->error, sizeof(r->error), "%s:%lld: out of memory", r->path,
                 (long long)r->line + 1);
        return -1;
      }
      r->buf = p;
      r->cap = grown;
    }
    if (c == '\n') break;
    r->buf[n++] = (char)c;
  }
  if (n == 0 && c == EOF) return 0;
  if (n > 0 && r->buf[n - 1] == '\r') --n;
  r->buf[n] = '\0';
  r->line += 1;
  return 1;
}

int dlrm_criteo_open(dlrm_criteo_t* r, const char* path) {
  memset(r, 0, sizeof(*r));
  r->path = path;
  r->file = fopen(path, "r");
  if (r->file == NULL) {
    snprintf(r->error, sizeof(r->error), "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

void dlrm_criteo_close(dlrm_criteo_t* r) {
  if (r->file != NULL) fclose(r->file);
  free(r->buf);
  r->file = NULL;
  r->buf = NULL;
  r->cap = 0;
}

int64_t dlrm_criteo_skip(dlrm_criteo_t* r, int64_t lines) {
  int64_t i;
  for (i = 0; i < lines; ++i) {
    const int rc = read_line(r);
    if (rc < 0) return -1;
    if (rc == 0) break;
  }
  return i;
}

/* Parses the whole of a field as a number in @p base; 0 for an empty field. Returns 0, -1 when
 * the field is not a number in that base, -2 when it is one beyond 64 bits. */
static int parse_field(const char* p, int base, int is_signed, double* value,
                       unsigned long long* bits) {
  char* end = NULL;
  if (*p == '\0') {
    *value = 0.0;
    *bits = 0;
    return 0;
  }
  errno = 0;
  if (is_signed) {
    *value = (double)strtoll(p, &end, base);
  } else {
    if (*p == '-' || *p == '+') return -1;
    *bits = strtoull(p, &end, base);
  }
  if (end == p || *end != '\0') return -1;
  return errno == ERANGE ? -2 : errno != 0 ? -1 : 0;
}

/* Parses r->buf into sample i of a block of @p count samples. */
static int parse_line(dlrm_criteo_t* r, int i, int count, const int64_t* rows, float* dense,
                      int64_t* ids, float* labels) {
  char* p = r->buf;
  int field;
  for (field = 0; field < 40; ++field) {
    char* end = strchr(p, '\t');
    double x = 0.0;
    unsigned long long h = 0;
    if ((end == NULL) != (field == 39)) {
      int fields = field + 1;
      for (; end != NULL; end = strchr(end + 1, '\t')) ++fields;
      snprintf(r->error, sizeof(r->error),
               "%s:%lld: %d tab-separated field(s); 40 are expected (label, I1..I13, C1..C26)",
               r->path, (long long)r->line, fields);
      return -1;
    }
    if (end != NULL) *end = '\0';
    if (field == 0) {
      if (strcmp(p, "0") != 0 && strcmp(p, "1") != 0) {
        snprintf(r->error, sizeof(r->error), "%s:%lld: label '%.32s' is not 0 or 1", r->path,
                 (long long)r->line, p);
        return -1;
      }
      labels[i] = p[0] == '1' ? 1.0f : 0.0f;
    } else if (field <= 13) {
      const int bad = parse_field(p, 10, 1, &x, &h);
      if (bad != 0) {
        snprintf(r->error, sizeof(r->error), "%s:%lld: I%d '%.32s' is %s", r->path,
                 (long long)r->line, field, p,
                 bad == -2 ? "beyond a 64-bit integer" : "not an integer");
        return -1;
      }
      dense[(size_t)i * 13 + (size_t)(field - 1)] = (float)log1p(x > 0.0 ? x : 0.0);
    } else {
      const int sparse = field - 14;
      const int bad = parse_field(p, 16, 0, &x, &h);
      if (bad != 0) {
        snprintf(r->error, sizeof(r->error), "%s:%lld: C%d '%.32s' is %s", r->path,
                 (long long)r->line, sparse + 1, p,
                 bad == -2 ? "hexadecimal beyond 64 bits" : "not hexadecimal");
        return -1;
      }
      ids[(size_t)sparse * (size_t)count + (size_t)i] =
          rows == NULL ? (int64_t)h : (int64_t)(h % (unsigned long long)rows[sparse]);
    }
    if (end != NULL) p = end + 1;
  }
  return 0;
}

int dlrm_criteo_read(dlrm_criteo_t* r, int count, const int64_t* rows, float* dense, int64_t* ids,
                     float* labels) {
  int i;
  for (i = 0; i < count; ++i) {
    const int rc = read_line(r);
    if (rc < 0) return -1;
    if (rc == 0) break;
    if (parse_line(r, i, count, rows, dense, ids, labels) != 0) return -1;
  }
  return i;
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
