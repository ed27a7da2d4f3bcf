/* The dense side (shardrec/dense.h, shardrec/ddp.h) for the Java and Go bindings. Calls that
 * take plain buffers are bound directly (each language maps the raw float pointers named below
 * to its own buffers and checks their sizes); calls whose arguments hold pointers (option
 * structs with arrays, parameter views, ready callbacks, float** outputs) go through the
 * helpers here, which build the C arguments and call the C API once. As in bind_helpers.i,
 * every check and every error message still comes from libshardrec. */

%{
#include "shardrec/dense.h"
#include "shardrec/ddp.h"

/* The tensors a dense optimizer steps over: layers, resolved at each step (their gradients
   may have been rebound to bucket storage in between). */
typedef struct shardrec_bind_param_list {
  shardrec_mlp_t** mlps;
  shardrec_dcn_t** dcns;
  int* kinds; /* 0: mlps[index[i]], 1: dcns[index[i]] */
  size_t* index;
  size_t num_layers, num_mlps, num_dcns;
} shardrec_bind_param_list_t;

shardrec_bind_param_list_t* shardrec_bind_param_list_new(void) {
  return (shardrec_bind_param_list_t*)calloc(1, sizeof(shardrec_bind_param_list_t));
}

void shardrec_bind_param_list_free(shardrec_bind_param_list_t* list) {
  if (list == NULL) return;
  free(list->mlps);
  free(list->dcns);
  free(list->kinds);
  free(list->index);
  free(list);
}

static shardrec_status_t sr_bind_param_list_push(shardrec_bind_param_list_t* list, int kind,
                                                 size_t index) {
  if (!sr_bind_grow((void**)&list->kinds, list->num_layers, sizeof(int)) ||
      !sr_bind_grow((void**)&list->index, list->num_layers, sizeof(size_t))) {
    return SHARDREC_ENOMEM;
  }
  list->kinds[list->num_layers] = kind;
  list->index[list->num_layers] = index;
  list->num_layers++;
  return SHARDREC_OK;
}

/* Appends every tensor of @p mlp (the list borrows the handle). */
shardrec_status_t shardrec_bind_param_list_add_mlp(shardrec_bind_param_list_t* list,
                                                   shardrec_mlp_t* mlp) {
  if (list == NULL || mlp == NULL) return SHARDREC_EINVAL;
  if (!sr_bind_grow((void**)&list->mlps, list->num_mlps, sizeof(*list->mlps))) {
    return SHARDREC_ENOMEM;
  }
  list->mlps[list->num_mlps] = mlp;
  if (sr_bind_param_list_push(list, 0, list->num_mlps) != SHARDREC_OK) return SHARDREC_ENOMEM;
  list->num_mlps++;
  return SHARDREC_OK;
}

/* Appends every tensor of @p dcn (the list borrows the handle). */
shardrec_status_t shardrec_bind_param_list_add_dcn(shardrec_bind_param_list_t* list,
                                                   shardrec_dcn_t* dcn) {
  if (list == NULL || dcn == NULL) return SHARDREC_EINVAL;
  if (!sr_bind_grow((void**)&list->dcns, list->num_dcns, sizeof(*list->dcns))) {
    return SHARDREC_ENOMEM;
  }
  list->dcns[list->num_dcns] = dcn;
  if (sr_bind_param_list_push(list, 1, list->num_dcns) != SHARDREC_OK) return SHARDREC_ENOMEM;
  list->num_dcns++;
  return SHARDREC_OK;
}

/* Calls shardrec_dense_optimizer_step over every tensor of the list, in list order. */
shardrec_status_t shardrec_bind_dense_optimizer_step(shardrec_dense_optimizer_t* opt,
                                                     const shardrec_bind_param_list_t* list) {
  shardrec_dense_param_t* tensors = NULL;
  size_t n = 0, l, i;
  shardrec_status_t rc = SHARDREC_OK;
  if (list == NULL) return shardrec_dense_optimizer_step(opt, NULL, 0);
  for (l = 0; l < list->num_layers && rc == SHARDREC_OK; ++l) {
    size_t count = 0;
    rc = list->kinds[l] == 0 ? shardrec_mlp_num_tensors(list->mlps[list->index[l]], &count)
                             : shardrec_dcn_num_tensors(list->dcns[list->index[l]], &count);
    for (i = 0; i < count && rc == SHARDREC_OK; ++i) {
      if (!sr_bind_grow((void**)&tensors, n, sizeof(*tensors))) {
        rc = SHARDREC_ENOMEM;
        break;
      }
      rc = list->kinds[l] == 0 ? shardrec_mlp_tensor(list->mlps[list->index[l]], i, &tensors[n])
                               : shardrec_dcn_tensor(list->dcns[list->index[l]], i, &tensors[n]);
      ++n;
    }
  }
  if (rc == SHARDREC_OK) rc = shardrec_dense_optimizer_step(opt, tensors, n);
  free(tensors);
  return rc;
}

/* An MLP placed on @p device_type / @p device_index with @p math (shardrec_dense_math_t) on the
   default stream: the languages hold host buffers only, so they create CUDA MLPs (for their
   tensors and the documented errors) but refuse forward/backward on them themselves. */
shardrec_status_t shardrec_bind_mlp_create_on(shardrec_mlp_t** out, int64_t in_features,
                                              const int64_t* widths, size_t num_widths,
                                              const int32_t* activations, size_t num_activations,
                                              uint64_t seed, const char* name,
                                              int32_t device_type, int32_t device_index,
                                              int32_t math) {
  shardrec_mlp_options_t o;
  shardrec_status_t rc = shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION);
  if (rc != SHARDREC_OK) return rc;
  o.in_features = in_features;
  o.out_features = widths;
  o.num_layers = (int32_t)num_widths;
  /* The language layer checks that a given list has one activation per layer. */
  o.activations = num_activations > 0 ? activations : NULL;
  o.seed = seed;
  o.name = name;
  o.device_type = device_type;
  o.device_index = device_index;
  o.math = math;
  return shardrec_mlp_create(out, &o);
}

shardrec_status_t shardrec_bind_mlp_create(shardrec_mlp_t** out, int64_t in_features,
                                           const int64_t* widths, size_t num_widths,
                                           const int32_t* activations, size_t num_activations,
                                           uint64_t seed, const char* name) {
  return shardrec_bind_mlp_create_on(out, in_features, widths, num_widths, activations,
                                     num_activations, seed, name, SHARDREC_DEVICE_HOST, 0,
                                     SHARDREC_DENSE_MATH_FP32);
}

/* What a ready callback needs to forward each final gradient to a bucketer. */
typedef struct sr_bind_ready {
  shardrec_ddp_t* ddp;
  size_t first;
  shardrec_status_t status;
} sr_bind_ready_t;

static void sr_bind_on_ready(size_t tensor, void* user) {
  sr_bind_ready_t* r = (sr_bind_ready_t*)user;
  shardrec_status_t rc = shardrec_ddp_mark_ready(r->ddp, r->first + tensor);
  if (rc != SHARDREC_OK && r->status == SHARDREC_OK) r->status = rc;
}

/* Backward; with @p ddp not NULL each tensor i is marked ready as bucket tensor first + i as
   soon as its gradient is final (the first failing mark_ready status is returned). */
shardrec_status_t shardrec_bind_mlp_backward(shardrec_mlp_t* mlp, const float* dy, float* dx,
                                             shardrec_ddp_t* ddp, size_t first) {
  sr_bind_ready_t r;
  shardrec_status_t rc;
  r.ddp = ddp;
  r.first = first;
  r.status = SHARDREC_OK;
  rc = shardrec_mlp_backward(mlp, dy, dx, ddp != NULL ? sr_bind_on_ready : NULL, &r);
  return rc != SHARDREC_OK ? rc : r.status;
}

shardrec_status_t shardrec_bind_dcn_backward(shardrec_dcn_t* dcn, const float* dy, float* dx0,
                                             shardrec_ddp_t* ddp, size_t first) {
  sr_bind_ready_t r;
  shardrec_status_t rc;
  r.ddp = ddp;
  r.first = first;
  r.status = SHARDREC_OK;
  rc = shardrec_dcn_backward(dcn, dy, dx0, ddp != NULL ? sr_bind_on_ready : NULL, &r);
  return rc != SHARDREC_OK ? rc : r.status;
}

/* Points the gradient of every tensor i of the layer at the bucketer's tensor first + i. */
shardrec_status_t shardrec_bind_mlp_use_ddp_grads(shardrec_mlp_t* mlp, const shardrec_ddp_t* ddp,
                                                  size_t first) {
  size_t n = 0, i;
  shardrec_status_t rc = shardrec_mlp_num_tensors(mlp, &n);
  for (i = 0; i < n && rc == SHARDREC_OK; ++i) {
    float* g = NULL;
    rc = shardrec_ddp_grad(ddp, first + i, &g);
    if (rc == SHARDREC_OK) rc = shardrec_mlp_bind_tensor(mlp, i, NULL, g);
  }
  return rc;
}

shardrec_status_t shardrec_bind_dcn_use_ddp_grads(shardrec_dcn_t* dcn, const shardrec_ddp_t* ddp,
                                                  size_t first) {
  size_t n = 0, i;
  shardrec_status_t rc = shardrec_dcn_num_tensors(dcn, &n);
  for (i = 0; i < n && rc == SHARDREC_OK; ++i) {
    float* g = NULL;
    rc = shardrec_ddp_grad(ddp, first + i, &g);
    if (rc == SHARDREC_OK) rc = shardrec_dcn_bind_tensor(dcn, i, NULL, g);
  }
  return rc;
}

/* Name and element count of a layer's tensor. */
shardrec_status_t shardrec_bind_mlp_tensor_info(const shardrec_mlp_t* mlp, size_t index,
                                                const char** name_out, int64_t* count_out) {
  shardrec_dense_param_t t;
  shardrec_status_t rc = shardrec_mlp_tensor(mlp, index, &t);
  if (rc != SHARDREC_OK) return rc;
  *name_out = t.name;
  *count_out = t.count;
  return SHARDREC_OK;
}

shardrec_status_t shardrec_bind_dcn_tensor_info(const shardrec_dcn_t* dcn, size_t index,
                                                const char** name_out, int64_t* count_out) {
  shardrec_dense_param_t t;
  shardrec_status_t rc = shardrec_dcn_tensor(dcn, index, &t);
  if (rc != SHARDREC_OK) return rc;
  *name_out = t.name;
  *count_out = t.count;
  return SHARDREC_OK;
}

/* Copies between a tensor (which 0: parameters, 1: gradients) and a caller buffer of exactly
   its element count; to_tensor 0 reads the tensor into buf, 1 writes buf into the tensor. The
   language layer checks buf's length against the count first. */
static shardrec_status_t sr_bind_copy(const shardrec_dense_param_t* t, int32_t which, float* buf,
                                      int32_t to_tensor) {
  float* p = which == 0 ? t->param : t->grad;
  if (p == NULL || buf == NULL || which < 0 || which > 1) return SHARDREC_EINVAL;
  if (to_tensor) {
    memcpy(p, buf, sizeof(float) * (size_t)t->count);
  } else {
    memcpy(buf, p, sizeof(float) * (size_t)t->count);
  }
  return SHARDREC_OK;
}

shardrec_status_t shardrec_bind_mlp_copy_tensor(shardrec_mlp_t* mlp, size_t index, int32_t which,
                                                float* buf, int32_t to_tensor) {
  shardrec_dense_param_t t;
  int32_t device_type = SHARDREC_DEVICE_HOST;
  shardrec_status_t rc = shardrec_mlp_device(mlp, &device_type, NULL);
  /* A CUDA MLP's tensors are device pointers: a host memcpy would crash. The status is
     EINVAL; the message comes from the language layer, which checks the device first. */
  if (rc == SHARDREC_OK && device_type != SHARDREC_DEVICE_HOST) return SHARDREC_EINVAL;
  if (rc == SHARDREC_OK) rc = shardrec_mlp_tensor(mlp, index, &t);
  return rc != SHARDREC_OK ? rc : sr_bind_copy(&t, which, buf, to_tensor);
}

shardrec_status_t shardrec_bind_dcn_copy_tensor(shardrec_dcn_t* dcn, size_t index, int32_t which,
                                                float* buf, int32_t to_tensor) {
  shardrec_dense_param_t t;
  shardrec_status_t rc = shardrec_dcn_tensor(dcn, index, &t);
  return rc != SHARDREC_OK ? rc : sr_bind_copy(&t, which, buf, to_tensor);
}

shardrec_status_t shardrec_bind_ddp_create(shardrec_ddp_t** out, shardrec_comm_t* comm,
                                           const int64_t* counts, size_t num_counts,
                                           int64_t first_bucket_bytes, int64_t bucket_cap_bytes,
                                           int32_t compression) {
  shardrec_ddp_options_t o;
  shardrec_status_t rc = shardrec_ddp_options_init(&o, SHARDREC_DDP_OPTIONS_VERSION);
  if (rc != SHARDREC_OK) return rc;
  o.first_bucket_bytes = first_bucket_bytes;
  o.bucket_cap_bytes = bucket_cap_bytes;
  o.compression = compression;
  return shardrec_ddp_create(out, comm, counts, num_counts, &o);
}

shardrec_status_t shardrec_bind_ddp_stats(const shardrec_ddp_t* ddp, int64_t* steps_out,
                                          int64_t* buckets_out, double* comm_seconds_out,
                                          double* exposed_seconds_out, int64_t* bytes_out64) {
  shardrec_ddp_stats_t s;
  shardrec_status_t rc = shardrec_ddp_stats(ddp, &s);
  if (rc != SHARDREC_OK) return rc;
  *steps_out = s.steps;
  *buckets_out = s.buckets;
  *comm_seconds_out = s.comm_seconds;
  *exposed_seconds_out = s.exposed_seconds;
  *bytes_out64 = s.bytes_reduced;
  return SHARDREC_OK;
}

/* Number of tensors of bucket @p bucket. */
shardrec_status_t shardrec_bind_ddp_bucket_size(const shardrec_ddp_t* ddp, size_t bucket,
                                                size_t* size_out) {
  return shardrec_ddp_bucket(ddp, bucket, NULL, 0, size_out);
}

/* Tensor @p position of bucket @p bucket. */
shardrec_status_t shardrec_bind_ddp_bucket_tensor(const shardrec_ddp_t* ddp, size_t bucket,
                                                  size_t position, size_t* tensor_out) {
  size_t size = 0, *all;
  shardrec_status_t rc = shardrec_ddp_bucket(ddp, bucket, NULL, 0, &size);
  if (rc != SHARDREC_OK) return rc;
  if (position >= size) return shardrec_ddp_bucket(ddp, (size_t)-1, NULL, 0, &size);
  all = (size_t*)malloc(sizeof(size_t) * size);
  if (all == NULL) return SHARDREC_ENOMEM;
  rc = shardrec_ddp_bucket(ddp, bucket, all, size, &size);
  if (rc == SHARDREC_OK) *tensor_out = all[position];
  free(all);
  return rc;
}

/* The dot interaction with its output length as int64 (see shardrec_dot_interaction_forward). */
shardrec_status_t shardrec_bind_dot_interaction_forward(const float* dense, const float* emb,
                                                        int64_t batch, int64_t num_sparse,
                                                        int64_t dim, float* inter,
                                                        int64_t inter_len) {
  return shardrec_dot_interaction_forward(dense, emb, batch, num_sparse, dim, inter, inter_len);
}

/* FSDP with units given as one flat buffer of initial values (units one after another). */
shardrec_status_t shardrec_bind_fsdp_create(shardrec_fsdp_t** out, shardrec_comm_t* comm,
                                            const int64_t* unit_counts, size_t num_units,
                                            const float* initial_flat,
                                            const shardrec_optimizer_config_t* optimizer) {
  const float** initial;
  size_t u;
  int64_t offset = 0;
  shardrec_status_t rc;
  if (unit_counts == NULL || initial_flat == NULL) {
    return shardrec_fsdp_create(out, comm, unit_counts, NULL, num_units, optimizer);
  }
  initial = (const float**)malloc(sizeof(float*) * (num_units > 0 ? num_units : 1));
  if (initial == NULL) return SHARDREC_ENOMEM;
  for (u = 0; u < num_units; ++u) {
    initial[u] = initial_flat + offset;
    offset += unit_counts[u] > 0 ? unit_counts[u] : 0;
  }
  rc = shardrec_fsdp_create(out, comm, unit_counts, (const float* const*)initial, num_units,
                            optimizer);
  free(initial);
  return rc;
}

/* Gathers unit @p unit (prefetching @p prefetch when >= 0) and copies its full parameters into
   @p full_out (the unit's element count, checked by the language layer). The unit stays
   gathered until shardrec_fsdp_release. */
shardrec_status_t shardrec_bind_fsdp_gather(shardrec_fsdp_t* fsdp, size_t unit, int64_t prefetch,
                                            float* full_out, int64_t count) {
  float* full = NULL;
  shardrec_status_t rc = shardrec_fsdp_gather(fsdp, unit, prefetch, &full);
  if (rc == SHARDREC_OK && full_out != NULL && count > 0) {
    memcpy(full_out, full, sizeof(float) * (size_t)count);
  }
  return rc;
}

/* Adds @p grad (the unit's element count) into unit @p unit's full gradient of this step. */
shardrec_status_t shardrec_bind_fsdp_add_grad(shardrec_fsdp_t* fsdp, size_t unit,
                                              const float* grad_in, int64_t count) {
  float* full = NULL;
  int64_t i;
  shardrec_status_t rc = shardrec_fsdp_grad(fsdp, unit, &full);
  if (rc != SHARDREC_OK) return rc;
  for (i = 0; i < count; ++i) full[i] += grad_in[i];
  return SHARDREC_OK;
}

/* Offset and length of this rank's slice of unit @p unit. */
shardrec_status_t shardrec_bind_fsdp_shard_range(shardrec_fsdp_t* fsdp, size_t unit,
                                                 int64_t* offset_out, int64_t* count_out) {
  float* data = NULL;
  return shardrec_fsdp_shard(fsdp, unit, &data, offset_out, count_out);
}

/* Copies this rank's slice of unit @p unit into @p shard_out (its length, checked by the
   language layer). */
shardrec_status_t shardrec_bind_fsdp_read_shard(shardrec_fsdp_t* fsdp, size_t unit,
                                                float* shard_out) {
  float* data = NULL;
  int64_t offset = 0, count = 0;
  shardrec_status_t rc = shardrec_fsdp_shard(fsdp, unit, &data, &offset, &count);
  if (rc == SHARDREC_OK && count > 0) memcpy(shard_out, data, sizeof(float) * (size_t)count);
  return rc;
}

/* Element count of dense optimizer state @p which of tensor position @p tensor (0 before the
   first step or when the type has no such state). */
shardrec_status_t shardrec_bind_dense_optimizer_state_count(shardrec_dense_optimizer_t* opt,
                                                            size_t tensor, int32_t which,
                                                            int64_t* count_out) {
  float* data = NULL;
  return shardrec_dense_optimizer_state(opt, tensor, which, &data, count_out);
}

/* Copies that state into @p buf (to_state 0) or @p buf into it (to_state 1); @p count must be
   its element count (checked here too: the language layer sized @p buf by it). */
shardrec_status_t shardrec_bind_dense_optimizer_state_copy(shardrec_dense_optimizer_t* opt,
                                                           size_t tensor, int32_t which,
                                                           float* buf, int64_t count,
                                                           int32_t to_state) {
  float* data = NULL;
  int64_t n = 0;
  shardrec_status_t rc = shardrec_dense_optimizer_state(opt, tensor, which, &data, &n);
  if (rc != SHARDREC_OK) return rc;
  if (n != count || (n > 0 && buf == NULL)) return SHARDREC_EINVAL;
  if (n == 0) return SHARDREC_OK;
  if (to_state) {
    memcpy(data, buf, sizeof(float) * (size_t)n);
  } else {
    memcpy(buf, data, sizeof(float) * (size_t)n);
  }
  return SHARDREC_OK;
}

/* shardrec_ddp_set_external with the storage as an address the language keeps alive (Java: a
   direct buffer the Bucketer references; Go: C memory from HostFloats). */
shardrec_status_t shardrec_bind_ddp_set_external(shardrec_ddp_t* ddp, size_t index, void* buf) {
  return shardrec_ddp_set_external(ddp, index, (float*)buf);
}

/* shardrec_mlp_bind_tensor / shardrec_dcn_bind_tensor with caller storage as addresses the
   language keeps alive (Java: direct buffers the layer references; Go: HostFloats). NULL keeps
   that side. A CUDA MLP takes device pointers: host storage is refused (EINVAL; the language
   layer checks the device first and says so). */
shardrec_status_t shardrec_bind_mlp_bind_storage(shardrec_mlp_t* mlp, size_t index,
                                                 void* param_addr, void* grad_addr) {
  int32_t device_type = SHARDREC_DEVICE_HOST;
  shardrec_status_t rc = shardrec_mlp_device(mlp, &device_type, NULL);
  if (rc == SHARDREC_OK && device_type != SHARDREC_DEVICE_HOST) return SHARDREC_EINVAL;
  return rc != SHARDREC_OK ? rc
                           : shardrec_mlp_bind_tensor(mlp, index, (float*)param_addr,
                                                      (float*)grad_addr);
}

shardrec_status_t shardrec_bind_dcn_bind_storage(shardrec_dcn_t* dcn, size_t index,
                                                 void* param_addr, void* grad_addr) {
  return shardrec_dcn_bind_tensor(dcn, index, (float*)param_addr, (float*)grad_addr);
}
%}

/* Raw float buffers: each language maps these names to its buffers (no lengths: the language
   layer checks them against the shapes before the call). */
%apply float* RAWF { float* y, float* dx, float* dx0, float* d_dense, float* d_emb,
                     float* dlogits, float* inter, float* buf, float* full_out, float* state_buf,
                     float* shard_out };
%apply const float* RAWF { const float* x, const float* x0, const float* dy,
                           const float* dense, const float* emb, const float* dout,
                           const float* logits, const float* labels, const float* grad_in,
                           const float* initial_flat };
%apply int32_t* OUT { int32_t* threads_out, int32_t* device_type_out, int32_t* device_index_out };
%apply int64_t* OUT { int64_t* steps, int64_t* in_out, int64_t* out_features_out, int64_t* count_out,
                      int64_t* steps_out, int64_t* buckets_out, int64_t* bytes_out64,
                      int64_t* current_out, int64_t* peak_out };
%apply size_t* OUT { size_t* size_out, size_t* tensor_out };
%apply double* OUT { double* loss, double* comm_seconds_out, double* exposed_seconds_out };

/* Struct-with-pointer calls and callbacks: the helpers above replace them. */
%ignore shardrec_dense_param;
%ignore shardrec_grad_ready_fn;
%ignore shardrec_mlp_options;
%ignore shardrec_mlp_options_init;
%ignore SHARDREC_MLP_OPTIONS_INIT;
%ignore shardrec_mlp_create;
%ignore shardrec_mlp_dims;
%ignore shardrec_mlp_device;
%ignore shardrec_mlp_backward;
%ignore shardrec_mlp_tensor;
%ignore shardrec_mlp_bind_tensor;
%ignore shardrec_dcn_backward;
%ignore shardrec_dcn_tensor;
%ignore shardrec_dcn_bind_tensor;
%ignore shardrec_dot_interaction_forward;
%ignore shardrec_dense_blas_threads;
%ignore shardrec_dense_optimizer_step;
%ignore shardrec_dense_optimizer_state;
%ignore shardrec_ddp_options;
%ignore shardrec_ddp_options_init;
%ignore SHARDREC_DDP_OPTIONS_INIT;
%ignore shardrec_ddp_stats;
%ignore shardrec_ddp_create;
%ignore shardrec_ddp_grad;
%ignore shardrec_ddp_set_external;
%ignore shardrec_ddp_bucket;
%ignore shardrec_fsdp_create;
%ignore shardrec_fsdp_gather;
%ignore shardrec_fsdp_grad;
%ignore shardrec_fsdp_shard;
%ignore shardrec_fsdp_memory;

%include "shardrec/dense.h"
%include "shardrec/ddp.h"

/* Out-parameter spellings of the plain calls kept above. */
%inline %{
shardrec_status_t shardrec_bind_dense_blas_threads(int32_t* threads_out) {
  return shardrec_dense_blas_threads(threads_out);
}
shardrec_status_t shardrec_bind_mlp_dims(const shardrec_mlp_t* mlp, int64_t* in_out,
                                         int64_t* out_features_out) {
  return shardrec_mlp_dims(mlp, in_out, out_features_out);
}
shardrec_status_t shardrec_bind_mlp_device(const shardrec_mlp_t* mlp, int32_t* device_type_out,
                                           int32_t* device_index_out) {
  return shardrec_mlp_device(mlp, device_type_out, device_index_out);
}
shardrec_status_t shardrec_bind_fsdp_memory(const shardrec_fsdp_t* fsdp, int64_t* current_out,
                                            int64_t* peak_out) {
  return shardrec_fsdp_memory(fsdp, current_out, peak_out);
}
%}

typedef struct shardrec_bind_param_list shardrec_bind_param_list_t;
shardrec_bind_param_list_t* shardrec_bind_param_list_new(void);
void shardrec_bind_param_list_free(shardrec_bind_param_list_t* list);
shardrec_status_t shardrec_bind_param_list_add_mlp(shardrec_bind_param_list_t* list,
                                                   shardrec_mlp_t* mlp);
shardrec_status_t shardrec_bind_param_list_add_dcn(shardrec_bind_param_list_t* list,
                                                   shardrec_dcn_t* dcn);
shardrec_status_t shardrec_bind_dense_optimizer_step(shardrec_dense_optimizer_t* opt,
                                                     const shardrec_bind_param_list_t* list);
shardrec_status_t shardrec_bind_mlp_create(shardrec_mlp_t** out, int64_t in_features,
                                           const int64_t* widths, size_t num_widths,
                                           const int32_t* activations, size_t num_activations,
                                           uint64_t seed, const char* name);
shardrec_status_t shardrec_bind_mlp_create_on(shardrec_mlp_t** out, int64_t in_features,
                                              const int64_t* widths, size_t num_widths,
                                              const int32_t* activations, size_t num_activations,
                                              uint64_t seed, const char* name,
                                              int32_t device_type, int32_t device_index,
                                              int32_t math);
shardrec_status_t shardrec_bind_mlp_backward(shardrec_mlp_t* mlp, const float* dy, float* dx,
                                             shardrec_ddp_t* ddp, size_t first);
shardrec_status_t shardrec_bind_dcn_backward(shardrec_dcn_t* dcn, const float* dy, float* dx0,
                                             shardrec_ddp_t* ddp, size_t first);
shardrec_status_t shardrec_bind_mlp_use_ddp_grads(shardrec_mlp_t* mlp, const shardrec_ddp_t* ddp,
                                                  size_t first);
shardrec_status_t shardrec_bind_dcn_use_ddp_grads(shardrec_dcn_t* dcn, const shardrec_ddp_t* ddp,
                                                  size_t first);
shardrec_status_t shardrec_bind_mlp_tensor_info(const shardrec_mlp_t* mlp, size_t index,
                                                const char** name_out, int64_t* count_out);
shardrec_status_t shardrec_bind_dcn_tensor_info(const shardrec_dcn_t* dcn, size_t index,
                                                const char** name_out, int64_t* count_out);
shardrec_status_t shardrec_bind_mlp_copy_tensor(shardrec_mlp_t* mlp, size_t index, int32_t which,
                                                float* buf, int32_t to_tensor);
shardrec_status_t shardrec_bind_dcn_copy_tensor(shardrec_dcn_t* dcn, size_t index, int32_t which,
                                                float* buf, int32_t to_tensor);
shardrec_status_t shardrec_bind_ddp_create(shardrec_ddp_t** out, shardrec_comm_t* comm,
                                           const int64_t* counts, size_t num_counts,
                                           int64_t first_bucket_bytes, int64_t bucket_cap_bytes,
                                           int32_t compression);
shardrec_status_t shardrec_bind_ddp_stats(const shardrec_ddp_t* ddp, int64_t* steps_out,
                                          int64_t* buckets_out, double* comm_seconds_out,
                                          double* exposed_seconds_out, int64_t* bytes_out64);
shardrec_status_t shardrec_bind_ddp_bucket_size(const shardrec_ddp_t* ddp, size_t bucket,
                                                size_t* size_out);
shardrec_status_t shardrec_bind_ddp_bucket_tensor(const shardrec_ddp_t* ddp, size_t bucket,
                                                  size_t position, size_t* tensor_out);
shardrec_status_t shardrec_bind_dot_interaction_forward(const float* dense, const float* emb,
                                                        int64_t batch, int64_t num_sparse,
                                                        int64_t dim, float* inter,
                                                        int64_t inter_len);
shardrec_status_t shardrec_bind_fsdp_create(shardrec_fsdp_t** out, shardrec_comm_t* comm,
                                            const int64_t* unit_counts, size_t num_units,
                                            const float* initial_flat,
                                            const shardrec_optimizer_config_t* optimizer);
shardrec_status_t shardrec_bind_fsdp_gather(shardrec_fsdp_t* fsdp, size_t unit, int64_t prefetch,
                                            float* full_out, int64_t count);
shardrec_status_t shardrec_bind_fsdp_add_grad(shardrec_fsdp_t* fsdp, size_t unit,
                                              const float* grad_in, int64_t count);
shardrec_status_t shardrec_bind_fsdp_shard_range(shardrec_fsdp_t* fsdp, size_t unit,
                                                 int64_t* offset_out, int64_t* count_out);
shardrec_status_t shardrec_bind_fsdp_read_shard(shardrec_fsdp_t* fsdp, size_t unit,
                                                float* shard_out);
shardrec_status_t shardrec_bind_dense_optimizer_state_count(shardrec_dense_optimizer_t* opt,
                                                            size_t tensor, int32_t which,
                                                            int64_t* count_out);
shardrec_status_t shardrec_bind_dense_optimizer_state_copy(shardrec_dense_optimizer_t* opt,
                                                           size_t tensor, int32_t which,
                                                           float* state_buf, int64_t count,
                                                           int32_t to_state);
shardrec_status_t shardrec_bind_ddp_set_external(shardrec_ddp_t* ddp, size_t index, void* buf);
%apply void* buf { void* param_addr, void* grad_addr };
shardrec_status_t shardrec_bind_mlp_bind_storage(shardrec_mlp_t* mlp, size_t index,
                                                 void* param_addr, void* grad_addr);
shardrec_status_t shardrec_bind_dcn_bind_storage(shardrec_dcn_t* dcn, size_t index,
                                                 void* param_addr, void* grad_addr);
