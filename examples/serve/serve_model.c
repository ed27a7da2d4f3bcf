/*
 * @file serve_model.c
 * @brief The DLRM rebuilt for serving (serve_model.h).
 */
#include "serve_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 64

static int fail(const char* what) {
  fprintf(stderr, "serve: %s: %s\n", what, shardrec_last_error());
  return -1;
}

/* The dense tensor @p name of the pinned snapshot; 1 found, 0 absent, -1 error. */
static int tensor(const serve_model_t* m, const char* name, const float** data, size_t* count) {
  const shardrec_status_t rc = shardrec_inference_snapshot_dense_tensor(m->pin, name, data, count);
  if (rc == SHARDREC_ENOTFOUND) return 0;
  return rc == SHARDREC_OK ? 1 : fail(name);
}

/* Widths of the MLP "<prefix>.<l>.weight/bias": its input width and each layer's output width,
   read back from the saved counts (bias = out, weight = out x in). Returns the layer count. */
static int mlp_shape(const serve_model_t* m, const char* prefix, int64_t* in, int64_t* outs) {
  int l;
  for (l = 0; l < MAX_LAYERS; ++l) {
    char name[64];
    const float* data;
    size_t wn = 0, bn = 0;
    int found;
    snprintf(name, sizeof(name), "%s.%d.bias", prefix, l);
    found = tensor(m, name, &data, &bn);
    if (found <= 0) return found < 0 ? -1 : l;
    snprintf(name, sizeof(name), "%s.%d.weight", prefix, l);
    if (tensor(m, name, &data, &wn) != 1 || bn == 0 || wn % bn != 0) {
      fprintf(stderr, "serve: %s has no matching weight\n", name);
      return -1;
    }
    if (l == 0) *in = (int64_t)(wn / bn);
    outs[l] = (int64_t)bn;
  }
  return l;
}

/* Points every parameter of a dense block at the snapshot's tensor of the same name: the MLP
   then computes with the saved values and holds no copy of them. */
typedef shardrec_status_t (*tensor_fn)(const void*, size_t, shardrec_dense_param_t*);
typedef shardrec_status_t (*bind_fn)(void*, size_t, float*, float*);

static int bind_all(const serve_model_t* m, void* block, size_t n, tensor_fn describe,
                    bind_fn bind) {
  size_t i;
  for (i = 0; i < n; ++i) {
    shardrec_dense_param_t t;
    const float* data;
    size_t count = 0;
    if (describe(block, i, &t) != SHARDREC_OK) return fail("dense tensor");
    if (tensor(m, t.name, &data, &count) != 1 || (int64_t)count != t.count) {
      fprintf(stderr, "serve: dense tensor %s missing or of the wrong size\n", t.name);
      return -1;
    }
    /* The MLP only reads parameters in shardrec_mlp_infer, so read-only memory is fine. */
    if (bind(block, i, (float*)(uintptr_t)data, NULL) != SHARDREC_OK) return fail(t.name);
  }
  return 0;
}

static shardrec_status_t mlp_tensor(const void* b, size_t i, shardrec_dense_param_t* t) {
  return shardrec_mlp_tensor((const shardrec_mlp_t*)b, i, t);
}
static shardrec_status_t mlp_bind(void* b, size_t i, float* p, float* g) {
  return shardrec_mlp_bind_tensor((shardrec_mlp_t*)b, i, p, g);
}
static shardrec_status_t dcn_tensor(const void* b, size_t i, shardrec_dense_param_t* t) {
  return shardrec_dcn_tensor((const shardrec_dcn_t*)b, i, t);
}
static shardrec_status_t dcn_bind(void* b, size_t i, float* p, float* g) {
  return shardrec_dcn_bind_tensor((shardrec_dcn_t*)b, i, p, g);
}

static int make_mlp(serve_model_t* m, const char* prefix, shardrec_mlp_t** out) {
  int64_t in = 0, outs[MAX_LAYERS];
  shardrec_mlp_options_t o;
  size_t n = 0;
  const int layers = mlp_shape(m, prefix, &in, outs);
  if (layers <= 0) {
    if (layers == 0) fprintf(stderr, "serve: the checkpoint has no %s MLP\n", prefix);
    return -1;
  }
  shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION);
  o.in_features = in;
  o.out_features = outs;
  o.num_layers = layers; /* ReLU between layers, none after the last: as the DLRM trains it */
  o.name = prefix;
  if (shardrec_mlp_create(out, &o) != SHARDREC_OK) return fail(prefix);
  if (shardrec_mlp_num_tensors(*out, &n) != SHARDREC_OK) return fail(prefix);
  return bind_all(m, *out, n, mlp_tensor, mlp_bind);
}

static int make_cross(serve_model_t* m) {
  const float* data;
  size_t v = 0, b = 0, n = 0;
  int layers = 0, found;
  char name[64];
  found = tensor(m, "cross.0.V.weight", &data, &v);
  if (found <= 0) return found; /* the dot interaction */
  if (tensor(m, "cross.0.W.bias", &data, &b) != 1 || b == 0 || v % b != 0) {
    fprintf(stderr, "serve: cross.0.W.bias missing or inconsistent\n");
    return -1;
  }
  do {
    snprintf(name, sizeof(name), "cross.%d.V.weight", layers);
    found = tensor(m, name, &data, &n);
    if (found < 0) return -1;
  } while (found == 1 && ++layers < MAX_LAYERS);
  if (shardrec_dcn_create(&m->cross, (int64_t)b, layers, (int64_t)(v / b), 0, "cross") !=
      SHARDREC_OK)
    return fail("cross network");
  if (shardrec_dcn_num_tensors(m->cross, &n) != SHARDREC_OK) return fail("cross network");
  return bind_all(m, m->cross, n, dcn_tensor, dcn_bind);
}

int serve_model_open(serve_model_t* m, const char* checkpoint, int32_t storage) {
  shardrec_inference_options_t o;
  size_t features = 0;
  int64_t out_dim = 0, bottom_in = 0, bottom_outs[MAX_LAYERS];
  memset(m, 0, sizeof(*m));
  shardrec_inference_options_init(&o, SHARDREC_INFERENCE_OPTIONS_VERSION);
  o.default_storage = storage;
  if (shardrec_inference_open(checkpoint, &o, &m->inf) != SHARDREC_OK) return fail(checkpoint);
  if (shardrec_inference_num_features(m->inf, &features) != SHARDREC_OK ||
      shardrec_inference_output_dim(m->inf, &out_dim) != SHARDREC_OK || features == 0)
    return fail("inference handle");
  m->num_sparse = (int64_t)features;
  m->dim = out_dim / m->num_sparse;
  if (shardrec_inference_pin(m->inf, &m->pin) != SHARDREC_OK) return fail("pin");
  {
    /* A model trained on raw 64-bit ids (dlrm --dynamic) would read zeros for the table indices
       this example's held-out set holds: refused, not mis-scored. */
    const float* marker = NULL;
    size_t count = 0;
    const int raw = tensor(m, "dlrm.raw_ids", &marker, &count);
    if (raw < 0) return -1;
    if (raw > 0) {
      fprintf(stderr,
              "serve: %s was trained on raw 64-bit ids (dlrm --dynamic); this example scores "
              "held-out samples by table index and serves fixed-table models only\n",
              checkpoint);
      return -1;
    }
  }
  if (make_mlp(m, "bottom", &m->bottom) != 0 || make_cross(m) != 0 ||
      make_mlp(m, "top", &m->top) != 0)
    return -1;
  mlp_shape(m, "bottom", &bottom_in, bottom_outs);
  m->num_dense = bottom_in;
  if (m->cross != NULL) {
    m->inter_width = (m->num_sparse + 1) * m->dim;
  } else if (shardrec_dot_interaction_width(m->num_sparse, m->dim, &m->inter_width) !=
             SHARDREC_OK) {
    return fail("dot interaction");
  }
  return 0;
}

void serve_model_destroy(serve_model_t* m) {
  /* The MLPs point into the snapshot: they go first, the pin after them. */
  shardrec_mlp_destroy(m->top);
  shardrec_dcn_destroy(m->cross);
  shardrec_mlp_destroy(m->bottom);
  shardrec_inference_unpin(m->pin);
  shardrec_inference_destroy(m->inf);
  memset(m, 0, sizeof(*m));
}

int serve_scratch_alloc(serve_scratch_t* s, const serve_model_t* m, int64_t capacity) {
  const size_t B = (size_t)capacity, F = (size_t)m->num_sparse, d = (size_t)m->dim;
  size_t i;
  memset(s, 0, sizeof(*s));
  s->capacity = capacity;
  s->lengths = malloc(sizeof(int32_t) * B * F);
  s->bottom = malloc(sizeof(float) * B * d);
  s->emb = malloc(sizeof(float) * B * F * d);
  s->x0 = malloc(sizeof(float) * B * (F + 1) * d);
  s->inter = malloc(sizeof(float) * B * (size_t)m->inter_width);
  if (!s->lengths || !s->bottom || !s->emb || !s->x0 || !s->inter) {
    serve_scratch_free(s);
    return -1;
  }
  for (i = 0; i < B * F; ++i) s->lengths[i] = 1;
  return 0;
}

void serve_scratch_free(serve_scratch_t* s) {
  free(s->lengths);
  free(s->bottom);
  free(s->emb);
  free(s->x0);
  free(s->inter);
  memset(s, 0, sizeof(*s));
}

#define TRY(call)                       \
  do {                                  \
    shardrec_status_t rc_ = (call);     \
    if (rc_ != SHARDREC_OK) return rc_; \
  } while (0)

shardrec_status_t serve_model_score(const serve_model_t* m, serve_scratch_t* s, const float* dense,
                                    const int64_t* ids, int64_t B, float* logits) {
  const int64_t F = m->num_sparse, d = m->dim;
  shardrec_kjt_view_t batch = SHARDREC_KJT_VIEW_INIT;
  int64_t b;
  if (B > s->capacity) return SHARDREC_EINVAL;
  batch.batch_size = B;
  batch.num_features = (size_t)F;
  batch.lengths = s->lengths;
  batch.num_lengths = (size_t)(B * F);
  batch.values = ids;
  batch.values_dtype = SHARDREC_DTYPE_INT64;
  batch.num_values = (size_t)(B * F);
  TRY(shardrec_mlp_infer(m->bottom, dense, B, s->bottom, B * d));
  TRY(shardrec_inference_lookup(m->inf, &batch, s->emb, (size_t)(B * F * d), NULL));
  if (m->cross == NULL) {
    TRY(shardrec_dot_interaction_forward(s->bottom, s->emb, B, F, d, s->inter, B * m->inter_width));
  } else {
    for (b = 0; b < B; ++b) {
      memcpy(s->x0 + b * (F + 1) * d, s->bottom + b * d, sizeof(float) * (size_t)d);
      memcpy(s->x0 + b * (F + 1) * d + d, s->emb + b * F * d, sizeof(float) * (size_t)(F * d));
    }
    TRY(shardrec_dcn_infer(m->cross, s->x0, B, s->inter, B * m->inter_width));
  }
  return shardrec_mlp_infer(m->top, s->inter, B, logits, B);
}
