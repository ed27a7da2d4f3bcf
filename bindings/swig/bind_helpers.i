/* Marshalling helpers shared by the Java and Go bindings: C structs that hold pointers (plan
 * configs, KJT views) cannot be filled from those languages' own memory, so these calls take
 * flat arguments, build the structs on the C side and call the C API once. They add no
 * behaviour: every check and every error message still comes from libshardrec. */

%{
#include <stdlib.h>
#include <string.h>

/* Everything shardrec_plan_create needs, owned by C memory while the binding fills it. */
typedef struct shardrec_bind_plan_spec {
  shardrec_table_config_t* tables;
  size_t num_tables;
  shardrec_feature_config_t* features;
  size_t num_features;
  shardrec_table_constraints_t* constraints;
  size_t num_constraints;
  shardrec_topology_t topology;
  uint64_t* memory_bytes_per_rank;
  size_t num_memory_bytes_per_rank;
} shardrec_bind_plan_spec_t;

static char* sr_bind_strdup(const char* s) {
  if (s == NULL) return NULL;
  size_t n = strlen(s) + 1;
  char* copy = (char*)malloc(n);
  if (copy != NULL) memcpy(copy, s, n);
  return copy;
}

static void* sr_bind_memdup(const void* p, size_t bytes) {
  if (p == NULL || bytes == 0) return NULL;
  void* copy = malloc(bytes);
  if (copy != NULL) memcpy(copy, p, bytes);
  return copy;
}

static int sr_bind_grow(void** array, size_t count, size_t elem) {
  void* grown = realloc(*array, (count + 1) * elem);
  if (grown == NULL) return 0;
  *array = grown;
  return 1;
}

shardrec_bind_plan_spec_t* shardrec_bind_plan_spec_new(void) {
  shardrec_bind_plan_spec_t* spec =
      (shardrec_bind_plan_spec_t*)calloc(1, sizeof(shardrec_bind_plan_spec_t));
  if (spec != NULL) shardrec_topology_init(&spec->topology, SHARDREC_TOPOLOGY_VERSION);
  return spec;
}

void shardrec_bind_plan_spec_free(shardrec_bind_plan_spec_t* spec) {
  size_t i;
  if (spec == NULL) return;
  for (i = 0; i < spec->num_tables; ++i) {
    size_t k;
    free((void*)spec->tables[i].name);
    free((void*)spec->tables[i].features);
    free((void*)spec->tables[i].optimizer);
    free((void*)spec->tables[i].dynamic);
    for (k = 0; k < spec->tables[i].num_feature_names; ++k) {
      free((void*)spec->tables[i].feature_names[k]);
    }
    free((void*)spec->tables[i].feature_names);
  }
  for (i = 0; i < spec->num_features; ++i) free((void*)spec->features[i].name);
  for (i = 0; i < spec->num_constraints; ++i) {
    free((void*)spec->constraints[i].table);
    free((void*)spec->constraints[i].ranks);
    free((void*)spec->constraints[i].pooling_factors);
  }
  free(spec->tables);
  free(spec->features);
  free(spec->constraints);
  free(spec->memory_bytes_per_rank);
  free(spec);
}

shardrec_topology_t* shardrec_bind_plan_spec_topology(shardrec_bind_plan_spec_t* spec) {
  return spec == NULL ? NULL : &spec->topology;
}

shardrec_status_t shardrec_bind_plan_spec_add_feature(shardrec_bind_plan_spec_t* spec,
                                                      const char* name, float pooling_factor) {
  shardrec_feature_config_t* f;
  if (spec == NULL) return SHARDREC_EINVAL;
  if (!sr_bind_grow((void**)&spec->features, spec->num_features, sizeof(*f))) return SHARDREC_ENOMEM;
  f = &spec->features[spec->num_features++];
  shardrec_feature_config_init(f, SHARDREC_FEATURE_CONFIG_VERSION);
  f->name = sr_bind_strdup(name);
  f->pooling_factor = pooling_factor;
  return SHARDREC_OK;
}

shardrec_status_t shardrec_bind_plan_spec_add_table(
    shardrec_bind_plan_spec_t* spec, const char* name, int64_t rows, int32_t dim,
    int32_t pooling, int32_t dtype, const int32_t* features, size_t num_features,
    int32_t init_kind, float init_low, float init_high) {
  shardrec_table_config_t* t;
  if (spec == NULL) return SHARDREC_EINVAL;
  if (!sr_bind_grow((void**)&spec->tables, spec->num_tables, sizeof(*t))) return SHARDREC_ENOMEM;
  t = &spec->tables[spec->num_tables++];
  shardrec_table_config_init(t, SHARDREC_TABLE_CONFIG_VERSION);
  t->name = sr_bind_strdup(name);
  t->rows = rows;
  t->dim = dim;
  t->pooling = pooling;
  t->dtype = dtype;
  t->features = (const int32_t*)sr_bind_memdup(features, num_features * sizeof(int32_t));
  t->num_features = num_features;
  t->init_kind = init_kind;
  t->init_low = init_low;
  t->init_high = init_high;
  return SHARDREC_OK;
}

/* Gives the table added last its own optimizer (copied). */
shardrec_status_t shardrec_bind_plan_spec_set_table_optimizer(
    shardrec_bind_plan_spec_t* spec, const shardrec_optimizer_config_t* optimizer) {
  shardrec_table_config_t* t;
  if (spec == NULL || spec->num_tables == 0 || optimizer == NULL) return SHARDREC_EINVAL;
  t = &spec->tables[spec->num_tables - 1];
  free((void*)t->optimizer);
  t->optimizer = (const shardrec_optimizer_config_t*)sr_bind_memdup(optimizer, sizeof(*optimizer));
  return t->optimizer == NULL ? SHARDREC_ENOMEM : SHARDREC_OK;
}

/* Makes the table added last a dynamic table configured by @p dynamic (copied). */
shardrec_status_t shardrec_bind_plan_spec_set_table_dynamic(
    shardrec_bind_plan_spec_t* spec, const shardrec_dynamic_table_config_t* dynamic) {
  shardrec_table_config_t* t;
  if (spec == NULL || spec->num_tables == 0 || dynamic == NULL) return SHARDREC_EINVAL;
  t = &spec->tables[spec->num_tables - 1];
  free((void*)t->dynamic);
  t->dynamic = (const shardrec_dynamic_table_config_t*)sr_bind_memdup(dynamic, sizeof(*dynamic));
  return t->dynamic == NULL ? SHARDREC_ENOMEM : SHARDREC_OK;
}

/* Appends a feature, by name, to the table added last (instead of feature indices). */
shardrec_status_t shardrec_bind_plan_spec_add_table_feature_name(shardrec_bind_plan_spec_t* spec,
                                                                 const char* name) {
  shardrec_table_config_t* t;
  const char** names;
  if (spec == NULL || spec->num_tables == 0) return SHARDREC_EINVAL;
  t = &spec->tables[spec->num_tables - 1];
  names = (const char**)t->feature_names;
  if (!sr_bind_grow((void**)&names, t->num_feature_names, sizeof(*names))) return SHARDREC_ENOMEM;
  t->feature_names = names;
  names[t->num_feature_names++] = sr_bind_strdup(name);
  return SHARDREC_OK;
}

shardrec_status_t shardrec_bind_plan_spec_add_constraints(
    shardrec_bind_plan_spec_t* spec, const char* table, uint32_t sharding_types,
    int32_t min_partition, const int32_t* ranks, size_t num_ranks, const float* pooling_factors,
    size_t num_pooling_factors) {
  shardrec_table_constraints_t* c;
  if (spec == NULL) return SHARDREC_EINVAL;
  if (!sr_bind_grow((void**)&spec->constraints, spec->num_constraints, sizeof(*c))) {
    return SHARDREC_ENOMEM;
  }
  c = &spec->constraints[spec->num_constraints++];
  shardrec_table_constraints_init(c, SHARDREC_TABLE_CONSTRAINTS_VERSION);
  c->table = sr_bind_strdup(table);
  c->sharding_types = sharding_types;
  c->min_partition = min_partition;
  c->ranks = (const int32_t*)sr_bind_memdup(ranks, num_ranks * sizeof(int32_t));
  c->num_ranks = num_ranks;
  c->pooling_factors =
      (const float*)sr_bind_memdup(pooling_factors, num_pooling_factors * sizeof(float));
  c->num_pooling_factors = num_pooling_factors;
  return SHARDREC_OK;
}

/* The tier fields of the constraints added last (struct version 2): a tiered table. */
shardrec_status_t shardrec_bind_plan_spec_set_constraints_tier(shardrec_bind_plan_spec_t* spec,
                                                               int64_t tier_cache_bytes,
                                                               double tier_hit_rate,
                                                               double id_zipf_alpha) {
  shardrec_table_constraints_t* c;
  if (spec == NULL || spec->num_constraints == 0) return SHARDREC_EINVAL;
  c = &spec->constraints[spec->num_constraints - 1];
  c->tier_cache_bytes = (uint64_t)tier_cache_bytes;
  c->tier_hit_rate = tier_hit_rate;
  c->id_zipf_alpha = id_zipf_alpha;
  return SHARDREC_OK;
}

shardrec_status_t shardrec_bind_plan_spec_set_memory_bytes_per_rank(
    shardrec_bind_plan_spec_t* spec, const int64_t* bytes, size_t num_bytes) {
  if (spec == NULL) return SHARDREC_EINVAL;
  free(spec->memory_bytes_per_rank);
  spec->memory_bytes_per_rank = (uint64_t*)sr_bind_memdup(bytes, num_bytes * sizeof(int64_t));
  spec->num_memory_bytes_per_rank = num_bytes;
  return SHARDREC_OK;
}

shardrec_status_t shardrec_bind_plan_create(shardrec_plan_t** out,
                                            const shardrec_bind_plan_spec_t* spec) {
  shardrec_topology_t topology;
  if (spec == NULL) return shardrec_plan_create(out, NULL, 0, NULL, 0, NULL, NULL, 0);
  topology = spec->topology;
  topology.memory_bytes_per_rank = spec->memory_bytes_per_rank;
  topology.num_memory_bytes_per_rank = spec->num_memory_bytes_per_rank;
  return shardrec_plan_create(out, spec->tables, spec->num_tables, spec->features,
                              spec->num_features, &topology, spec->constraints,
                              spec->num_constraints);
}

static shardrec_kjt_view_t sr_bind_kjt(int64_t batch_size, size_t num_features,
                                       const int32_t* lengths, size_t num_lengths,
                                       const int64_t* values, size_t num_values,
                                       const float* weights, size_t num_weights) {
  shardrec_kjt_view_t kjt;
  memset(&kjt, 0, sizeof(kjt));
  kjt.batch_size = batch_size;
  kjt.num_features = num_features;
  kjt.lengths = lengths;
  kjt.num_lengths = num_lengths;
  kjt.values = values;
  kjt.values_dtype = SHARDREC_DTYPE_INT64;
  kjt.num_values = num_values;
  kjt.weights = num_weights > 0 ? weights : NULL;
  kjt.num_weights = num_weights;
  return kjt;
}

shardrec_status_t shardrec_bind_embedding_forward(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights, float* out, size_t out_len) {
  shardrec_kjt_view_t kjt = sr_bind_kjt(batch_size, num_features, lengths, num_lengths, values,
                                        num_values, weights, num_weights);
  return shardrec_embedding_forward(coll, &kjt, out, out_len, NULL);
}

shardrec_status_t shardrec_bind_embedding_input_dist_start(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights) {
  shardrec_kjt_view_t kjt = sr_bind_kjt(batch_size, num_features, lengths, num_lengths, values,
                                        num_values, weights, num_weights);
  return shardrec_embedding_input_dist_start(coll, &kjt, NULL);
}

/* A host FLOAT32 view of @p data with @p ndim extents, or SHARDREC_EINVAL when they do not
   multiply to @p len (the C API trusts a view's shape). The callers below then still make the
   collective call, with no view: the library refuses it on this rank and every other rank learns
   of the refusal in the same call, as for any bad argument (docs/semantics.md), instead of the
   other ranks pairing their call with this rank's next one. */
static shardrec_status_t sr_bind_view(shardrec_tensor_view_t* v, const float* data, size_t len,
                                      const int64_t* shape, size_t ndim) {
  size_t i;
  int64_t elems = 1;
  memset(v, 0, sizeof(*v));
  v->data = (void*)data;
  v->dtype = SHARDREC_DTYPE_FLOAT32;
  v->device_type = SHARDREC_DEVICE_HOST;
  /* More extents than a view holds: passed on as ndim so that the library rejects it. */
  v->ndim = ndim > (size_t)SHARDREC_TENSOR_MAX_DIMS + 1 ? SHARDREC_TENSOR_MAX_DIMS + 1 : (int32_t)ndim;
  for (i = 0; i < ndim && i < SHARDREC_TENSOR_MAX_DIMS; ++i) {
    v->shape[i] = shape[i];
    if (shape[i] < 0 || (shape[i] > 0 && elems > INT64_MAX / shape[i])) return SHARDREC_EINVAL;
    elems *= shape[i];
  }
  if (ndim <= SHARDREC_TENSOR_MAX_DIMS && (uint64_t)elems != (uint64_t)len) return SHARDREC_EINVAL;
  return SHARDREC_OK;
}

/* shardrec_embedding_forward_tensor with a host view of @p out shaped by @p shape. */
shardrec_status_t shardrec_bind_embedding_forward_tensor(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights, float* out, size_t out_len, const int64_t* shape, size_t ndim) {
  shardrec_tensor_view_t v;
  shardrec_kjt_view_t kjt = sr_bind_kjt(batch_size, num_features, lengths, num_lengths, values,
                                        num_values, weights, num_weights);
  shardrec_status_t rc = sr_bind_view(&v, out, out_len, shape, ndim);
  return shardrec_embedding_forward_tensor(coll, &kjt, rc == SHARDREC_OK ? &v : NULL, NULL);
}

shardrec_status_t shardrec_bind_embedding_forward_distributed_tensor(
    shardrec_embedding_t* coll, float* out, size_t out_len, const int64_t* shape, size_t ndim) {
  shardrec_tensor_view_t v;
  shardrec_status_t rc = sr_bind_view(&v, out, out_len, shape, ndim);
  return shardrec_embedding_forward_distributed_tensor(coll, rc == SHARDREC_OK ? &v : NULL, NULL);
}

shardrec_status_t shardrec_bind_embedding_backward_tensor(shardrec_embedding_t* coll,
                                                          const float* grad, size_t grad_len,
                                                          const int64_t* shape, size_t ndim) {
  shardrec_tensor_view_t v;
  shardrec_status_t rc = sr_bind_view(&v, grad, grad_len, shape, ndim);
  return shardrec_embedding_backward_tensor(coll, rc == SHARDREC_OK ? &v : NULL, NULL);
}

/* The loaded CUDA plugin's path as library-allocated text (freed with shardrec_free by the
   language typemap): shardrec_device_plugin_path asked for the length, then for the bytes. */
shardrec_status_t shardrec_bind_device_plugin_path(char** text_out, size_t* len_out) {
  size_t len = 0;
  char* text;
  shardrec_status_t rc = shardrec_device_plugin_path(&len, NULL, 0);
  if (rc != SHARDREC_OK) return rc;
  text = (char*)malloc(len + 1);
  if (text == NULL) return SHARDREC_ENOMEM;
  rc = shardrec_device_plugin_path(&len, text, len + 1);
  if (rc != SHARDREC_OK) {
    free(text);
    return rc;
  }
  *text_out = text;
  *len_out = len;
  return SHARDREC_OK;
}

/* Dense tensors of a checkpoint, given as one flat buffer (tensors one after another), their
   counts and their names joined with '\n' (the language layer refuses names holding '\n').
   @p mesh NULL uses the 1D save/load; @p load 0 saves, 1 loads (the flat buffer is then
   written). Everything is built here and the C API is called once. */
shardrec_status_t shardrec_bind_checkpoint(shardrec_mesh_t* mesh, shardrec_embedding_t* coll,
                                           const char* dir, const shardrec_checkpoint_options_t* options,
                                           const char* dense_names, const int64_t* counts,
                                           size_t num_counts, float* flat, int32_t load) {
  shardrec_checkpoint_options_t o;
  shardrec_dense_tensor_t* dense = NULL;
  char* names = NULL;
  size_t i, offset = 0;
  shardrec_status_t rc;
  if (options == NULL) return SHARDREC_EINVAL;
  o = *options;
  if (num_counts > 0) {
    char* cursor;
    if (dense_names == NULL || counts == NULL) return SHARDREC_EINVAL;
    dense = (shardrec_dense_tensor_t*)calloc(num_counts, sizeof(*dense));
    names = sr_bind_strdup(dense_names);
    if (dense == NULL || names == NULL) {
      free(dense);
      free(names);
      return SHARDREC_ENOMEM;
    }
    cursor = names;
    for (i = 0; i < num_counts; ++i) {
      char* end = strchr(cursor, '\n');
      if (end != NULL) *end = '\0';
      dense[i].name = cursor;
      dense[i].count = counts[i] > 0 ? (size_t)counts[i] : 0;
      dense[i].data = dense[i].count > 0 ? flat + offset : NULL;
      offset += dense[i].count;
      cursor = end != NULL ? end + 1 : cursor + strlen(cursor);
    }
  }
  o.dense = dense;
  o.num_dense = num_counts;
  if (mesh != NULL) {
    rc = load ? shardrec_checkpoint_load_mesh(mesh, coll, dir, &o)
              : shardrec_checkpoint_save_mesh(mesh, coll, dir, &o);
  } else {
    rc = load ? shardrec_checkpoint_load(coll, dir, &o) : shardrec_checkpoint_save(coll, dir, &o);
  }
  free(dense);
  free(names);
  return rc;
}

/* The tiered tables of a collection's options (shardrec_table_tier_t, embedding_options.h),
   owned by C memory while the binding fills them; apply points the options at them (they must
   outlive the create call that reads the options). */
typedef struct shardrec_bind_tiers {
  shardrec_table_tier_t* tiers;
  size_t num;
} shardrec_bind_tiers_t;

shardrec_bind_tiers_t* shardrec_bind_tiers_new(void) {
  return (shardrec_bind_tiers_t*)calloc(1, sizeof(shardrec_bind_tiers_t));
}

void shardrec_bind_tiers_free(shardrec_bind_tiers_t* t) {
  size_t i;
  if (t == NULL) return;
  for (i = 0; i < t->num; ++i) {
    free((void*)t->tiers[i].table);
    free((void*)t->tiers[i].dir);
  }
  free(t->tiers);
  free(t);
}

shardrec_status_t shardrec_bind_tiers_add(shardrec_bind_tiers_t* t, const char* table,
                                          const char* dir, int64_t cache_bytes) {
  shardrec_table_tier_t* e;
  if (t == NULL) return SHARDREC_EINVAL;
  if (!sr_bind_grow((void**)&t->tiers, t->num, sizeof(*e))) return SHARDREC_ENOMEM;
  e = &t->tiers[t->num++];
  shardrec_table_tier_init(e, SHARDREC_TABLE_TIER_VERSION);
  e->table = sr_bind_strdup(table);
  e->dir = sr_bind_strdup(dir);
  e->cache_bytes = cache_bytes;
  return SHARDREC_OK;
}

shardrec_status_t shardrec_bind_tiers_apply(const shardrec_bind_tiers_t* t,
                                            shardrec_embedding_options_t* options) {
  if (t == NULL || options == NULL) return SHARDREC_EINVAL;
  options->tiers = t->tiers;
  options->num_tiers = t->num;
  return SHARDREC_OK;
}
%}

typedef struct shardrec_bind_tiers shardrec_bind_tiers_t;
shardrec_bind_tiers_t* shardrec_bind_tiers_new(void);
void shardrec_bind_tiers_free(shardrec_bind_tiers_t* t);
shardrec_status_t shardrec_bind_tiers_add(shardrec_bind_tiers_t* t, const char* table,
                                          const char* dir, int64_t cache_bytes);
shardrec_status_t shardrec_bind_tiers_apply(const shardrec_bind_tiers_t* t,
                                            shardrec_embedding_options_t* options);

typedef struct shardrec_bind_plan_spec shardrec_bind_plan_spec_t;
shardrec_bind_plan_spec_t* shardrec_bind_plan_spec_new(void);
void shardrec_bind_plan_spec_free(shardrec_bind_plan_spec_t* spec);
shardrec_topology_t* shardrec_bind_plan_spec_topology(shardrec_bind_plan_spec_t* spec);
shardrec_status_t shardrec_bind_plan_spec_add_feature(shardrec_bind_plan_spec_t* spec,
                                                      const char* name, float pooling_factor);
shardrec_status_t shardrec_bind_plan_spec_add_table(
    shardrec_bind_plan_spec_t* spec, const char* name, int64_t rows, int32_t dim,
    int32_t pooling, int32_t dtype, const int32_t* features, size_t num_features,
    int32_t init_kind, float init_low, float init_high);
shardrec_status_t shardrec_bind_plan_spec_set_table_optimizer(
    shardrec_bind_plan_spec_t* spec, const shardrec_optimizer_config_t* optimizer);
shardrec_status_t shardrec_bind_plan_spec_set_table_dynamic(
    shardrec_bind_plan_spec_t* spec, const shardrec_dynamic_table_config_t* dynamic);
shardrec_status_t shardrec_bind_plan_spec_add_table_feature_name(shardrec_bind_plan_spec_t* spec,
                                                                 const char* name);
shardrec_status_t shardrec_bind_plan_spec_add_constraints(
    shardrec_bind_plan_spec_t* spec, const char* table, uint32_t sharding_types,
    int32_t min_partition, const int32_t* ranks, size_t num_ranks, const float* pooling_factors,
    size_t num_pooling_factors);
shardrec_status_t shardrec_bind_plan_spec_set_memory_bytes_per_rank(
    shardrec_bind_plan_spec_t* spec, const int64_t* bytes, size_t num_bytes);
shardrec_status_t shardrec_bind_plan_spec_set_constraints_tier(shardrec_bind_plan_spec_t* spec,
                                                               int64_t tier_cache_bytes,
                                                               double tier_hit_rate,
                                                               double id_zipf_alpha);
shardrec_status_t shardrec_bind_plan_create(shardrec_plan_t** out,
                                            const shardrec_bind_plan_spec_t* spec);
shardrec_status_t shardrec_bind_embedding_forward(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights, float* out, size_t out_len);
shardrec_status_t shardrec_bind_embedding_input_dist_start(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights);
/* The flat dense buffer is a language float buffer (Java: direct FloatBuffer, Go: []float32). */
%apply float* RAWF { float* flat };
shardrec_status_t shardrec_bind_device_plugin_path(char** text_out, size_t* len_out);
shardrec_status_t shardrec_bind_checkpoint(shardrec_mesh_t* mesh, shardrec_embedding_t* coll,
                                           const char* dir, const shardrec_checkpoint_options_t* options,
                                           const char* dense_names, const int64_t* counts,
                                           size_t num_counts, float* flat, int32_t load);
shardrec_status_t shardrec_bind_embedding_forward_tensor(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights, float* out, size_t out_len, const int64_t* shape, size_t ndim);
shardrec_status_t shardrec_bind_embedding_forward_distributed_tensor(
    shardrec_embedding_t* coll, float* out, size_t out_len, const int64_t* shape, size_t ndim);
shardrec_status_t shardrec_bind_embedding_backward_tensor(shardrec_embedding_t* coll,
                                                          const float* grad, size_t grad_len,
                                                          const int64_t* shape, size_t ndim);
