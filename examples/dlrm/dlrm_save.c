/*
 * @file dlrm_save.c
 * @brief Saving a trained DLRM for serving (dlrm_save.h).
 */
#include "dlrm_save.h"

#include <stdlib.h>

shardrec_status_t dlrm_save(dlrm_t* model, const char* dir, int raw_ids) {
  static float kRawIds = 1.0f;
  const size_t n = dlrm_num_dense_tensors(model);
  shardrec_dense_tensor_t* dense = calloc(n + 1, sizeof(*dense));
  shardrec_checkpoint_options_t o;
  shardrec_status_t rc = dense == NULL ? SHARDREC_ENOMEM : SHARDREC_OK;
  size_t i;
  for (i = 0; rc == SHARDREC_OK && i < n; ++i) {
    shardrec_dense_param_t t;
    rc = dlrm_dense_tensor(model, i, &t);
    if (rc == SHARDREC_OK) {
      /* Parameters only: the dense optimizer's state is the training side's business. */
      dense[i].name = t.name;
      dense[i].data = t.param;
      dense[i].count = (size_t)t.count;
    }
  }
  if (rc == SHARDREC_OK)
    rc = shardrec_checkpoint_options_init(&o, SHARDREC_CHECKPOINT_OPTIONS_VERSION);
  if (rc == SHARDREC_OK) {
    o.dense = dense;
    o.num_dense = n;
    if (raw_ids) {
      dense[n].name = "dlrm.raw_ids";
      dense[n].data = &kRawIds;
      dense[n].count = 1;
      o.num_dense = n + 1;
    }
    rc = shardrec_checkpoint_save_mesh(dlrm_mesh(model), dlrm_embedding(model), dir, &o);
  }
  free(dense);
  return rc;
}
