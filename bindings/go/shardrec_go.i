/* Go typemaps of the libshardrec SWIG module: statuses become an error value built from the
 * code and the C message, copied inside the same cgo call (goroutines move between OS
 * threads, so a later read of the thread-local message could see another thread's).
 * Handles travel as uintptr, buffers as Go slices (no copies), out-parameters as 1-element
 * slices filled in place, strings as Go strings. */

%module shardrec

%{
#include <stdlib.h>
#include <string.h>
#include "shardrec/common.h"
%}

%insert(cgo_comment_typedefs) %{
#cgo pkg-config: shardrec
%}

/* ---- status: "" on success, else "<code>\x1f<message>" decoded by statusError ---- */
%typemap(gotype) shardrec_status_t "error"
%typemap(imtype) shardrec_status_t "string"
%typemap(out, fragment="AllocateString") shardrec_status_t %{
  if ($1 < 0) {
    size_t len = shardrec_last_error_copy(NULL, 0);
    char* text = (char*)malloc(len + 32);
    size_t n = 0;
    if (text != NULL) {
      n = (size_t)snprintf(text, 32, "%d\x1f", (int)$1);
      shardrec_last_error_copy(text + n, len + 1);
      n += len;
      $result = Swig_AllocateString(text, n);
      free(text);
    } else {
      $result = Swig_AllocateString("-4\x1fout of memory", 15);
    }
  } else {
    $result = Swig_AllocateString("", 0);
  }
%}
%typemap(goout, fragment="CopyString") shardrec_status_t %{ $result = statusError(swigCopyString($1)) %}
/* A status passed in (shardrec_status_string) stays a plain int. */
%typemap(gotype) shardrec_status_t code "int"
%typemap(imtype) shardrec_status_t code "int"
%typemap(in) shardrec_status_t code %{ $1 = (shardrec_status_t)$input; %}

/* ---- opaque handles as uintptr ---- */
%define SR_GO_HANDLE(TYPE)
%typemap(gotype) TYPE*, const TYPE* "uintptr"
%typemap(in) TYPE*, const TYPE* %{ $1 = ($1_ltype)$input; %}
%typemap(out) TYPE*, const TYPE* %{ $result = $1; %}
%typemap(gotype) TYPE** "[]uintptr"
%typemap(in) TYPE** %{ $1 = ($1_ltype)$input.array; %}
%enddef
SR_GO_HANDLE(shardrec_comm_t)
SR_GO_HANDLE(shardrec_plan_t)
SR_GO_HANDLE(shardrec_embedding_t)
SR_GO_HANDLE(shardrec_mesh_t)
SR_GO_HANDLE(shardrec_bind_plan_spec_t)
SR_GO_HANDLE(shardrec_bind_tiers_t)

%typemap(gotype) (shardrec_comm_t** comms_out, int32_t n) "[]uintptr"
%typemap(in) (shardrec_comm_t** comms_out, int32_t n) %{
  $1 = ($1_ltype)$input.array;
  $2 = (int32_t)$input.len;
%}

/* ---- unique id as a 128-byte slice ---- */
%typemap(gotype) shardrec_unique_id_t*, const shardrec_unique_id_t* "[]byte"
%typemap(in) shardrec_unique_id_t*, const shardrec_unique_id_t* %{ $1 = ($1_ltype)$input.array; %}

/* ---- slices: (pointer, length) pairs, no copy ---- */
%define SR_GO_SLICE(CTYPE, GOTYPE)
%typemap(gotype) (CTYPE* BUF, size_t LEN) "[]GOTYPE"
%typemap(in) (CTYPE* BUF, size_t LEN) %{
  $1 = ($1_ltype)$input.array;
  $2 = (size_t)$input.len;
%}
%enddef
SR_GO_SLICE(float, float32)
SR_GO_SLICE(const float, float32)
SR_GO_SLICE(const int32_t, int32)
SR_GO_SLICE(const int64_t, int64)
%apply (float* BUF, size_t LEN) { (float* out, size_t out_len), (float* out, size_t len) };
%apply (const float* BUF, size_t LEN) { (const float* grad, size_t grad_len),
                                        (const float* weights, size_t len),
                                        (const float* values, size_t len),
                                        (const float* weights, size_t num_weights),
                                        (const float* pooling_factors, size_t num_pooling_factors) };
%apply (const int32_t* BUF, size_t LEN) { (const int32_t* lengths, size_t num_lengths),
                                          (const int32_t* features, size_t num_features),
                                          (const int32_t* ranks, size_t num_ranks) };
%apply (const int64_t* BUF, size_t LEN) { (const int64_t* values, size_t num_values),
                                          (const int64_t* bytes, size_t num_bytes),
                                          (const int64_t* shape, size_t ndim),
                                          (const int64_t* feature_batch_sizes,
                                           size_t num_feature_batch_sizes),
                                          (const int64_t* inverse_indices,
                                           size_t num_inverse_indices) };

/* Dense collectives take raw addresses (the Go layer passes slices it keeps alive). */
%typemap(gotype) const void* send, void* recv, void* buf "uintptr"
%typemap(in) const void* send, void* recv, void* buf %{ $1 = ($1_ltype)$input; %}

/* Host calls: the stream argument is always NULL from Go. */
%typemap(in, numinputs=0) void* stream %{ $1 = NULL; %}

/* ---- scalar out-parameters: 1-element slices written in place ---- */
%define SR_GO_OUT(CTYPE, GOTYPE)
%typemap(gotype) CTYPE* OUT "[]GOTYPE"
%typemap(in) CTYPE* OUT %{ $1 = ($1_ltype)$input.array; %}
%enddef
SR_GO_OUT(int32_t, int32)
SR_GO_OUT(int64_t, int64)
SR_GO_OUT(uint64_t, uint64)
SR_GO_OUT(size_t, uint64)
SR_GO_OUT(double, float64)
SR_GO_OUT(uint32_t, uint32)
%apply int32_t* OUT { int32_t* out, int32_t* row_wise_out, int32_t* type_out,
                      int32_t* sharding_group, int32_t* shard_rank, int32_t* replica_group,
                      int32_t* replica_rank, int32_t* synced_out, int32_t* collectives_out };
%apply int64_t* OUT { int64_t* out, int64_t* syncs_out };
%apply uint64_t* OUT { uint64_t* out, uint64_t* bytes_out };
%apply size_t* OUT { size_t* out, size_t* index_out, size_t* num_shards_out };
%apply double* OUT { double* comm_seconds_out, double* total_seconds_out };
%apply double* OUT { double* bandwidth_out };
/* shardrec_topology_calibrate_disk's figures. */
%apply double* OUT { double* iops_out };
%apply int32_t* OUT { int32_t* direct_out };
/* Output keys and offsets (shardrec_embedding_output_info). */
%apply int64_t* OUT { int64_t* offset_out, int64_t* width_out };

/* ---- strings out (*string), copied into Go memory after the call ---- */
%typemap(gotype) const char** name_out "*string"
%typemap(in) const char** name_out (const char* name = NULL) %{ $1 = ($1_ltype)&name; %}
%typemap(argout, fragment="AllocateString") const char** name_out %{
  *(_gostring_*)$input = Swig_AllocateString(name$argnum ? name$argnum : "",
                                             name$argnum ? strlen(name$argnum) : 0);
%}
%typemap(goargout, fragment="CopyString") const char** name_out %{ *$input = swigCopyString(*$input) %}
%apply const char** name_out { const char** feature_out, const char** table_out };

%typemap(gotype) (char** text_out, size_t* len_out) "*string"
%typemap(in) (char** text_out, size_t* len_out) (char* text = NULL, size_t text_len = 0) %{
  $1 = &text; $2 = &text_len;
%}
%typemap(argout, fragment="AllocateString") (char** text_out, size_t* len_out) %{
  *(_gostring_*)$input = Swig_AllocateString(text$argnum ? text$argnum : "", text_len$argnum);
  shardrec_free(text$argnum);
%}
%typemap(goargout, fragment="CopyString") (char** text_out, size_t* len_out) %{ *$input = swigCopyString(*$input) %}

/* Plan JSON in as a Go string. */
%apply (char *STRING, size_t LENGTH) { (const char* text, size_t len) };

/* Struct proxies get a _t suffix: the idiomatic layer owns the plain names. */
%rename(Topology_t) shardrec_topology;
%rename(Shard_t) shardrec_shard;

/* ---- the dense side (../swig/dense.i) ---- */
SR_GO_HANDLE(shardrec_mlp_t)
SR_GO_HANDLE(shardrec_dcn_t)
SR_GO_HANDLE(shardrec_dense_optimizer_t)
SR_GO_HANDLE(shardrec_ddp_t)
SR_GO_HANDLE(shardrec_fsdp_t)
SR_GO_HANDLE(shardrec_bind_param_list_t)
/* Raw float buffers of the dense calls: a Go slice's first element (nil: NULL); the Go layer
   checked the length and keeps the slice alive while C may read it. */
%typemap(gotype) float* RAWF, const float* RAWF "[]float32"
%typemap(in) float* RAWF, const float* RAWF %{ $1 = ($1_ltype)$input.array; %}
%apply (const int64_t* BUF, size_t LEN) { (const int64_t* widths, size_t num_widths),
                                          (const int64_t* counts, size_t num_counts),
                                          (const int64_t* unit_counts, size_t num_units) };
%apply (const int32_t* BUF, size_t LEN) { (const int32_t* activations, size_t num_activations) };

/* ---- serving (../swig/inference.i) ---- */
SR_GO_HANDLE(shardrec_inference_t)
SR_GO_HANDLE(shardrec_inference_version_t)
%apply (const int32_t* BUF, size_t LEN) { (const int32_t* storages, size_t num_storages) };
%apply (const int64_t* BUF, size_t LEN) { (const int64_t* cache_bytes, size_t num_tiers) };
/* A borrowed read-only address out (a snapshot's dense tensor): a 1-element []uintptr that the
   Go layer turns into a slice over the snapshot's memory. */
%typemap(gotype) const float** ADDR "[]uintptr"
%typemap(in) const float** ADDR %{ $1 = ($1_ltype)$input.array; %}

/* ---- dynamic tables' delta export: raw out-arrays (the Go layer sized them from the counts
   the first call returned: ids and tombstones by count, rows by count x dim) ---- */
%typemap(gotype) int64_t* RAWI64 "[]int64"
%typemap(in) int64_t* RAWI64 %{ $1 = ($1_ltype)$input.array; %}
%apply int64_t* RAWI64 { int64_t* ids, int64_t* tombstones };
%apply float* RAWF { float* rows };
%apply size_t* OUT { size_t* num_rows, size_t* num_tombstones };
/* The delta's flags (shardrec_embedding_dynamic_delta_ext) in a []uint32 of 1: SHARDREC_DELTA_FULL. */
%apply uint32_t* OUT { uint32_t* flags };
/* ... and its replay into a serving handle (shardrec_inference_apply_delta and _ext, whose flags
   come in as a uint): the same shapes in. */
%typemap(gotype) const int64_t* RAWI64 "[]int64"
%typemap(in) const int64_t* RAWI64 %{ $1 = ($1_ltype)$input.array; %}
%apply const int64_t* RAWI64 { const int64_t* ids };
%apply const float* RAWF { const float* rows };
%apply (const int64_t* BUF, size_t LEN) { (const int64_t* tombstones, size_t num_tombstones) };
/* A quantized serving table's row scales and biases (shardrec_inference_row_scales): raw
   out-arrays of n floats, sized by the Go layer (biases may be nil). */
%apply float* RAWF { float* scales, float* biases };

/* Evaluation mode and SCORE eviction: the mode out, the caller's scores in (raw, the Go layer
   checked that len(scores) == len(ids), and that many are passed as n), the count set out. */
%typemap(gotype) const double* RAWF64 "[]float64"
%typemap(in) const double* RAWF64 %{ $1 = ($1_ltype)$input.array; %}
%apply const double* RAWF64 { const double* scores };
%apply int32_t* OUT { int32_t* training };
%apply size_t* OUT { size_t* num_set };

%include "../swig/shardrec.i"

/* Float memory outside the Go heap, for storage C keeps after a call returns (DDP external
   gradients): cgo forbids C to retain Go pointers. */
%inline %{
void* shardrec_bind_host_alloc_floats(size_t count) {
  return calloc(count > 0 ? count : 1, sizeof(float));
}
void shardrec_bind_host_free(void* p) { free(p); }
%}
