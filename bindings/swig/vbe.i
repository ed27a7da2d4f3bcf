/* Batches with a batch size per feature (VBE, shardrec_kjt_vbe_view_t) for the Java and Go
 * bindings: the view is built here from flat arguments (the plain KJT's buffers, the batch size
 * of each feature and the optional inverse indices), and each helper makes one C call, so every
 * check and every message still comes from libshardrec. An empty batch-size array is a plain
 * batch (NULL feature_batch_sizes). The inverse indices pass as given: a NULL array gives none,
 * and an empty non-NULL one (Java: a non-null empty buffer; Go: a non-nil empty slice) stays a
 * non-NULL pointer with 0 entries, the inverse indices of a zero-size batch (batch_size 0;
 * docs/variable-batch.md). */

%{
#include "shardrec/embedding.h"
#include "shardrec/inference.h"

static shardrec_kjt_vbe_view_t sr_bind_vbe(int64_t batch_size, size_t num_features,
                                           const int32_t* lengths, size_t num_lengths,
                                           const int64_t* values, size_t num_values,
                                           const float* weights, size_t num_weights,
                                           const int64_t* feature_batch_sizes,
                                           size_t num_feature_batch_sizes,
                                           const int64_t* inverse_indices,
                                           size_t num_inverse_indices) {
  shardrec_kjt_vbe_view_t v;
  memset(&v, 0, sizeof(v));
  v.version = SHARDREC_KJT_VBE_VIEW_VERSION;
  v.kjt = sr_bind_kjt(batch_size, num_features, lengths, num_lengths, values, num_values, weights,
                      num_weights);
  v.feature_batch_sizes = num_feature_batch_sizes > 0 ? feature_batch_sizes : NULL;
  v.num_feature_batch_sizes = num_feature_batch_sizes;
  v.inverse_indices = inverse_indices;
  v.num_inverse_indices = num_inverse_indices;
  return v;
}

#define SR_BIND_VBE_VIEW                                                                    \
  shardrec_kjt_vbe_view_t vbe = sr_bind_vbe(                                                \
      batch_size, num_features, lengths, num_lengths, values, num_values, weights, num_weights, \
      feature_batch_sizes, num_feature_batch_sizes, inverse_indices, num_inverse_indices)

shardrec_status_t shardrec_bind_inference_lookup_vbe(
    const shardrec_inference_t* inf, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, const int64_t* feature_batch_sizes,
    size_t num_feature_batch_sizes, const int64_t* inverse_indices, size_t num_inverse_indices,
    float* out, size_t out_len, uint64_t* version_out) {
  SR_BIND_VBE_VIEW;
  return shardrec_inference_lookup_vbe(inf, &vbe, out, out_len, version_out);
}

shardrec_status_t shardrec_bind_inference_snapshot_lookup_vbe(
    const shardrec_inference_version_t* ver, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, const int64_t* feature_batch_sizes,
    size_t num_feature_batch_sizes, const int64_t* inverse_indices, size_t num_inverse_indices,
    float* out, size_t out_len) {
  SR_BIND_VBE_VIEW;
  return shardrec_inference_snapshot_lookup_vbe(ver, &vbe, out, out_len);
}

shardrec_status_t shardrec_bind_inference_vbe_output_len(
    const shardrec_inference_t* inf, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, const int64_t* feature_batch_sizes,
    size_t num_feature_batch_sizes, const int64_t* inverse_indices, size_t num_inverse_indices,
    size_t* out) {
  SR_BIND_VBE_VIEW;
  return shardrec_inference_vbe_output_len(inf, &vbe, out);
}

shardrec_status_t shardrec_bind_embedding_vbe_output_len(
    const shardrec_embedding_t* coll, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, const int64_t* feature_batch_sizes,
    size_t num_feature_batch_sizes, const int64_t* inverse_indices, size_t num_inverse_indices,
    size_t* out) {
  SR_BIND_VBE_VIEW;
  return shardrec_embedding_vbe_output_len(coll, &vbe, out);
}

shardrec_status_t shardrec_bind_embedding_forward_vbe(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights, const int64_t* feature_batch_sizes, size_t num_feature_batch_sizes,
    const int64_t* inverse_indices, size_t num_inverse_indices, float* out, size_t out_len) {
  SR_BIND_VBE_VIEW;
  return shardrec_embedding_forward_vbe(coll, &vbe, out, out_len, NULL);
}

shardrec_status_t shardrec_bind_embedding_input_dist_start_vbe(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights, const int64_t* feature_batch_sizes, size_t num_feature_batch_sizes,
    const int64_t* inverse_indices, size_t num_inverse_indices) {
  SR_BIND_VBE_VIEW;
  return shardrec_embedding_input_dist_start_vbe(coll, &vbe, NULL);
}

/* shardrec_embedding_forward_vbe_tensor with a host view of @p out shaped by @p shape (a shape
   that does not match @p out_len passes no view, which the library refuses on every rank). */
shardrec_status_t shardrec_bind_embedding_forward_vbe_tensor(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights, const int64_t* feature_batch_sizes, size_t num_feature_batch_sizes,
    const int64_t* inverse_indices, size_t num_inverse_indices, float* out, size_t out_len,
    const int64_t* shape, size_t ndim) {
  shardrec_tensor_view_t v;
  shardrec_status_t rc = sr_bind_view(&v, out, out_len, shape, ndim);
  SR_BIND_VBE_VIEW;
  return shardrec_embedding_forward_vbe_tensor(coll, &vbe, rc == SHARDREC_OK ? &v : NULL, NULL);
}
%}

%apply uint64_t* OUT { uint64_t* version_out };
shardrec_status_t shardrec_bind_inference_lookup_vbe(
    const shardrec_inference_t* inf, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, const int64_t* feature_batch_sizes,
    size_t num_feature_batch_sizes, const int64_t* inverse_indices, size_t num_inverse_indices,
    float* out, size_t out_len, uint64_t* version_out);
%clear uint64_t* version_out;
shardrec_status_t shardrec_bind_inference_snapshot_lookup_vbe(
    const shardrec_inference_version_t* ver, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, const int64_t* feature_batch_sizes,
    size_t num_feature_batch_sizes, const int64_t* inverse_indices, size_t num_inverse_indices,
    float* out, size_t out_len);
shardrec_status_t shardrec_bind_inference_vbe_output_len(
    const shardrec_inference_t* inf, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, const int64_t* feature_batch_sizes,
    size_t num_feature_batch_sizes, const int64_t* inverse_indices, size_t num_inverse_indices,
    size_t* out);
shardrec_status_t shardrec_bind_embedding_vbe_output_len(
    const shardrec_embedding_t* coll, int64_t batch_size, size_t num_features,
    const int32_t* lengths, size_t num_lengths, const int64_t* values, size_t num_values,
    const float* weights, size_t num_weights, const int64_t* feature_batch_sizes,
    size_t num_feature_batch_sizes, const int64_t* inverse_indices, size_t num_inverse_indices,
    size_t* out);
shardrec_status_t shardrec_bind_embedding_forward_vbe(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights, const int64_t* feature_batch_sizes, size_t num_feature_batch_sizes,
    const int64_t* inverse_indices, size_t num_inverse_indices, float* out, size_t out_len);
shardrec_status_t shardrec_bind_embedding_input_dist_start_vbe(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights, const int64_t* feature_batch_sizes, size_t num_feature_batch_sizes,
    const int64_t* inverse_indices, size_t num_inverse_indices);
shardrec_status_t shardrec_bind_embedding_forward_vbe_tensor(
    shardrec_embedding_t* coll, int64_t batch_size, size_t num_features, const int32_t* lengths,
    size_t num_lengths, const int64_t* values, size_t num_values, const float* weights,
    size_t num_weights, const int64_t* feature_batch_sizes, size_t num_feature_batch_sizes,
    const int64_t* inverse_indices, size_t num_inverse_indices, float* out, size_t out_len,
    const int64_t* shape, size_t ndim);
