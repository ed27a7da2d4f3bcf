/*
 * @file serve_model.h
 * @brief The DLRM of examples/dlrm rebuilt for serving from what its --save wrote: the
 *        embedding tables behind a read-only inference handle and the dense side (bottom MLP,
 *        dot interaction or DCN-v2 cross network, top MLP) as host MLPs whose parameters point
 *        into a pinned snapshot of that handle (zero-copy), scored with the gradient-free
 *        shardrec_mlp_infer / shardrec_dcn_infer.
 *
 * Thread-safety: serve_model_score may run from any number of threads at once on one model,
 * each with its own serve_scratch_t; create and destroy run alone.
 */
#ifndef SERVE_MODEL_H_
#define SERVE_MODEL_H_

#include <stddef.h>
#include <stdint.h>

#include "shardrec/shardrec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct serve_model {
  shardrec_inference_t* inf;          /* owned */
  shardrec_inference_version_t* pin;  /* owned: holds the dense tensors the MLPs read */
  shardrec_mlp_t *bottom, *top;       /* owned; parameters rebound into the snapshot */
  shardrec_dcn_t* cross;              /* owned; NULL with the dot interaction */
  int64_t num_dense, num_sparse, dim; /* 13, 26, the embedding width */
  int64_t inter_width;                /* the top MLP's input width */
} serve_model_t;

/* One request's buffers, sized for up to `capacity` samples. */
typedef struct serve_scratch {
  int64_t capacity;
  int32_t* lengths;
  float *bottom, *emb, *x0, *inter;
} serve_scratch_t;

/*
 * Opens @p checkpoint with every table stored as @p storage (a shardrec_serving_storage_t) and
 * rebuilds the dense side from the dense tensors "bottom.<l>.*", "cross.<l>.*" and "top.<l>.*".
 * 0, or -1 with the reason printed to stderr (the model is then empty and safe to destroy).
 */
int serve_model_open(serve_model_t* model, const char* checkpoint, int32_t storage);
void serve_model_destroy(serve_model_t* model);

int serve_scratch_alloc(serve_scratch_t* scratch, const serve_model_t* model, int64_t capacity);
void serve_scratch_free(serve_scratch_t* scratch);

/*
 * Logits of @p batch samples laid out as the DLRM example's (dense [batch, 13], ids feature-major
 * [26, batch], one id per sample and feature). The lookup pins one version for the request.
 * SHARDREC_OK or the failing call's status (message in shardrec_last_error()).
 */
shardrec_status_t serve_model_score(const serve_model_t* model, serve_scratch_t* scratch,
                                    const float* dense, const int64_t* ids, int64_t batch,
                                    float* logits);

#ifdef __cplusplus
}
#endif

#endif /* SERVE_MODEL_H_ */
