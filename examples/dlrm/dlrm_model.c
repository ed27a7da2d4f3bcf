/*
 * @file dlrm_model.c
 * @brief The DLRM of dlrm_model.h: forward, loss, backward with dense gradients averaged by a
 *        bucketer while the rest of the backward runs, fused embedding updates, dense optimizer
 *        step and the replica sync of the embeddings.
 */
#define _POSIX_C_SOURCE 200112L
#include "dlrm_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TENSORS 512

struct dlrm {
  dlrm_config_t cfg;
  shardrec_comm_t* world; /* borrowed */
  shardrec_plan_t* plan;
  shardrec_mesh_t* mesh;
  shardrec_embedding_t* coll;
  shardrec_mlp_t* bottom;
  shardrec_mlp_t* top;
  shardrec_dcn_t* cross; /* NULL with the dot interaction */
  shardrec_ddp_t* ddp;
  shardrec_dense_optimizer_t* opt;
  size_t nb, nc, nt; /* tensors of bottom, cross, top */
  int64_t inter_width;
  char (*table_names)[16];
  /* Per-step buffers, sized for the local batch. */
  int32_t* lengths;
  float *bot_out, *emb_out, *x0, *inter, *logits, *dlogits, *d_inter, *d_x0, *d_bot, *d_emb;
  shardrec_status_t ready_status;
  dlrm_timings_t timings;
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define TRY(call)                       \
  do {                                  \
    shardrec_status_t rc_ = (call);     \
    if (rc_ != SHARDREC_OK) return rc_; \
  } while (0)

void dlrm_config_defaults(dlrm_config_t* c) {
  static const int64_t bottom[] = {64, 32, 16};
  static const int64_t top[] = {128, 64, 1};
  memset(c, 0, sizeof(*c));
  c->num_dense = 13;
  c->num_sparse = 26;
  c->emb_dim = 16;
  c->bottom = bottom;
  c->num_bottom = 3;
  c->top = top;
  c->num_top = 3;
  c->interaction = DLRM_INTERACTION_DOT;
  c->dcn_layers = 3;
  c->dcn_rank = 64;
  shardrec_optimizer_config_init(&c->sparse_optimizer, SHARDREC_OPTIMIZER_CONFIG_VERSION);
  c->sparse_optimizer.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  c->sparse_optimizer.learning_rate = 0.05f;
  shardrec_optimizer_config_init(&c->dense_optimizer, SHARDREC_OPTIMIZER_CONFIG_VERSION);
  c->dense_optimizer.type = SHARDREC_OPTIMIZER_ADAM;
  c->dense_optimizer.learning_rate = 1e-3f;
  c->shard_size = 1;
  c->local_batch = 256;
  c->seed = 1;
}

static shardrec_status_t make_plan(dlrm_t* m) {
  const dlrm_config_t* c = &m->cfg;
  shardrec_table_config_t* tables = calloc((size_t)c->num_sparse, sizeof(*tables));
  shardrec_feature_config_t* features = calloc((size_t)c->num_sparse, sizeof(*features));
  int32_t* feature_index = calloc((size_t)c->num_sparse, sizeof(int32_t));
  char(*feature_names)[16] = calloc((size_t)c->num_sparse, sizeof(*feature_names));
  shardrec_topology_t topology;
  shardrec_status_t rc = SHARDREC_ENOMEM;
  int f;
  if (tables == NULL || features == NULL || feature_index == NULL || feature_names == NULL)
    goto done;
  for (f = 0; f < c->num_sparse; ++f) {
    snprintf(m->table_names[f], sizeof(m->table_names[f]), "t%d", f);
    snprintf(feature_names[f], sizeof(feature_names[f]), "c%d", f);
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = feature_names[f];
    features[f].pooling_factor = 1.0f;
    shardrec_table_config_init(&tables[f], SHARDREC_TABLE_CONFIG_VERSION);
    feature_index[f] = f;
    tables[f].name = m->table_names[f];
    tables[f].rows = c->rows[f];
    tables[f].dim = c->emb_dim;
    tables[f].features = &feature_index[f];
    tables[f].num_features = 1;
    tables[f].dynamic = c->dynamic;
    tables[f].dtype = c->table_dtype;
  }
  shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION);
  topology.world_size = c->shard_size;
  topology.batch_size = c->local_batch;
  topology.optimizer = c->sparse_optimizer.type;
  rc = shardrec_plan_create(&m->plan, tables, (size_t)c->num_sparse, features,
                            (size_t)c->num_sparse, &topology, NULL, 0);
done:
  free(tables);
  free(features);
  free(feature_index);
  free(feature_names);
  return rc;
}

static shardrec_status_t make_dense(dlrm_t* m) {
  const dlrm_config_t* c = &m->cfg;
  shardrec_mlp_options_t o;
  int64_t counts[MAX_TENSORS];
  int64_t top_in;
  size_t i, n;
  shardrec_ddp_options_t d;
  if (c->bottom[c->num_bottom - 1] != c->emb_dim || c->top[c->num_top - 1] != 1) {
    fprintf(stderr, "dlrm: the bottom MLP must end at emb_dim and the top MLP at 1\n");
    return SHARDREC_EINVAL;
  }
  TRY(shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION));
  o.in_features = c->num_dense;
  o.out_features = c->bottom;
  o.num_layers = c->num_bottom;
  o.seed = c->seed;
  o.name = "bottom";
  TRY(shardrec_mlp_create(&m->bottom, &o));
  if (c->interaction == DLRM_INTERACTION_DOT) {
    TRY(shardrec_dot_interaction_width(c->num_sparse, c->emb_dim, &m->inter_width));
  } else {
    m->inter_width = (int64_t)(c->num_sparse + 1) * c->emb_dim;
    TRY(shardrec_dcn_create(&m->cross, m->inter_width, c->dcn_layers, c->dcn_rank, c->seed,
                            "cross"));
  }
  top_in = m->inter_width;
  o.in_features = top_in;
  o.out_features = c->top;
  o.num_layers = c->num_top;
  o.name = "top";
  TRY(shardrec_mlp_create(&m->top, &o));
  TRY(shardrec_mlp_num_tensors(m->bottom, &m->nb));
  if (m->cross != NULL) TRY(shardrec_dcn_num_tensors(m->cross, &m->nc));
  TRY(shardrec_mlp_num_tensors(m->top, &m->nt));
  n = m->nb + m->nc + m->nt;
  if (n > MAX_TENSORS) return SHARDREC_EINVAL;
  for (i = 0; i < n; ++i) {
    shardrec_dense_param_t t;
    TRY(dlrm_dense_tensor(m, i, &t));
    counts[i] = t.count;
  }
  TRY(shardrec_ddp_options_init(&d, SHARDREC_DDP_OPTIONS_VERSION));
  d.first_bucket_bytes = c->first_bucket_bytes;
  d.bucket_cap_bytes = c->bucket_cap_bytes;
  TRY(shardrec_ddp_create(&m->ddp, m->world, counts, n, &d));
  return shardrec_dense_optimizer_create(&m->opt, &c->dense_optimizer);
}

/* The tier of config->tier_table in `eo` when config->tier_dir is set (`tier` and `dir` outlive
   the collection's creation). */
static shardrec_status_t set_tier(dlrm_t* m, shardrec_embedding_options_t* eo,
                                  shardrec_table_tier_t* tier, char* dir, size_t dir_len) {
  int32_t rank = 0;
  shardrec_status_t rc;
  if (m->cfg.tier_dir == NULL) return SHARDREC_OK;
  if (m->cfg.tier_table < 0 || m->cfg.tier_table >= m->cfg.num_sparse) {
    fprintf(stderr, "dlrm: tier_table %d is not a table\n", m->cfg.tier_table);
    return SHARDREC_EINVAL;
  }
  rc = shardrec_comm_rank(&rank, m->world);
  if (rc != SHARDREC_OK) return rc;
  if (snprintf(dir, dir_len, "%s/rank%d", m->cfg.tier_dir, (int)rank) >= (int)dir_len) {
    fprintf(stderr, "dlrm: tier directory too long\n");
    return SHARDREC_EINVAL;
  }
  rc = shardrec_table_tier_init(tier, SHARDREC_TABLE_TIER_VERSION);
  if (rc != SHARDREC_OK) return rc;
  tier->table = m->table_names[m->cfg.tier_table];
  tier->dir = dir;
  tier->cache_bytes = m->cfg.tier_cache_bytes;
  eo->tiers = tier;
  eo->num_tiers = 1;
  return SHARDREC_OK;
}

shardrec_status_t dlrm_create(dlrm_t** out, const dlrm_config_t* config, shardrec_comm_t* world) {
  dlrm_t* m;
  shardrec_mesh_options_t mo;
  shardrec_embedding_options_t eo;
  shardrec_table_tier_t tier;
  char tier_dir[4096];
  shardrec_status_t rc;
  size_t B, F, d, W;
  *out = NULL;
  if (config->num_sparse < 1 || config->num_dense < 1 || config->emb_dim < 1 ||
      config->local_batch < 1 || config->num_bottom < 1 || config->num_top < 1) {
    fprintf(stderr, "dlrm: invalid config\n");
    return SHARDREC_EINVAL;
  }
  m = calloc(1, sizeof(*m));
  if (m == NULL) return SHARDREC_ENOMEM;
  m->cfg = *config;
  m->world = world;
  m->ready_status = SHARDREC_OK;
  m->table_names = calloc((size_t)config->num_sparse, sizeof(*m->table_names));
  if (m->table_names == NULL) {
    dlrm_destroy(m);
    return SHARDREC_ENOMEM;
  }
  rc = make_plan(m);
  if (rc == SHARDREC_OK) rc = shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
  if (rc == SHARDREC_OK) {
    mo.sharding_group_size = config->shard_size;
    mo.sync_interval = config->sync_interval;
    rc = shardrec_mesh_create(&m->mesh, world, &mo);
  }
  if (rc == SHARDREC_OK)
    rc = shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  if (rc == SHARDREC_OK) {
    eo.seed = config->seed;
    eo.num_threads = config->embedding_threads;
    rc = set_tier(m, &eo, &tier, tier_dir, sizeof(tier_dir));
  }
  if (rc == SHARDREC_OK) {
    rc = shardrec_mesh_embedding_create(&m->coll, m->mesh, m->plan, &config->sparse_optimizer, &eo);
  }
  if (rc == SHARDREC_OK) rc = make_dense(m);
  if (rc != SHARDREC_OK) {
    dlrm_destroy(m);
    return rc;
  }
  B = (size_t)config->local_batch;
  F = (size_t)config->num_sparse;
  d = (size_t)config->emb_dim;
  W = (size_t)m->inter_width;
  m->lengths = malloc(sizeof(int32_t) * B * F);
  m->bot_out = malloc(sizeof(float) * B * d);
  m->emb_out = malloc(sizeof(float) * B * F * d);
  m->x0 = malloc(sizeof(float) * B * (F + 1) * d);
  m->inter = malloc(sizeof(float) * B * W);
  m->logits = malloc(sizeof(float) * B);
  m->dlogits = malloc(sizeof(float) * B);
  m->d_inter = malloc(sizeof(float) * B * W);
  m->d_x0 = malloc(sizeof(float) * B * (F + 1) * d);
  m->d_bot = malloc(sizeof(float) * B * d);
  m->d_emb = malloc(sizeof(float) * B * F * d);
  if (!m->lengths || !m->bot_out || !m->emb_out || !m->x0 || !m->inter || !m->logits ||
      !m->dlogits || !m->d_inter || !m->d_x0 || !m->d_bot || !m->d_emb) {
    dlrm_destroy(m);
    return SHARDREC_ENOMEM;
  }
  {
    size_t i;
    for (i = 0; i < B * F; ++i) m->lengths[i] = 1;
  }
  *out = m;
  return SHARDREC_OK;
}

void dlrm_destroy(dlrm_t* m) {
  if (m == NULL) return;
  shardrec_dense_optimizer_destroy(m->opt);
  shardrec_ddp_destroy(m->ddp);
  shardrec_mlp_destroy(m->top);
  shardrec_dcn_destroy(m->cross);
  shardrec_mlp_destroy(m->bottom);
  shardrec_embedding_destroy(m->coll);
  shardrec_mesh_destroy(m->mesh);
  shardrec_plan_destroy(m->plan);
  free(m->table_names);
  free(m->lengths);
  free(m->bot_out);
  free(m->emb_out);
  free(m->x0);
  free(m->inter);
  free(m->logits);
  free(m->dlogits);
  free(m->d_inter);
  free(m->d_x0);
  free(m->d_bot);
  free(m->d_emb);
  free(m);
}

size_t dlrm_num_dense_tensors(const dlrm_t* m) { return m->nb + m->nc + m->nt; }

shardrec_status_t dlrm_dense_tensor(const dlrm_t* m, size_t i, shardrec_dense_param_t* out) {
  if (i < m->nb) return shardrec_mlp_tensor(m->bottom, i, out);
  if (i < m->nb + m->nc) return shardrec_dcn_tensor(m->cross, i - m->nb, out);
  return shardrec_mlp_tensor(m->top, i - m->nb - m->nc, out);
}

/* Gradients live in the bucketer's storage; their addresses change once, when the buckets are
   rebuilt after the first step, so they are rebound before every step. */
static shardrec_status_t bind_gradients(dlrm_t* m) {
  size_t i;
  for (i = 0; i < dlrm_num_dense_tensors(m); ++i) {
    float* g = NULL;
    TRY(shardrec_ddp_grad(m->ddp, i, &g));
    if (i < m->nb) {
      TRY(shardrec_mlp_bind_tensor(m->bottom, i, NULL, g));
    } else if (i < m->nb + m->nc) {
      TRY(shardrec_dcn_bind_tensor(m->cross, i - m->nb, NULL, g));
    } else {
      TRY(shardrec_mlp_bind_tensor(m->top, i - m->nb - m->nc, NULL, g));
    }
  }
  return SHARDREC_OK;
}

typedef struct ready_ctx {
  dlrm_t* model;
  size_t offset;
} ready_ctx_t;

static void on_ready(size_t tensor, void* user) {
  ready_ctx_t* r = (ready_ctx_t*)user;
  shardrec_status_t rc = shardrec_ddp_mark_ready(r->model->ddp, r->offset + tensor);
  if (rc != SHARDREC_OK && r->model->ready_status == SHARDREC_OK) r->model->ready_status = rc;
}

static shardrec_status_t forward(dlrm_t* m, const float* dense, const int64_t* ids, double* t) {
  const dlrm_config_t* c = &m->cfg;
  const int64_t B = c->local_batch, F = c->num_sparse, d = c->emb_dim;
  shardrec_kjt_view_t batch = SHARDREC_KJT_VIEW_INIT;
  double t0 = now_seconds(), t1;
  int64_t b;
  TRY(shardrec_mlp_forward(m->bottom, dense, B, m->bot_out, B * d));
  t1 = now_seconds();
  t[0] += t1 - t0;
  batch.batch_size = B;
  batch.num_features = (size_t)F;
  batch.lengths = m->lengths;
  batch.num_lengths = (size_t)(B * F);
  batch.values = ids;
  batch.values_dtype = SHARDREC_DTYPE_INT64;
  batch.num_values = (size_t)(B * F);
  TRY(shardrec_embedding_forward(m->coll, &batch, m->emb_out, (size_t)(B * F * d), NULL));
  t0 = now_seconds();
  t[1] += t0 - t1;
  if (m->cross == NULL) {
    TRY(shardrec_dot_interaction_forward(m->bot_out, m->emb_out, B, F, d, m->inter,
                                         B * m->inter_width));
  } else {
    for (b = 0; b < B; ++b) {
      memcpy(m->x0 + b * (F + 1) * d, m->bot_out + b * d, sizeof(float) * (size_t)d);
      memcpy(m->x0 + b * (F + 1) * d + d, m->emb_out + b * F * d, sizeof(float) * (size_t)(F * d));
    }
    TRY(shardrec_dcn_forward(m->cross, m->x0, B, m->inter, B * m->inter_width));
  }
  t1 = now_seconds();
  t[2] += t1 - t0;
  TRY(shardrec_mlp_forward(m->top, m->inter, B, m->logits, B));
  t[3] += now_seconds() - t1;
  return SHARDREC_OK;
}

shardrec_status_t dlrm_predict(dlrm_t* m, const float* dense, const int64_t* ids, float* logits) {
  double t[4] = {0, 0, 0, 0};
  TRY(forward(m, dense, ids, t));
  memcpy(logits, m->logits, sizeof(float) * (size_t)m->cfg.local_batch);
  return SHARDREC_OK;
}

shardrec_status_t dlrm_train_step(dlrm_t* m, const float* dense, const int64_t* ids,
                                  const float* labels, double* loss, float* logits) {
  const dlrm_config_t* c = &m->cfg;
  const int64_t B = c->local_batch, F = c->num_sparse, d = c->emb_dim;
  dlrm_timings_t* tm = &m->timings;
  double fwd[4] = {0, 0, 0, 0};
  const double start = now_seconds();
  double t0, t1;
  ready_ctx_t ready_bottom = {m, 0}, ready_cross = {m, m->nb}, ready_top = {m, m->nb + m->nc};
  shardrec_dense_param_t tensors[MAX_TENSORS];
  size_t i, n = dlrm_num_dense_tensors(m);
  int64_t b;
  shardrec_step_timings_t emb_before = SHARDREC_STEP_TIMINGS_INIT;
  shardrec_step_timings_t emb_after = SHARDREC_STEP_TIMINGS_INIT;
  TRY(bind_gradients(m));
  TRY(shardrec_ddp_zero_grad(m->ddp));
  TRY(shardrec_embedding_step_timings(m->coll, &emb_before));
  TRY(forward(m, dense, ids, fwd));
  TRY(shardrec_embedding_step_timings(m->coll, &emb_after));
  tm->input_dist += emb_after.input_dist_seconds - emb_before.input_dist_seconds;
  tm->lookup += emb_after.lookup_seconds - emb_before.lookup_seconds;
  tm->output_dist += emb_after.output_dist_seconds - emb_before.output_dist_seconds;
  tm->bottom_fwd += fwd[0];
  tm->embedding_fwd += fwd[1];
  tm->interaction_fwd += fwd[2];
  tm->top_fwd += fwd[3];
  t0 = now_seconds();
  TRY(shardrec_bce_with_logits(m->logits, labels, B, (double)B, loss, m->dlogits));
  if (logits != NULL) memcpy(logits, m->logits, sizeof(float) * (size_t)B);
  t1 = now_seconds();
  tm->loss += t1 - t0;
  /* Backward, last layer first: each dense gradient starts averaging as soon as it is final. */
  m->ready_status = SHARDREC_OK;
  TRY(shardrec_mlp_backward(m->top, m->dlogits, m->d_inter, on_ready, &ready_top));
  t0 = now_seconds();
  tm->top_bwd += t0 - t1;
  if (m->cross == NULL) {
    TRY(shardrec_dot_interaction_backward(m->bot_out, m->emb_out, m->d_inter, B, F, d, m->d_bot,
                                          m->d_emb));
  } else {
    TRY(shardrec_dcn_backward(m->cross, m->d_inter, m->d_x0, on_ready, &ready_cross));
    for (b = 0; b < B; ++b) {
      memcpy(m->d_bot + b * d, m->d_x0 + b * (F + 1) * d, sizeof(float) * (size_t)d);
      memcpy(m->d_emb + b * F * d, m->d_x0 + b * (F + 1) * d + d, sizeof(float) * (size_t)(F * d));
    }
  }
  t1 = now_seconds();
  tm->interaction_bwd += t1 - t0;
  TRY(shardrec_embedding_backward(m->coll, m->d_emb, (size_t)(B * F * d), NULL));
  t0 = now_seconds();
  tm->embedding_bwd += t0 - t1;
  TRY(shardrec_mlp_backward(m->bottom, m->d_bot, NULL, on_ready, &ready_bottom));
  t1 = now_seconds();
  tm->bottom_bwd += t1 - t0;
  TRY(m->ready_status);
  TRY(shardrec_ddp_finish(m->ddp));
  t0 = now_seconds();
  tm->dense_sync_wait += t0 - t1;
  for (i = 0; i < n; ++i) TRY(dlrm_dense_tensor(m, i, &tensors[i]));
  TRY(shardrec_dense_optimizer_step(m->opt, tensors, n));
  t1 = now_seconds();
  tm->dense_optimizer += t1 - t0;
  /* Dynamic tables too: a sync merges the replicas' rows by id (docs/dynamic-tables.md). */
  TRY(shardrec_mesh_step(m->mesh, m->coll, NULL));
  t0 = now_seconds();
  tm->replica_sync += t0 - t1;
  tm->total += t0 - start;
  tm->steps += 1;
  return SHARDREC_OK;
}

const dlrm_timings_t* dlrm_timings(const dlrm_t* m) { return &m->timings; }
shardrec_embedding_t* dlrm_embedding(dlrm_t* m) { return m->coll; }
shardrec_mesh_t* dlrm_mesh(dlrm_t* m) { return m->mesh; }
const shardrec_plan_t* dlrm_plan(const dlrm_t* m) { return m->plan; }
shardrec_ddp_t* dlrm_ddp(dlrm_t* m) { return m->ddp; }
const char* dlrm_table_name(const dlrm_t* m, int f) { return m->table_names[f]; }
