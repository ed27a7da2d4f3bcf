/*
 * @file dlrm_save.h
 * @brief Saving a trained DLRM for serving: the sharded embedding checkpoint (any mesh) with
 *        every dense parameter tensor of the model inside it, which is what
 *        shardrec_inference_open reads (examples/serve).
 */
#ifndef DLRM_SAVE_H_
#define DLRM_SAVE_H_

#include "dlrm_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Writes the model's checkpoint into @p dir (created if missing): the tables as trained and
 * the dense tensors under their own names ("bottom.0.weight", ..., "cross.0.V.weight", ...,
 * "top.2.bias"), from which a reader rebuilds the MLPs and the cross network (widths follow
 * from the counts). Optimizer states are saved too (a checkpoint is also a training resume
 * point); serving does not read them. With @p raw_ids (the model's tables are dynamic and its
 * ids raw 64-bit hashes, dlrm --dynamic) a one-value tensor "dlrm.raw_ids" marks the model, so a
 * reader that feeds it table indices (examples/serve) can refuse it instead of reading zeros.
 * Collective over the model's world.
 */
shardrec_status_t dlrm_save(dlrm_t* model, const char* dir, int raw_ids);

#ifdef __cplusplus
}
#endif

#endif /* DLRM_SAVE_H_ */
