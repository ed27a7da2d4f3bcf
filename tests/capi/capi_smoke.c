/*
 * Plain-C end-to-end smoke test: calls every public function at least once, from C99, with
 * threads as ranks. Exactness is tested elsewhere; this proves the header works from C and that
 * each entry point does something sensible. The communicator calls are in capi_smoke_comm.c.
 */
#include "capi_smoke.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardrec/shardrec.h"

int g_failures = 0;
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- common.h, version.h, device.h ------------------------------------------------------ */
static void test_common(void) {
  char buf[8];
  size_t len;
  char path[512];
  int32_t count = -1;
  shardrec_status_t rc;
  EXPECT(shardrec_version() == SHARDREC_VERSION_CODE);
  EXPECT(strlen(shardrec_version_string()) > 0);
  EXPECT(strcmp(shardrec_status_string(SHARDREC_ETIMEOUT), "SHARDREC_ETIMEOUT") == 0);
  EXPECT(strcmp(shardrec_status_string(12345), "SHARDREC_UNKNOWN") == 0);
  EXPECT(shardrec_dtype_size(SHARDREC_DTYPE_BFLOAT16) == 2);
  EXPECT(shardrec_dtype_size(99) == 0);
  shardrec_free(NULL);
  /* A failing call leaves a message; the copy truncates and reports the full length. */
  EXPECT(shardrec_comm_rank(NULL, NULL) == SHARDREC_EINVAL);
  EXPECT(strlen(shardrec_last_error()) > 0);
  len = shardrec_last_error_copy(buf, sizeof(buf));
  EXPECT(len == strlen(shardrec_last_error()) && strlen(buf) == sizeof(buf) - 1);
  OK(shardrec_device_count(&count));
  EXPECT(count >= 0);
  OK(shardrec_device_check(SHARDREC_DEVICE_HOST, 0));
  rc = shardrec_device_check(SHARDREC_DEVICE_CUDA, 0);
  EXPECT(count > 0 ? rc == SHARDREC_OK : (rc == SHARDREC_ENODEVICE || rc == SHARDREC_EUNSUPPORTED));
  rc = shardrec_device_plugin_path(&len, path, sizeof(path));
  EXPECT(count > 0 ? rc == SHARDREC_OK : rc != SHARDREC_OK);
}

/* ---- config.h, plan.h --------------------------------------------------------------------- */
static shardrec_plan_t* make_plan(int32_t world, int32_t optimizer) {
  static const int32_t f0[] = {0};
  static const int32_t f1[] = {1, 2};
  shardrec_feature_config_t features[3];
  shardrec_table_config_t tables[2];
  shardrec_table_constraints_t constraints[2];
  shardrec_topology_t topology;
  shardrec_plan_t* plan = NULL;
  int i;
  const char* names[3] = {"a", "b", "c"};
  for (i = 0; i < 3; ++i) {
    OK(shardrec_feature_config_init(&features[i], SHARDREC_FEATURE_CONFIG_VERSION));
    features[i].name = names[i];
  }
  for (i = 0; i < 2; ++i) {
    OK(shardrec_table_config_init(&tables[i], SHARDREC_TABLE_CONFIG_VERSION));
    OK(shardrec_table_constraints_init(&constraints[i], SHARDREC_TABLE_CONSTRAINTS_VERSION));
  }
  tables[0].name = "small";
  tables[0].rows = 7;
  tables[0].dim = 4;
  tables[0].features = f0;
  tables[0].num_features = 1;
  tables[1].name = "big";
  tables[1].rows = 50;
  tables[1].dim = 8;
  tables[1].pooling = SHARDREC_POOLING_MEAN;
  tables[1].features = f1;
  tables[1].num_features = 2;
  constraints[0].table = "small";
  constraints[0].sharding_types = 1u << SHARDREC_SHARDING_ROW_WISE;
  constraints[1].table = "big";
  constraints[1].sharding_types = 1u << SHARDREC_SHARDING_COLUMN_WISE;
  constraints[1].min_partition = 4;
  OK(shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION));
  topology.world_size = world;
  topology.optimizer = optimizer;
  OK(shardrec_plan_create(&plan, tables, 2, features, 3, &topology, constraints, 2));
  return plan;
}

static void test_plan(void) {
  shardrec_plan_t* plan = make_plan(2, SHARDREC_OPTIMIZER_ADAGRAD);
  shardrec_plan_t* copy = NULL;
  char* json = NULL;
  char* stats = NULL;
  size_t len = 0, n = 0, index = 99;
  uint64_t h1 = 0, h2 = 1;
  int32_t v = 0, type = -1;
  int64_t rows = 0;
  const char* name = NULL;
  shardrec_shard_t shard;
  if (!plan) return;
  OK(shardrec_plan_world_size(plan, &v));
  EXPECT(v == 2);
  OK(shardrec_plan_ranks_per_node(plan, &v));
  OK(shardrec_plan_num_tables(plan, &n));
  EXPECT(n == 2);
  OK(shardrec_plan_num_features(plan, &n));
  EXPECT(n == 3);
  OK(shardrec_plan_feature_name(plan, 2, &name));
  EXPECT(strcmp(name, "c") == 0);
  OK(shardrec_plan_table_name(plan, 1, &name));
  EXPECT(strcmp(name, "big") == 0);
  OK(shardrec_plan_find_table(plan, "big", &index));
  EXPECT(index == 1);
  EXPECT(shardrec_plan_find_table(plan, "nope", &index) == SHARDREC_ENOTFOUND);
  OK(shardrec_plan_table_rows(plan, 0, &rows));
  EXPECT(rows == 7);
  OK(shardrec_plan_table_dim(plan, 1, &v));
  EXPECT(v == 8);
  OK(shardrec_plan_table_sharding(plan, 0, &type, &n));
  EXPECT(type == SHARDREC_SHARDING_ROW_WISE && n == 2);
  OK(shardrec_plan_shard(plan, 0, 1, &shard));
  EXPECT(shard.row_offset == 4 && shard.rows == 3 && shard.rank == 1);
  OK(shardrec_plan_to_json(plan, &json, &len));
  EXPECT(json && strlen(json) == len);
  OK(shardrec_plan_from_json(&copy, json, len));
  OK(shardrec_plan_hash(plan, &h1));
  OK(shardrec_plan_hash(copy, &h2));
  EXPECT(h1 == h2);
  EXPECT(shardrec_plan_from_json(&copy, "{", 1) == SHARDREC_ECORRUPT);
  OK(shardrec_plan_stats(plan, &stats, &len));
  EXPECT(stats && len > 0);
  shardrec_free(json);
  shardrec_free(stats);
  shardrec_plan_destroy(copy);
  shardrec_plan_destroy(plan);
  shardrec_plan_destroy(NULL);
}

/* ---- dense.h: the serving side ---------------------------------------------------------- */
static void test_dense_infer(void) {
  const int64_t outs[2] = {4, 1};
  const float x[6] = {0.5f, -1.0f, 2.0f, 1.5f, 0.0f, -0.25f};
  float fwd[2], inf[2], cross_fwd[6], cross_inf[6];
  shardrec_mlp_options_t o = SHARDREC_MLP_OPTIONS_INIT;
  shardrec_mlp_t* mlp = NULL;
  shardrec_dcn_t* dcn = NULL;
  o.in_features = 3;
  o.out_features = outs;
  o.num_layers = 2;
  OK(shardrec_mlp_create(&mlp, &o));
  OK(shardrec_mlp_forward(mlp, x, 2, fwd, 2));
  OK(shardrec_mlp_infer(mlp, x, 2, inf, 2));
  EXPECT(memcmp(fwd, inf, sizeof(fwd)) == 0);
  EXPECT(shardrec_mlp_infer(mlp, x, 2, inf, 1) == SHARDREC_EINVAL);
  shardrec_mlp_destroy(mlp);
  OK(shardrec_dcn_create(&dcn, 3, 1, 2, 1, NULL));
  OK(shardrec_dcn_forward(dcn, x, 2, cross_fwd, 6));
  OK(shardrec_dcn_infer(dcn, x, 2, cross_inf, 6));
  EXPECT(memcmp(cross_fwd, cross_inf, sizeof(cross_fwd)) == 0);
  shardrec_dcn_destroy(dcn);
}

/* ---- tensor.h, embedding.h ---------------------------------------------------------------- */
static shardrec_comm_t* g_group[4];
static shardrec_plan_t* g_plan;

static void make_batch(shardrec_kjt_view_t* kjt, int32_t* lengths, int64_t* ids, int rank) {
  int i;
  memset(kjt, 0, sizeof(*kjt));
  for (i = 0; i < 6; ++i) lengths[i] = 1 + (i + rank) % 2; /* F = 3, B = 2 */
  for (i = 0; i < 12; ++i) ids[i] = (i * 3 + rank) % 7;
  kjt->batch_size = 2;
  kjt->num_features = 3;
  kjt->lengths = lengths;
  kjt->num_lengths = 6;
  kjt->values = ids;
  kjt->values_dtype = SHARDREC_DTYPE_INT64;
  kjt->num_values = 0;
  for (i = 0; i < 6; ++i) kjt->num_values += (size_t)lengths[i];
}

static void train_step(shardrec_embedding_t* coll, int rank, int async) {
  int32_t lengths[6];
  int64_t ids[12];
  float out[2 * 20], grad[2 * 20];
  shardrec_kjt_view_t kjt;
  int i;
  make_batch(&kjt, lengths, ids, rank);
  if (async) {
    OK(shardrec_embedding_input_dist_start(coll, &kjt, NULL));
    OK(shardrec_embedding_input_dist_wait(coll, NULL));
    OK(shardrec_embedding_forward_distributed(coll, out, 40, NULL));
  } else {
    OK(shardrec_embedding_forward(coll, &kjt, out, 40, NULL));
  }
  for (i = 0; i < 40; ++i) grad[i] = 0.01f * (float)(i % 5);
  OK(shardrec_embedding_backward(coll, grad, 40, NULL));
}

/* The tensor-view forms of forward, forward_distributed and backward. */
static void tensor_step(shardrec_embedding_t* coll, int rank) {
  int32_t lengths[6];
  int64_t ids[12];
  float out[2 * 20], grad[2 * 20];
  shardrec_kjt_view_t kjt;
  shardrec_tensor_view_t view;
  int i;
  make_batch(&kjt, lengths, ids, rank);
  memset(&view, 0, sizeof(view));
  view.data = out;
  view.dtype = SHARDREC_DTYPE_FLOAT32;
  view.device_type = SHARDREC_DEVICE_HOST;
  view.ndim = 2;
  view.shape[0] = 2;
  view.shape[1] = 20;
  OK(shardrec_embedding_forward_tensor(coll, &kjt, &view, NULL));
  for (i = 0; i < 40; ++i) grad[i] = 0.01f;
  view.data = grad;
  OK(shardrec_embedding_backward_tensor(coll, &view, NULL));
  OK(shardrec_embedding_input_dist_start(coll, &kjt, NULL));
  OK(shardrec_embedding_input_dist_wait(coll, NULL));
  view.data = out;
  OK(shardrec_embedding_forward_distributed_tensor(coll, &view, NULL));
  view.data = grad;
  OK(shardrec_embedding_backward_tensor(coll, &view, NULL));
}

/* Per-table optimizers, output keys and phase timings. */
static void per_table_calls(shardrec_embedding_t* coll) {
  shardrec_optimizer_config_t opt;
  shardrec_step_timings_t t;
  size_t n = 0;
  const char *name = NULL, *feature = NULL, *table = NULL;
  int32_t row_wise = -1;
  int64_t offset = -1, width = -1;
  OK(shardrec_embedding_set_table_learning_rate(coll, "big", 0.02f));
  OK(shardrec_embedding_table_optimizer(coll, "big", &opt));
  EXPECT(opt.type == SHARDREC_OPTIMIZER_ADAGRAD && opt.learning_rate == 0.02f);
  OK(shardrec_embedding_table_num_states(coll, "big", &n));
  EXPECT(n == 1);
  OK(shardrec_embedding_table_state_info(coll, "big", 0, &name, &row_wise));
  EXPECT(name != NULL && row_wise == 0);
  OK(shardrec_embedding_num_outputs(coll, &n));
  EXPECT(n == 3);
  OK(shardrec_embedding_output_info(coll, 0, &feature, &table, &offset, &width));
  EXPECT(feature != NULL && table != NULL && offset == 0 && width == 4);
  OK(shardrec_step_timings_init(&t, SHARDREC_STEP_TIMINGS_VERSION));
  OK(shardrec_embedding_step_timings(coll, &t));
  EXPECT(t.forwards == 4 && t.backwards == 4 && t.samples == 8);
  {
    shardrec_dynamic_table_config_t d;
    shardrec_dynamic_table_stats_t st;
    OK(shardrec_dynamic_table_config_init(&d, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION));
    EXPECT(d.eviction == SHARDREC_EVICTION_NONE && d.admission_threshold == 0);
    OK(shardrec_dynamic_table_stats_init(&st, SHARDREC_DYNAMIC_TABLE_STATS_VERSION));
    /* "big" is a fixed table: its stats are refused. */
    EXPECT(shardrec_embedding_dynamic_stats(coll, "big", &st) == SHARDREC_EINVAL);
    /* ... on every rank alike by the collective too (every rank makes this call). */
    EXPECT(shardrec_embedding_dynamic_stats_global(coll, "big", &st) == SHARDREC_EINVAL);
  }
  {
    size_t rows = 0, tombs = 0;
    /* Delta export of a fixed table is refused too. */
    EXPECT(shardrec_embedding_dynamic_mark(coll, "big") == SHARDREC_EINVAL);
    EXPECT(shardrec_embedding_dynamic_delta(coll, "big", NULL, NULL, 0, NULL, 0, &rows, &tombs) ==
           SHARDREC_EINVAL);
    {
      uint32_t flags = 0;
      EXPECT(SHARDREC_DELTA_FULL == 1);
      EXPECT(shardrec_embedding_dynamic_delta_ext(coll, "big", NULL, NULL, 0, NULL, 0, &rows,
                                                  &tombs, &flags) == SHARDREC_EINVAL);
    }
  }
  {
    int64_t id = 1;
    double score = 1.0;
    int32_t training = -1;
    /* Scores need a dynamic table with SCORE eviction; "big" is fixed. */
    EXPECT(SHARDREC_EVICTION_SCORE == 4);
    EXPECT(shardrec_embedding_dynamic_set_scores(coll, "big", &id, &score, 1, NULL) ==
           SHARDREC_EINVAL);
    /* Evaluation mode on and off again (a fixed table's evaluation forward reads as training). */
    OK(shardrec_embedding_set_training(coll, 0));
    OK(shardrec_embedding_is_training(coll, &training));
    EXPECT(training == 0);
    OK(shardrec_embedding_set_training(coll, 1));
    OK(shardrec_embedding_is_training(coll, &training));
    EXPECT(training == 1);
  }
}

/* ---- checkpoint.h ------------------------------------------------------------------------ */
static char g_ckpt_dir[256];

/* Saves with a dense tensor, scribbles, loads back; exports and imports a table. */
static void checkpoint_calls(shardrec_embedding_t* coll, shardrec_mesh_t* mesh) {
  shardrec_checkpoint_options_t o;
  shardrec_dense_tensor_t dense;
  float d[3] = {1.5f, -2.0f, 0.25f}, w[50 * 8], w2[50 * 8];
  char path[300];
  size_t i;
  OK(shardrec_checkpoint_options_init(&o, SHARDREC_CHECKPOINT_OPTIONS_VERSION));
  dense.name = "dense.w";
  dense.data = d;
  dense.count = 3;
  o.dense = &dense;
  o.num_dense = 1;
  OK(shardrec_embedding_get_weights(coll, "big", w, 400));
  if (mesh) {
    OK(shardrec_checkpoint_save_mesh(mesh, coll, g_ckpt_dir, &o));
  } else {
    OK(shardrec_checkpoint_save(coll, g_ckpt_dir, &o));
  }
  for (i = 0; i < 400; ++i) w2[i] = 0.0f;
  OK(shardrec_embedding_set_weights(coll, "big", w2, 400));
  d[0] = 0.0f;
  if (mesh) {
    OK(shardrec_checkpoint_load_mesh(mesh, coll, g_ckpt_dir, &o));
  } else {
    OK(shardrec_checkpoint_load(coll, g_ckpt_dir, &o));
  }
  EXPECT(d[0] == 1.5f);
  OK(shardrec_embedding_get_weights(coll, "big", w2, 400));
  EXPECT(memcmp(w, w2, sizeof(w)) == 0);
  if (!mesh) {
    snprintf(path, sizeof(path), "%s/big.safetensors", g_ckpt_dir);
    OK(shardrec_checkpoint_export_table(coll, "big", path, 1));
    OK(shardrec_checkpoint_import_table(coll, "big", path, 1));
    EXPECT(shardrec_checkpoint_load(coll, "/nonexistent/shardrec", NULL) == SHARDREC_ENOTFOUND);
  }
}

static void* embedding_rank(void* arg) {
  const int rank = (int)(intptr_t)arg;
  shardrec_optimizer_config_t opt;
  shardrec_embedding_options_t options;
  shardrec_embedding_t* coll = NULL;
  int64_t dim = 0, steps = 0;
  int32_t seq = -1, row_wise = -1;
  size_t ns = 0;
  const char* state = NULL;
  float w[50 * 8], st[50 * 8];
  double comm_s = -1, total_s = -1;
  OK(shardrec_optimizer_config_init(&opt, SHARDREC_OPTIMIZER_CONFIG_VERSION));
  opt.type = SHARDREC_OPTIMIZER_ADAGRAD;
  opt.learning_rate = 0.1f;
  OK(shardrec_embedding_options_init(&options, SHARDREC_EMBEDDING_OPTIONS_VERSION));
  options.seed = 3;
  OK(shardrec_embedding_create(&coll, g_plan, g_group[rank], &opt, &options));
  if (!coll) return NULL;
  OK(shardrec_embedding_output_dim(coll, &dim));
  EXPECT(dim == 20); /* a:4 + b:8 + c:8 */
  OK(shardrec_embedding_is_sequence(coll, &seq));
  EXPECT(seq == 0);
  train_step(coll, rank, 0);
  train_step(coll, rank, 1);
  OK(shardrec_embedding_set_learning_rate(coll, 0.05f));
  OK(shardrec_embedding_num_steps(coll, &steps));
  EXPECT(steps == 2);
  OK(shardrec_embedding_set_num_steps(coll, 2));
  OK(shardrec_embedding_get_weights(coll, "big", w, 400));
  OK(shardrec_embedding_set_weights(coll, "big", w, 400));
  OK(shardrec_embedding_num_states(coll, &ns));
  EXPECT(ns == 1);
  OK(shardrec_embedding_state_info(coll, 0, &state, &row_wise));
  EXPECT(state != NULL && row_wise == 0);
  OK(shardrec_embedding_get_state(coll, "big", state, st, 400));
  OK(shardrec_embedding_set_state(coll, "big", state, st, 400));
  EXPECT(shardrec_embedding_get_weights(coll, "missing", w, 400) == SHARDREC_ENOTFOUND ||
         shardrec_embedding_get_weights(coll, "missing", w, 400) == SHARDREC_EINVAL);
  OK(shardrec_embedding_timings(coll, &comm_s, &total_s));
  EXPECT(comm_s >= 0 && total_s >= comm_s);
  tensor_step(coll, rank);
  per_table_calls(coll);
  checkpoint_calls(coll, NULL);
  shardrec_embedding_destroy(coll);
  return NULL;
}

/* ---- replica.h ---------------------------------------------------------------------------- */
static int32_t hook_avg(void* data, size_t count, int32_t dtype, void* payload) {
  return shardrec_comm_allreduce((shardrec_comm_t*)payload, data, data, count, dtype,
                                 SHARDREC_REDUCE_AVG, NULL);
}

static void* mesh_rank(void* arg) {
  const int rank = (int)(intptr_t)arg;
  shardrec_mesh_options_t mo;
  shardrec_mesh_t* mesh = NULL;
  shardrec_comm_t* shard_comm = NULL;
  shardrec_comm_t* replica_comm = NULL;
  shardrec_optimizer_config_t opt;
  shardrec_embedding_t* coll = NULL;
  int32_t g = -1, sr = -1, rg = -1, rr = -1, synced = -1, collectives = 0;
  uint64_t bytes = 0;
  int64_t syncs = 0;
  char* text = NULL;
  OK(shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION));
  mo.sharding_group_size = 2;
  mo.ranks_per_node = 2;
  OK(shardrec_mesh_create(&mesh, g_group[rank], &mo));
  if (!mesh) return NULL;
  OK(shardrec_mesh_coords(mesh, &g, &sr, &rg, &rr));
  EXPECT(g == rank % 2 && sr == rank / 2 && rg == sr && rr == g);
  OK(shardrec_mesh_sharding_comm(&shard_comm, mesh));
  OK(shardrec_mesh_replica_comm(&replica_comm, mesh));
  if (rank == 0) {
    OK(shardrec_mesh_describe(mesh, &text, NULL));
    EXPECT(text && strstr(text, "replica groups") != NULL);
    shardrec_free(text);
  }
  OK(shardrec_optimizer_config_init(&opt, SHARDREC_OPTIMIZER_CONFIG_VERSION));
  opt.type = SHARDREC_OPTIMIZER_ADAGRAD; /* the plan's optimizer */
  OK(shardrec_mesh_embedding_create(&coll, mesh, g_plan, &opt, NULL));
  if (coll) {
    train_step(coll, rank, 0);
    OK(shardrec_mesh_step(mesh, coll, &synced));
    EXPECT(synced == 1);
    OK(shardrec_mesh_set_sync_hook(mesh, hook_avg, replica_comm));
    OK(shardrec_mesh_sync(mesh, coll, SHARDREC_SYNC_WEIGHTS_ONLY));
    OK(shardrec_mesh_set_sync_hook(mesh, NULL, NULL));
    OK(shardrec_mesh_sync_stats(mesh, &bytes, &collectives, &syncs));
    EXPECT(bytes > 0 && collectives >= 1 && syncs == 2);
    checkpoint_calls(coll, mesh);
  }
  shardrec_embedding_destroy(coll);
  shardrec_comm_destroy(shard_comm);
  shardrec_comm_destroy(replica_comm);
  shardrec_mesh_destroy(mesh);
  return NULL;
}

static void run_ranks(int n, void* (*fn)(void*)) {
  pthread_t t[4];
  int i;
  for (i = 0; i < n; ++i) pthread_create(&t[i], NULL, fn, (void*)(intptr_t)i);
  for (i = 0; i < n; ++i) pthread_join(t[i], NULL);
}

/* ---- inference.h ------------------------------------------------------------------------- */
/* Opens the checkpoint the mesh run left, looks up an empty batch, saves and reopens a serving
 * file, pins a snapshot, reloads and applies a row delta. */
static void test_inference(void) {
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  shardrec_table_storage_t ts = SHARDREC_TABLE_STORAGE_INIT;
  shardrec_inference_t* inf = NULL;
  shardrec_inference_version_t* ver = NULL;
  shardrec_kjt_view_t kjt = SHARDREC_KJT_VIEW_INIT;
  int32_t lengths[16] = {0}, storage = -1, dim32 = 0, seq = -1;
  float out[256];
  const float* data = NULL;
  const char* name = NULL;
  size_t nf = 0, nt = 0, count = 0;
  int64_t dim = 0, rows = 0, rows_id0 = 0;
  uint64_t v = 0;
  char path[300];
  OK(shardrec_inference_options_init(&o, SHARDREC_INFERENCE_OPTIONS_VERSION));
  ts.table = "big";
  ts.storage = SHARDREC_SERVING_INT8;
  o.table_storage = &ts;
  o.num_table_storage = 1;
  OK(shardrec_inference_open(g_ckpt_dir, &o, &inf));
  OK(shardrec_inference_num_features(inf, &nf));
  OK(shardrec_inference_num_tables(inf, &nt));
  OK(shardrec_inference_output_dim(inf, &dim));
  OK(shardrec_inference_is_sequence(inf, &seq));
  EXPECT(nf > 0 && nf <= 16 && nt > 0 && dim > 0 && dim <= 256 && seq == 0);
  OK(shardrec_inference_table_info(inf, 0, &name, &rows, &dim32, &storage));
  EXPECT(name != NULL && rows > 0 && dim32 > 0 && storage != SHARDREC_SERVING_AS_TRAINED);
  {
    /* "big" is served as int8: its rows have a scale and a bias. */
    const int64_t row0 = 0;
    float scale = -1.0f, bias = 0.0f;
    OK(shardrec_inference_row_scales(inf, "big", &row0, 1, &scale, &bias, &v));
    EXPECT(scale >= 0.0f && v == 1);
  }
  kjt.batch_size = 1;
  kjt.num_features = nf;
  kjt.lengths = lengths;
  kjt.num_lengths = nf;
  OK(shardrec_inference_lookup(inf, &kjt, out, (size_t)dim, &v));
  EXPECT(v == 1 && out[0] == 0.0f);
  OK(shardrec_inference_dense_tensor(inf, "dense.w", &data, &count, &v));
  EXPECT(count == 3 && data != NULL && data[0] == 1.5f);
  snprintf(path, sizeof(path), "%s/model.serving", g_ckpt_dir);
  OK(shardrec_inference_save(inf, path));
  OK(shardrec_inference_pin(inf, &ver));
  OK(shardrec_inference_reload(inf, g_ckpt_dir));
  OK(shardrec_inference_version(inf, &v));
  EXPECT(v == 2);
  memset(out, 0, sizeof(out));
  OK(shardrec_inference_apply_delta(inf, name, &rows_id0, out, 1, NULL, 0, &v));
  EXPECT(v == 3);
  EXPECT(shardrec_inference_apply_delta(inf, name, NULL, NULL, 0, &rows_id0, 1, NULL) ==
         SHARDREC_EINVAL);
  /* A fixed table takes no full delta. */
  EXPECT(shardrec_inference_apply_delta_ext(inf, name, &rows_id0, out, 1, NULL, 0,
                                            SHARDREC_DELTA_FULL, NULL) == SHARDREC_EINVAL);
  OK(shardrec_inference_snapshot_version(ver, &v));
  EXPECT(v == 1);
  OK(shardrec_inference_snapshot_lookup(ver, &kjt, out, (size_t)dim));
  OK(shardrec_inference_snapshot_dense_tensor(ver, "dense.w", &data, &count));
  EXPECT(count == 3 && data[2] == 0.25f);
  shardrec_inference_unpin(ver);
  shardrec_inference_destroy(inf);
  inf = NULL;
  OK(shardrec_inference_open(path, NULL, &inf));
  OK(shardrec_inference_lookup(inf, &kjt, out, (size_t)dim, NULL));
  shardrec_inference_destroy(inf);
  o.device_type = SHARDREC_DEVICE_CUDA;
  EXPECT(shardrec_inference_open(g_ckpt_dir, &o, &inf) == SHARDREC_EUNSUPPORTED);
  EXPECT(inf == NULL);
  shardrec_inference_destroy(NULL);
  shardrec_inference_unpin(NULL);
}

int main(void) {
  shardrec_comm_options_t options = SHARDREC_COMM_OPTIONS_INIT;
  int i;
  options.timeout_ms = 60000;
  test_common();
  test_comm();
  test_plan();
  test_dense_infer();
  snprintf(g_ckpt_dir, sizeof(g_ckpt_dir), "/tmp/shardrec_smoke_ckpt_%ld", (long)getpid());
  OK(shardrec_comm_create_local_group(g_group, 2, &options));
  g_plan = make_plan(2, SHARDREC_OPTIMIZER_ADAGRAD);
  if (g_plan && g_group[0]) run_ranks(2, embedding_rank);
  for (i = 0; i < 2; ++i) shardrec_comm_destroy(g_group[i]);
  OK(shardrec_comm_create_local_group(g_group, 4, &options));
  if (g_plan && g_group[0]) run_ranks(4, mesh_rank);
  for (i = 0; i < 4; ++i) shardrec_comm_destroy(g_group[i]);
  test_inference();
  shardrec_plan_destroy(g_plan);
  {
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_ckpt_dir);
    EXPECT(system(cmd) == 0);
  }
  shardrec_mesh_destroy(NULL);
  shardrec_embedding_destroy(NULL);
  if (g_failures) {
    fprintf(stderr, "capi_smoke: %d failure(s)\n", g_failures);
    return 1;
  }
  printf("capi_smoke: every public function called from C99, all checks passed\n");
  return 0;
}
