/**
 * @file shardrec/dense.h
 * @brief The dense half of a recommendation model: MLPs (linear layers with bias and
 *        activation), DLRM's pairwise dot interaction, the low-rank DCN-v2 cross network,
 *        sigmoid + binary cross-entropy with logits, and dense optimizers (SGD, Adagrad,
 *        Adam/AdamW).
 *
 * Layers run on the host through OpenBLAS's sgemm in fp32 (deterministic for a fixed OpenBLAS
 * thread count and CPU), opened on first use: every host call that runs a GEMM (MLP and DCN
 * forward and backward, the serving forward) returns SHARDREC_EUNSUPPORTED, changing nothing,
 * when the BLAS library cannot be opened (libopenblas.so.0 or $SHARDREC_BLAS_LIBRARY). Or, for an
 * MLP created with device = SHARDREC_DEVICE_CUDA, on a GPU through cuBLASLt in the CUDA plugin
 * (fp32, tf32 or bf16 math; see shardrec_mlp_options_t). The GPU path has run on one H200
 * (2026-11-26: the host MLP's results within 1e-4 in fp32, 1e-2 in tf32 and bf16; docs/gpu.md); CI
 * compiles it and tests it on the CPU through a fake plugin.
 *
 * Parameters and gradients are exposed as flat tensors (shardrec_dense_param_t): a name, a
 * parameter pointer, a gradient pointer and an element count. They may be rebound to storage the
 * caller or a gradient bucketer (ddp.h) owns, so gradients are produced directly in the
 * bucket that averages them. Backward ACCUMULATES into the gradients (+=); call `_zero_grad`
 * before each step (or let shardrec_ddp_zero_grad clear bucket-owned gradients).
 *
 * Initial values follow PyTorch's nn.Linear (uniform in +-1/sqrt(fan_in)) drawn from a counter
 * RNG keyed by (seed, name, layer, element): every rank that creates a layer with the same
 * options starts from identical values, with no broadcast.
 *
 * Thread-safety: a handle is used by one thread at a time (concurrent use is detected and
 * returns SHARDREC_EUSAGE); distinct handles are independent.
 */
#ifndef SHARDREC_DENSE_H_
#define SHARDREC_DENSE_H_

#include <stddef.h>

#include "shardrec/common.h"
#include "shardrec/config.h"

SHARDREC_BEGIN_DECL

typedef struct shardrec_mlp shardrec_mlp_t;                         /**< An MLP. */
typedef struct shardrec_dcn shardrec_dcn_t;                         /**< A DCN-v2 cross network. */
typedef struct shardrec_dense_optimizer shardrec_dense_optimizer_t; /**< Dense optimizer. */

/** Activations of a linear layer (stored as int32_t). */
typedef enum shardrec_activation {
  SHARDREC_ACTIVATION_NONE = 0,   /**< y = x W^T + b. */
  SHARDREC_ACTIVATION_RELU = 1,   /**< y = max(0, x W^T + b). */
  SHARDREC_ACTIVATION_SIGMOID = 2 /**< y = 1 / (1 + exp(-(x W^T + b))). */
} shardrec_activation_t;

/**
 * A parameter tensor of a dense layer. The pointers are borrowed: they stay valid until the
 * layer is destroyed or the tensor is rebound.
 */
typedef struct shardrec_dense_param {
  const char* name; /**< E.g. "bottom.0.weight"; owned by the layer. */
  float* param;     /**< count parameters. */
  float* grad;      /**< count gradients, accumulated by backward. */
  int64_t count;    /**< Number of elements. */
} shardrec_dense_param_t;

/**
 * Called by a backward pass once tensor @p tensor's gradient is final (last layer first), so a
 * bucketer can start averaging it while the rest of the backward runs: pass
 * shardrec_ddp_mark_ready through it. Runs on the calling thread, inside the backward call.
 */
typedef void (*shardrec_grad_ready_fn)(size_t tensor, void* user);

/**
 * Sets the number of threads OpenBLAS uses for the dense layers' GEMMs. The setting is
 * PROCESS-WIDE (it is OpenBLAS's). When several ranks run as threads of one process, set it to
 * 1: each rank's multi-threaded GEMMs would otherwise oversubscribe the cores (8x slower top-MLP
 * forward measured with 4 rank threads on 2 cores). Default: OpenBLAS's (OPENBLAS_NUM_THREADS
 * or the core count). Results are bit-identical only at the same count: OpenBLAS's threaded GEMM
 * may round some shapes differently from its single-threaded one (docs/dense.md).
 * @return SHARDREC_OK; SHARDREC_EINVAL if @p threads < 1. Call it while no dense layer runs.
 */
SHARDREC_API shardrec_status_t shardrec_dense_set_blas_threads(int32_t threads);

/** The current OpenBLAS thread count. @return SHARDREC_OK; SHARDREC_EINVAL for NULL. */
SHARDREC_API shardrec_status_t shardrec_dense_blas_threads(int32_t* out);

/* ---------------------------------------------------------------------------------------- */

/** Arithmetic of a dense layer on a GPU (stored as int32_t). The host path is always fp32. */
typedef enum shardrec_dense_math {
  SHARDREC_DENSE_MATH_FP32 = 0, /**< fp32 inputs, products and accumulation (the default). */
  SHARDREC_DENSE_MATH_TF32 = 1, /**< fp32 storage; the tensor cores round GEMM inputs to tf32
                                     (10-bit mantissa) and accumulate in fp32. */
  SHARDREC_DENSE_MATH_BF16 = 2  /**< GEMM inputs (weights, activations, gradients) rounded to
                                     bf16 (8-bit mantissa), fp32 accumulation; parameters,
                                     outputs and gradients stay fp32. */
} shardrec_dense_math_t;

/** Version 1: the host MLP. Version 2 appends device_type, device_index, math and stream. */
#define SHARDREC_MLP_OPTIONS_VERSION 2u

/** Options of shardrec_mlp_create. */
typedef struct shardrec_mlp_options {
  uint32_t version;            /**< SHARDREC_MLP_OPTIONS_VERSION. */
  int64_t in_features;         /**< Width of the input; >= 1. */
  const int64_t* out_features; /**< num_layers widths, each >= 1; copied. */
  const int32_t* activations;  /**< num_layers shardrec_activation_t; NULL: ReLU on every
                                    layer but the last, which has none. Copied. */
  int32_t num_layers;          /**< >= 1. */
  uint64_t seed;               /**< Initial-value seed (same on every rank). */
  const char* name;            /**< Prefix of the tensor names; NULL or "" means "mlp". */
  /* ---- version 2 ---- */
  /** SHARDREC_DEVICE_HOST (default) or SHARDREC_DEVICE_CUDA. With CUDA the parameters,
   *  gradients and the layer outputs live in device memory on device_index; forward and
   *  backward take DEVICE pointers (x, y, dy, dx), run through cuBLASLt on @ref stream and
   *  return once the work is enqueued (no host synchronisation, except that create waits for
   *  its parameter upload and destroy waits for the stream before freeing). */
  int32_t device_type;
  int32_t device_index; /**< CUDA device ordinal (>= 0); ignored for the host. */
  int32_t math;         /**< shardrec_dense_math_t; FP32 (default). TF32 and BF16 need CUDA. */
  /** cudaStream_t for a CUDA MLP; NULL is the legacy default stream. Borrowed: it must
   *  outlive the MLP. Ignored for the host. */
  void* stream;
} shardrec_mlp_options_t;

#define SHARDREC_MLP_OPTIONS_INIT                                                     \
  {                                                                                   \
    SHARDREC_MLP_OPTIONS_VERSION, 0, NULL, NULL, 0, 0, NULL, SHARDREC_DEVICE_HOST, 0, \
        SHARDREC_DENSE_MATH_FP32, NULL                                                \
  }

/**
 * Fills @p options with the defaults for struct version @p version.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_mlp_options_init(shardrec_mlp_options_t* options,
                                                         uint32_t version);

/**
 * Creates an MLP. Its tensors are, per layer l, "<name>.<l>.weight" [out, in] (row-major) then
 * "<name>.<l>.bias" [out]: tensor 2l and 2l+1.
 * @param out     [out] The new MLP; *out is NULL on failure. Destroy with shardrec_mlp_destroy.
 * @param options Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL (bad width, activation, count, unknown device type or
 *         math, TF32/BF16 requested on the host); SHARDREC_ENODEVICE (device = CUDA without the
 *         CUDA plugin, a driver or that device); SHARDREC_EUNSUPPORTED (a build without CUDA
 *         with SHARDREC_CUDA_PLUGIN unset, or
 *         a CUDA plugin from an older build without the dense entries); SHARDREC_ENOMEM. On
 *         error nothing stays allocated.
 */
SHARDREC_API shardrec_status_t shardrec_mlp_create(shardrec_mlp_t** out,
                                                   const shardrec_mlp_options_t* options);

/** Destroys @p mlp; NULL is a no-op. Rebound external storage is not freed. A CUDA MLP waits
 *  (bounded, 60 s) for its stream before freeing its device memory. */
SHARDREC_API void shardrec_mlp_destroy(shardrec_mlp_t* mlp);

/**
 * Where @p mlp's parameters, gradients and activations live: the pointers of
 * shardrec_mlp_tensor are device pointers when *device_type is SHARDREC_DEVICE_CUDA.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL mlp. Either out pointer may be NULL.
 */
SHARDREC_API shardrec_status_t shardrec_mlp_device(const shardrec_mlp_t* mlp, int32_t* device_type,
                                                   int32_t* device_index);

/**
 * Input and output widths.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL mlp. Either out pointer may be NULL.
 */
SHARDREC_API shardrec_status_t shardrec_mlp_dims(const shardrec_mlp_t* mlp, int64_t* in_features,
                                                 int64_t* out_features);

/**
 * Forward pass: y[batch, out] from x[batch, in] (row-major). The MLP keeps each layer's output
 * for the next backward; @p x is read again by the backward and must stay valid and unchanged
 * until then. For a CUDA MLP (shardrec_mlp_device) @p x and @p y are device pointers and the
 * call returns once the work is enqueued on the MLP's stream.
 * @param y_len Elements available at @p y; must be >= batch * out_features.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL buffers, batch < 0, y too small);
 *         SHARDREC_EUNSUPPORTED (no BLAS library, above); nothing changes on error.
 */
SHARDREC_API shardrec_status_t shardrec_mlp_forward(shardrec_mlp_t* mlp, const float* x,
                                                    int64_t batch, float* y, int64_t y_len);

/**
 * Forward pass for serving: y[batch, out] from x[batch, in] (row-major), bit-identical to what
 * shardrec_mlp_forward writes for the same parameters and input, but read-only on @p mlp: no
 * gradient state, nothing kept for a backward, the layer outputs held in buffers of the call
 * (allocated per call). @p x is not retained after the call returns.
 * Thread-safety: any number of threads may call shardrec_mlp_infer on one MLP at once, each with
 * its own @p y. No call that changes the MLP (forward, backward, zero_grad, bind_tensor, an
 * optimizer step or a DDP/FSDP sync writing its parameters, destroy) may run at the same time;
 * one that is seen running is refused with SHARDREC_EUSAGE (a best-effort check, not a lock).
 * Host MLPs only; synchronous.
 * @param x     [in] batch * in_features floats; may be NULL when batch is 0.
 * @param y     [out] Caller buffer; may be NULL when batch is 0.
 * @param y_len Elements available at @p y; must be >= batch * out_features.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL mlp or buffers, batch < 0, y too small);
 *         SHARDREC_EUNSUPPORTED (a CUDA MLP: serving runs on the host); SHARDREC_EUSAGE (a
 *         training call is running on @p mlp). @p y is untouched on error.
 */
SHARDREC_API shardrec_status_t shardrec_mlp_infer(const shardrec_mlp_t* mlp, const float* x,
                                                  int64_t batch, float* y, int64_t y_len);

/**
 * Backward pass of the last forward: accumulates every parameter gradient from dy[batch, out]
 * and writes dx[batch, in] when @p dx is not NULL (the first layer of a model needs none). For a
 * CUDA MLP @p dy and @p dx are device pointers, the call only enqueues on the MLP's stream, and
 * @p on_ready runs once a tensor's gradient work is enqueued (final in stream order, not yet
 * on the host).
 * @param on_ready Optional; called for each tensor once its gradient is final, last layer first
 *                 (bias then weight).
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL dy); SHARDREC_EUSAGE (no forward before).
 */
SHARDREC_API shardrec_status_t shardrec_mlp_backward(shardrec_mlp_t* mlp, const float* dy,
                                                     float* dx, shardrec_grad_ready_fn on_ready,
                                                     void* user);

/** Sets every gradient of @p mlp to zero. @return SHARDREC_OK; SHARDREC_EINVAL for NULL. */
SHARDREC_API shardrec_status_t shardrec_mlp_zero_grad(shardrec_mlp_t* mlp);

/** Number of tensors (2 per layer). @return SHARDREC_OK; SHARDREC_EINVAL for NULL. */
SHARDREC_API shardrec_status_t shardrec_mlp_num_tensors(const shardrec_mlp_t* mlp, size_t* out);

/**
 * Describes tensor @p index.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL, index out of range).
 */
SHARDREC_API shardrec_status_t shardrec_mlp_tensor(const shardrec_mlp_t* mlp, size_t index,
                                                   shardrec_dense_param_t* out);

/**
 * Points tensor @p index at caller storage of `count` floats: @p param (its current values are
 * used as they are, not copied from the old storage) and/or @p grad (NULL keeps that side).
 * Typical use: grad = shardrec_ddp_grad(...), so the backward writes into the bucket. The
 * storage must outlive the MLP or a later rebind.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL mlp, index out of range).
 */
SHARDREC_API shardrec_status_t shardrec_mlp_bind_tensor(shardrec_mlp_t* mlp, size_t index,
                                                        float* param, float* grad);

/* ---------------------------------------------------------------------------------------- */

/**
 * Creates a low-rank DCN-v2 cross network (as in the MLPerf DLRM-DCNv2 reference): with x0 the
 * input [B, width], layer l computes x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l (element-wise
 * product). Tensors per layer: "<name>.<l>.V.weight" [rank, width], "<name>.<l>.W.weight"
 * [width, rank], "<name>.<l>.W.bias" [width] (3l, 3l+1, 3l+2).
 * @param name NULL or "" means "cross".
 * @return SHARDREC_OK; SHARDREC_EINVAL (width, layers or rank < 1, width or rank above 2^24, or
 *         more than 2^40 parameters in all); SHARDREC_ENOMEM.
 */
SHARDREC_API shardrec_status_t shardrec_dcn_create(shardrec_dcn_t** out, int64_t width,
                                                   int32_t num_layers, int64_t rank, uint64_t seed,
                                                   const char* name);

/** Destroys @p dcn; NULL is a no-op. */
SHARDREC_API void shardrec_dcn_destroy(shardrec_dcn_t* dcn);

/**
 * Forward: y[batch, width] from x0[batch, width]. x0 must stay valid until the backward.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL buffers, batch < 0, y_len < batch * width).
 */
SHARDREC_API shardrec_status_t shardrec_dcn_forward(shardrec_dcn_t* dcn, const float* x0,
                                                    int64_t batch, float* y, int64_t y_len);

/**
 * Forward for serving: y[batch, width] from x0[batch, width], bit-identical to
 * shardrec_dcn_forward, read-only on @p dcn (intermediates in buffers of the call). Thread-safety,
 * errors and rules as shardrec_mlp_infer (a cross network is always on the host).
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL, batch < 0, y_len < batch * width);
 *         SHARDREC_EUSAGE (a training call is running on @p dcn).
 */
SHARDREC_API shardrec_status_t shardrec_dcn_infer(const shardrec_dcn_t* dcn, const float* x0,
                                                  int64_t batch, float* y, int64_t y_len);

/**
 * Backward of the last forward: accumulates parameter gradients and writes dx0[batch, width]
 * (required: the cross network's input is the bottom MLP's output and embeddings).
 * @param dcn      [in,out] Not NULL.
 * @param dy       [in] [batch, width] for the last forward's batch; borrowed for the call; not
 *                 NULL unless that batch was 0.
 * @param dx0      [out] [batch, width]; not NULL unless the batch was 0.
 * @param on_ready Optional (NULL: none); called for each tensor once its gradient is final, last
 *                 layer first, on the calling thread inside this call (as shardrec_mlp_backward),
 *                 with @p user passed through.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL @p dcn, or NULL buffers for a batch above 0);
 *         SHARDREC_EUSAGE (no forward before, or another thread is using @p dcn).
 */
SHARDREC_API shardrec_status_t shardrec_dcn_backward(shardrec_dcn_t* dcn, const float* dy,
                                                     float* dx0, shardrec_grad_ready_fn on_ready,
                                                     void* user);

/** Zeroes every gradient. @return SHARDREC_OK; SHARDREC_EINVAL for NULL. */
SHARDREC_API shardrec_status_t shardrec_dcn_zero_grad(shardrec_dcn_t* dcn);

/**
 * Number of tensors (3 per layer).
 * @param out [out] Receives the count; not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL @p dcn or @p out.
 */
SHARDREC_API shardrec_status_t shardrec_dcn_num_tensors(const shardrec_dcn_t* dcn, size_t* out);

/**
 * Describes tensor @p index (< shardrec_dcn_num_tensors): its name, shape and current storage;
 * the pointers in @p out stay owned by @p dcn (or by whoever bound them).
 * @param out [out] Not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL @p dcn or @p out, index out of range).
 */
SHARDREC_API shardrec_status_t shardrec_dcn_tensor(const shardrec_dcn_t* dcn, size_t index,
                                                   shardrec_dense_param_t* out);

/**
 * Points tensor @p index at caller storage, as shardrec_mlp_bind_tensor: @p param (its values
 * are used as they are) and/or @p grad (NULL keeps that side); the storage stays the caller's and
 * must outlive the cross network or a later rebind.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL @p dcn, index out of range); SHARDREC_EUSAGE
 *         (another thread is using @p dcn).
 */
SHARDREC_API shardrec_status_t shardrec_dcn_bind_tensor(shardrec_dcn_t* dcn, size_t index,
                                                        float* param, float* grad);

/* ---------------------------------------------------------------------------------------- */

/**
 * Output width of the dot interaction over @p num_sparse embeddings of width @p dim plus the
 * dense vector: dim + F (F + 1) / 2 with F = num_sparse.
 * @return SHARDREC_OK; SHARDREC_EINVAL (num_sparse < 0, dim < 1, NULL out). Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_dot_interaction_width(int64_t num_sparse, int64_t dim,
                                                              int64_t* out);

/**
 * DLRM's dot interaction: from dense[batch, dim] and emb[batch, num_sparse * dim] (features one
 * after another, as the pooled output of a collection whose tables all have width dim), writes
 * out[batch, width]: the dense vector, then the dot products of every pair (i, j), i > j, in
 * row-major order of the strictly lower triangle, vector 0 being the dense one.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL, negative sizes, out_len too small). Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_dot_interaction_forward(const float* dense,
                                                                const float* emb, int64_t batch,
                                                                int64_t num_sparse, int64_t dim,
                                                                float* out, int64_t out_len);

/**
 * Gradients of the dot interaction's inputs from dout[batch, width]: d_dense[batch, dim] and
 * d_emb[batch, num_sparse * dim] are overwritten. The buffers carry no lengths: each must hold
 * its shape, which the call cannot check.
 * @return SHARDREC_OK; SHARDREC_EINVAL (bad shape, NULL gradient buffers, or a batch whose
 *         buffers would exceed the address space). Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_dot_interaction_backward(const float* dense,
                                                                 const float* emb,
                                                                 const float* dout, int64_t batch,
                                                                 int64_t num_sparse, int64_t dim,
                                                                 float* d_dense, float* d_emb);

/**
 * Sigmoid + binary cross-entropy on logits, computed stably (no overflow for large |logit|):
 * loss = sum_i [max(z, 0) - z y + log(1 + exp(-|z|))] / normalizer, and
 * dlogits[i] = (sigmoid(z_i) - y_i) / normalizer. normalizer is usually the batch size; in
 * data-parallel training use the LOCAL batch size (the bucketer averages over ranks).
 * @param labels  n values, each 0 or 1.
 * @param loss    [out] Optional (NULL skips).
 * @param dlogits [out] Optional n gradients (NULL skips).
 * @return SHARDREC_OK; SHARDREC_EINVAL (a label not 0/1, normalizer <= 0, NULL). Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_bce_with_logits(const float* logits, const float* labels,
                                                        int64_t n, double normalizer, double* loss,
                                                        float* dlogits);

/* ---------------------------------------------------------------------------------------- */

/**
 * Creates a dense optimizer from the same config struct as the fused embedding optimizers, with
 * the same per-element rules: SGD, Adagrad, Adam (AdamW = Adam with
 * SHARDREC_WEIGHT_DECAY_DECOUPLED). Row-wise types and LAMB are refused (SHARDREC_EINVAL).
 * State ("momentum1", "momentum2") is kept per tensor position and sized at the first step.
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_ENOMEM.
 */
SHARDREC_API shardrec_status_t shardrec_dense_optimizer_create(
    shardrec_dense_optimizer_t** out, const shardrec_optimizer_config_t* config);

/** Destroys @p opt; NULL is a no-op. */
SHARDREC_API void shardrec_dense_optimizer_destroy(shardrec_dense_optimizer_t* opt);

/**
 * One step over @p tensors (param updated from grad, element-wise). The list must have the same
 * length and counts at every step; a changed list is refused before anything changes. HOST
 * tensors only: the tensors of a CUDA MLP are refused with SHARDREC_EINVAL ("dense optimizer on
 * device tensors is not supported yet"); other device memory must not be passed.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL, changed shapes, NULL pointers in a tensor, a CUDA
 *         MLP's tensor); SHARDREC_EUSAGE when the step count is at its maximum, 2^53 (nothing
 *         changes; see shardrec_dense_optimizer_set_steps).
 */
SHARDREC_API shardrec_status_t shardrec_dense_optimizer_step(shardrec_dense_optimizer_t* opt,
                                                             const shardrec_dense_param_t* tensors,
                                                             size_t num_tensors);

/**
 * Sets the learning rate for the following steps (schedules).
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL @p opt or a rate that is negative, NaN or
 *         infinite (nothing changes).
 */
SHARDREC_API shardrec_status_t
shardrec_dense_optimizer_set_learning_rate(shardrec_dense_optimizer_t* opt, float learning_rate);

/**
 * Optimizer state of tensor position @p tensor: @p which 0 is "momentum1", 1 "momentum2".
 * *data is NULL and *count 0 before the first step or when the type has no such state. The
 * pointer is owned by the optimizer (valid until its destruction) and may be written (restore
 * from a checkpoint).
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL, @p which out of range, or @p tensor past the
 *         tensors the optimizer has stepped: it learns them at its first step, so before it any
 *         position gives NULL and 0).
 */
SHARDREC_API shardrec_status_t shardrec_dense_optimizer_state(shardrec_dense_optimizer_t* opt,
                                                              size_t tensor, int32_t which,
                                                              float** data, int64_t* count);

/**
 * Steps taken so far (Adam's bias correction uses it).
 * @param steps [out] Not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL @p opt or @p steps.
 */
SHARDREC_API shardrec_status_t shardrec_dense_optimizer_steps(const shardrec_dense_optimizer_t* opt,
                                                              int64_t* steps);

/**
 * Sets the step count (restoring a checkpoint). The count stays in [0, 2^53]
 * (9007199254740992, the largest Adam's bias correction, a double, counts exactly): a step at
 * 2^53 is refused with SHARDREC_EUSAGE.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL @p opt or @p steps outside [0, 2^53] (nothing
 *         changes).
 */
SHARDREC_API shardrec_status_t shardrec_dense_optimizer_set_steps(shardrec_dense_optimizer_t* opt,
                                                                  int64_t steps);

SHARDREC_END_DECL

#endif /* SHARDREC_DENSE_H_ */
