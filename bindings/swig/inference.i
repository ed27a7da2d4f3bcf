/* The serving side (shardrec/inference.h) for the Java and Go bindings. Plain calls are bound
 * directly; open (its options hold an array of per-table overrides) and the lookups (a KJT view)
 * go through the helpers here, which build the C arguments and call the C API once. Every check
 * and every error message still comes from libshardrec.
 *
 * shardrec_inference_dense_tensor is not offered: its pointer may be freed by a reload running
 * on another thread, which neither Java nor Go can rule out; both read dense tensors through a
 * pinned snapshot (shardrec_inference_snapshot_dense_tensor) instead. */

%{
#include "shardrec/inference.h"

/* shardrec_inference_open with the per-table overrides given flat: @p table_names holds one
   name per override, joined with '\n' (the language layer refuses names holding '\n'), and
   @p storages the storage of each. */
static shardrec_status_t sr_bind_inference_open(
    shardrec_inference_t** out, const char* path, int32_t default_storage, int32_t bounds_policy,
    int32_t device_type, const char* table_names, const int32_t* storages, size_t num_storages,
    const shardrec_serving_tier_t* tiers, size_t num_tiers) {
  shardrec_inference_options_t o;
  shardrec_table_storage_t* per_table = NULL;
  char* names = NULL;
  size_t i;
  shardrec_status_t rc = shardrec_inference_options_init(&o, SHARDREC_INFERENCE_OPTIONS_VERSION);
  if (rc != SHARDREC_OK) return rc;
  o.default_storage = default_storage;
  o.bounds_policy = bounds_policy;
  o.device_type = device_type;
  if (num_storages > 0) {
    char* cursor;
    if (table_names == NULL || storages == NULL) return SHARDREC_EINVAL;
    per_table = (shardrec_table_storage_t*)calloc(num_storages, sizeof(*per_table));
    names = sr_bind_strdup(table_names);
    if (per_table == NULL || names == NULL) {
      free(per_table);
      free(names);
      return SHARDREC_ENOMEM;
    }
    cursor = names;
    for (i = 0; i < num_storages; ++i) {
      char* end = strchr(cursor, '\n');
      if (end != NULL) *end = '\0';
      per_table[i].version = SHARDREC_TABLE_STORAGE_VERSION;
      per_table[i].table = cursor;
      per_table[i].storage = storages[i];
      cursor = end != NULL ? end + 1 : cursor + strlen(cursor);
    }
  }
  o.table_storage = per_table;
  o.num_table_storage = num_storages;
  o.tiers = tiers;
  o.num_tiers = num_tiers;
  rc = shardrec_inference_open(path, &o, out);
  free(per_table);
  free(names);
  return rc;
}

shardrec_status_t shardrec_bind_inference_open(shardrec_inference_t** out, const char* path,
                                               int32_t default_storage, int32_t bounds_policy,
                                               int32_t device_type, const char* table_names,
                                               const int32_t* storages, size_t num_storages) {
  return sr_bind_inference_open(out, path, default_storage, bounds_policy, device_type,
                                table_names, storages, num_storages, NULL, 0);
}

/* shardrec_bind_inference_open plus tables served from the checkpoint's files
   (shardrec_serving_tier_t): @p tier_tables holds one name per tier, joined with '\n', and
   @p cache_bytes the cache of each. */
shardrec_status_t shardrec_bind_inference_open_tiered(
    shardrec_inference_t** out, const char* path, int32_t default_storage, int32_t bounds_policy,
    int32_t device_type, const char* table_names, const int32_t* storages, size_t num_storages,
    const char* tier_tables, const int64_t* cache_bytes, size_t num_tiers) {
  shardrec_serving_tier_t* tiers = NULL;
  char* names = NULL;
  char* cursor;
  size_t i;
  shardrec_status_t rc;
  if (num_tiers > 0) {
    if (tier_tables == NULL || cache_bytes == NULL) return SHARDREC_EINVAL;
    tiers = (shardrec_serving_tier_t*)calloc(num_tiers, sizeof(*tiers));
    names = sr_bind_strdup(tier_tables);
    if (tiers == NULL || names == NULL) {
      free(tiers);
      free(names);
      return SHARDREC_ENOMEM;
    }
    cursor = names;
    for (i = 0; i < num_tiers; ++i) {
      char* end = strchr(cursor, '\n');
      if (end != NULL) *end = '\0';
      shardrec_serving_tier_init(&tiers[i], SHARDREC_SERVING_TIER_VERSION);
      tiers[i].table = cursor;
      /* A negative size reaches C as a huge one, which C refuses as no memory to hold. */
      tiers[i].cache_bytes = (uint64_t)cache_bytes[i];
      cursor = end != NULL ? end + 1 : cursor + strlen(cursor);
    }
  }
  rc = sr_bind_inference_open(out, path, default_storage, bounds_policy, device_type, table_names,
                              storages, num_storages, tiers, num_tiers);
  free(tiers);
  free(names);
  return rc;
}

shardrec_status_t shardrec_bind_inference_lookup(
    const shardrec_inference_t* inf, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, float* out, size_t out_len, uint64_t* version_out) {
  shardrec_kjt_view_t kjt = sr_bind_kjt(batch_size, num_features, lengths, num_lengths, values,
                                        num_values, weights, num_weights);
  return shardrec_inference_lookup(inf, &kjt, out, out_len, version_out);
}

shardrec_status_t shardrec_bind_inference_snapshot_lookup(
    const shardrec_inference_version_t* ver, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, float* out, size_t out_len) {
  shardrec_kjt_view_t kjt = sr_bind_kjt(batch_size, num_features, lengths, num_lengths, values,
                                        num_values, weights, num_weights);
  return shardrec_inference_snapshot_lookup(ver, &kjt, out, out_len);
}
%}

%ignore shardrec_table_storage;
%ignore shardrec_inference_options;
%ignore shardrec_inference_options_init;
%ignore SHARDREC_TABLE_STORAGE_INIT;
%ignore SHARDREC_INFERENCE_OPTIONS_INIT;
/* Tiers are built in C by shardrec_bind_inference_open_tiered. */
%ignore shardrec_serving_tier;
%ignore shardrec_serving_tier_init;
%ignore SHARDREC_SERVING_TIER_INIT;
%ignore SHARDREC_SERVING_TIER_STATS_INIT;
%ignore shardrec_inference_open;
%ignore shardrec_inference_lookup;
%ignore shardrec_inference_snapshot_lookup;
%ignore shardrec_inference_lookup_vbe;
%ignore shardrec_inference_snapshot_lookup_vbe;
%ignore shardrec_inference_vbe_output_len;
%ignore shardrec_inference_dense_tensor;

/* Out-parameters of table_info and the snapshot's dense tensors (each language defines the
   typemaps named here). */
%apply const char** name_out { const char** name };
%apply int64_t* OUT { int64_t* rows };
%apply int32_t* OUT { int32_t* dim, int32_t* storage };
%apply uint64_t* OUT { uint64_t* version_out };
%apply size_t* OUT { size_t* count };
%apply const float** ADDR { const float** data };

%include "shardrec/inference.h"

%clear const char** name;
%clear int64_t* rows;
%clear int32_t* dim, int32_t* storage;
%clear size_t* count;
%clear const float** data;

shardrec_status_t shardrec_bind_inference_open(shardrec_inference_t** out, const char* path,
                                               int32_t default_storage, int32_t bounds_policy,
                                               int32_t device_type, const char* table_names,
                                               const int32_t* storages, size_t num_storages);
shardrec_status_t shardrec_bind_inference_open_tiered(
    shardrec_inference_t** out, const char* path, int32_t default_storage, int32_t bounds_policy,
    int32_t device_type, const char* table_names, const int32_t* storages, size_t num_storages,
    const char* tier_tables, const int64_t* cache_bytes, size_t num_tiers);
shardrec_status_t shardrec_bind_inference_lookup(
    const shardrec_inference_t* inf, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, float* out, size_t out_len, uint64_t* version_out);
shardrec_status_t shardrec_bind_inference_snapshot_lookup(
    const shardrec_inference_version_t* ver, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, float* out, size_t out_len);
%clear uint64_t* version_out;
