/**
 * @file shardrec/tensor.h
 * @brief Borrowed, non-owning views of caller memory that cross the C ABI without copies: the
 *        keyed jagged tensor (KJT) that carries a batch of sparse ids, and a plain tensor view.
 *
 * Views are plain structs filled by the caller. The library never keeps a pointer from a view
 * beyond the call that receives it unless that call's documentation says so. No function is
 * declared here; the calls that take views live in the headers of their modules.
 */
#ifndef SHARDREC_TENSOR_H_
#define SHARDREC_TENSOR_H_

#include "shardrec/common.h"

SHARDREC_BEGIN_DECL

/**
 * One rank's local batch of sparse features in keyed-jagged (KJT) form, feature-major.
 *
 * With F = number of features of the plan (in plan feature order) and B = @ref batch_size:
 *  - `lengths[f * B + b]` is the number of ids of feature f in sample b (>= 0);
 *  - `values` holds the ids of all bags in that same order: every bag of feature 0 (samples
 *    0..B-1), then every bag of feature 1, ...; ids are global row indices of the tables that
 *    read the feature, of type int64 or int32 (@ref values_dtype); a dynamic table (one whose
 *    config has a `dynamic` part, config.h) takes any 64-bit value as an id instead;
 *  - `weights`, when not NULL, holds one float per id (per-sample weights); a weighted batch
 *    weights every feature.
 * B may be 0 and may differ between ranks.
 *
 * Device: the arrays live on the device named by @ref device_type and @ref device_index. GPU
 * collections read these two fields, so start from SHARDREC_KJT_VIEW_INIT and set them (a view
 * zeroed with memset has values_dtype 0, SHARDREC_DTYPE_FLOAT32, which every forward refuses). Host
 * collections always read host memory and do not look at them, so views filled field by field
 * before the fields existed keep working with host collections.
 */
typedef struct shardrec_kjt_view {
  int64_t batch_size;     /**< B, the local number of samples; >= 0. */
  size_t num_features;    /**< F; must equal the plan's number of features. */
  const int32_t* lengths; /**< F*B bag lengths, feature-major; NULL only when F*B == 0. */
  size_t num_lengths;     /**< Length of @ref lengths; must equal F*B. */
  const void* values;     /**< The ids; NULL only when @ref num_values is 0. */
  int32_t values_dtype;   /**< SHARDREC_DTYPE_INT64 or SHARDREC_DTYPE_INT32. */
  size_t num_values;      /**< Number of ids; must equal the sum of @ref lengths. */
  const float* weights;   /**< Per-id weights, or NULL for an unweighted batch. */
  size_t num_weights;     /**< 0 when @ref weights is NULL, else @ref num_values. */
  int32_t device_type;    /**< Where the arrays live: SHARDREC_DEVICE_HOST (0) or
                               SHARDREC_DEVICE_CUDA. */
  int32_t device_index;   /**< CUDA device ordinal; 0 for host memory. */
} shardrec_kjt_view_t;

/** An empty host batch of int64 ids (every other field zero), to be filled in. */
#define SHARDREC_KJT_VIEW_INIT \
  { 0, 0, NULL, 0, NULL, SHARDREC_DTYPE_INT64, 0, NULL, 0, 0, 0 }

/**
 * A batch whose features may each have their own number of samples ("variable batch size per
 * feature", TorchRec's VBE: `stride_per_key_per_rank` and `inverse_indices`), so that a request
 * of one user and many candidate items carries the user's features once instead of once per
 * candidate. Versioned: start from SHARDREC_KJT_VBE_VIEW_INIT (or set @ref version to
 * SHARDREC_KJT_VBE_VIEW_VERSION); the plain shardrec_kjt_view_t and the calls that take it are
 * unchanged.
 *
 * With F features and B_f = @ref feature_batch_sizes[f] (the bags feature f has on this rank):
 *  - `kjt.lengths` holds sum_f B_f bag lengths, feature-major: the B_0 bags of feature 0, then
 *    the B_1 bags of feature 1, ...; `kjt.num_lengths` equals that sum; `kjt.values` and
 *    `kjt.weights` follow the bags in the same order, as in a plain view.
 *  - With @ref inverse_indices, `kjt.batch_size` (B) is the number of output samples and
 *    `inverse_indices[f * B + b]` (in [0, B_f)) is the bag of feature f that output sample b
 *    reads (a zero-size batch passes a non-NULL pointer with 0 entries). The output then has the
 *    plain layout of B samples, and equals bit for bit the output
 *    of the expanded plain batch (bag `inverse_indices[f * B + b]` of feature f copied to sample
 *    b); the backward sums the gradients of the samples that read a bag into that bag
 *    (docs/variable-batch.md says in which order, and the bound against the expanded batch).
 *  - Without inverse indices, `kjt.batch_size` must be the largest B_f (TorchRec's stride; 0
 *    when F is 0) and the output is feature-major: pooled, for each feature f in plan order its
 *    B_f rows of its width (the dims of the tables reading it, in table order), so sum_f B_f *
 *    width_f floats; sequence, one row per id in value order, as in a plain view. (With
 *    inverse indices a sequence output has one row per id of the expanded batch.)
 * B_f may differ between features and ranks and may be 0. Host memory only for now: a GPU
 * collection refuses VBE views with SHARDREC_EUNSUPPORTED.
 * A view with @ref feature_batch_sizes NULL is the plain view @ref kjt (inverse indices must
 * then be NULL too).
 */
typedef struct shardrec_kjt_vbe_view {
  uint32_t version;                   /**< SHARDREC_KJT_VBE_VIEW_VERSION. */
  shardrec_kjt_view_t kjt;            /**< The ids, lengths and weights (see above). */
  const int64_t* feature_batch_sizes; /**< F entries B_f >= 0, or NULL (a plain batch). */
  size_t num_feature_batch_sizes;     /**< F when @ref feature_batch_sizes is set, else 0. */
  const int64_t* inverse_indices;     /**< F * kjt.batch_size entries, or NULL (see above). */
  size_t num_inverse_indices;         /**< Length of @ref inverse_indices; 0 when NULL. */
} shardrec_kjt_vbe_view_t;

#define SHARDREC_KJT_VBE_VIEW_VERSION 1u
/** An empty VBE view of int64 ids on the host, to be filled in. */
#define SHARDREC_KJT_VBE_VIEW_INIT \
  { SHARDREC_KJT_VBE_VIEW_VERSION, SHARDREC_KJT_VIEW_INIT, NULL, 0, NULL, 0 }

/** Maximum rank of a shardrec_tensor_view_t. */
#define SHARDREC_TENSOR_MAX_DIMS 4

/**
 * A dense, row-major (C-contiguous) tensor in caller memory.
 * The element count is the product of the first @ref ndim entries of @ref shape.
 */
typedef struct shardrec_tensor_view {
  void* data;           /**< First element; NULL only when the tensor is empty. */
  int32_t dtype;        /**< A shardrec_dtype_t value. */
  int32_t device_type;  /**< A shardrec_device_type_t value. */
  int32_t device_index; /**< CUDA device ordinal; 0 for host memory. */
  int32_t ndim;         /**< Number of dimensions, 0..SHARDREC_TENSOR_MAX_DIMS. */
  int64_t shape[SHARDREC_TENSOR_MAX_DIMS]; /**< Extent of each dimension (>= 0). */
} shardrec_tensor_view_t;

SHARDREC_END_DECL

#endif /* SHARDREC_TENSOR_H_ */
