/*
 * @file dlrm_model.h
 * @brief A DLRM / DLRM-DCNv2 built from the public C API only: a bottom MLP over the dense
 *        features, sharded embedding tables (2D: replica groups x sharding groups), the pairwise
 *        dot interaction or a low-rank DCN-v2 cross network, a top MLP and sigmoid + BCE. Dense
 *        gradients are averaged over the global group by a bucketer that overlaps the backward.
 *
 * One model per rank; every rank of the world communicator creates it with the same config.
 * Each rank's loss is the mean over its local batch, so (embedding gradient rule / S, the
 * replica average / R, the dense average / W) the step equals one model trained on the global
 * batch when the optimizers are SGD without weight decay (tests/examples/dlrm_exact_test.cc).
 */
#ifndef DLRM_MODEL_H_
#define DLRM_MODEL_H_

#include <stddef.h>
#include <stdint.h>

#include "shardrec/shardrec.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DLRM_INTERACTION_DOT 0
#define DLRM_INTERACTION_DCN 1

typedef struct dlrm_config {
  int num_dense;         /* dense features per sample (Criteo: 13) */
  int num_sparse;        /* sparse features = tables (Criteo: 26), one id per sample each */
  const int64_t* rows;   /* num_sparse table sizes */
  int emb_dim;           /* embedding width, = the bottom MLP's output width */
  const int64_t* bottom; /* bottom MLP widths; the last must equal emb_dim */
  int num_bottom;
  const int64_t* top; /* top MLP widths; the last must be 1 */
  int num_top;
  int interaction;                              /* DLRM_INTERACTION_DOT or DLRM_INTERACTION_DCN */
  int dcn_layers;                               /* cross layers (DCN only) */
  int dcn_rank;                                 /* low rank of each cross layer (DCN only) */
  shardrec_optimizer_config_t sparse_optimizer; /* fused into the embedding backward */
  shardrec_optimizer_config_t dense_optimizer;  /* SGD, Adagrad or Adam/AdamW */
  int shard_size;             /* S: ranks per sharding group; must divide the world size */
  int local_batch;            /* samples per rank per step */
  uint64_t seed;              /* initial values (identical on every rank) */
  int embedding_threads;      /* host threads of the collection (0: the calling thread) */
  int64_t first_bucket_bytes; /* 0: 1 MiB */
  int64_t bucket_cap_bytes;   /* 0: 25 MiB */
  int sync_interval;          /* 2D: replica groups average every N steps; 0: 1 (exact) */
  /* Non-NULL: every table is dynamic (docs/dynamic-tables.md), configured by it (borrowed
     until dlrm_create returns): ids are raw 64-bit values and rows[f] is table f's capacity;
     in 2D each replica sync merges the replica groups' rows by id. NULL (the default): fixed
     tables, ids in [0, rows[f]). */
  const shardrec_dynamic_table_config_t* dynamic;
  /* Non-NULL: table tier_table's rows and optimizer state live on local disk under a DRAM cache
     of tier_cache_bytes per rank (docs/disk-tier.md), in tier_dir/rank<R>, one directory per
     rank. Tiered tables take no replica groups: shard_size must be the world size. */
  const char* tier_dir;
  int tier_table;
  int64_t tier_cache_bytes;
  /* Every table's weight storage (a SHARDREC_DTYPE_* weight type; 0: FLOAT32). FP8 tables take
     no replica groups (shard_size must be the world size) and no dynamic tables. */
  int32_t table_dtype;
} dlrm_config_t;

/* Seconds spent per phase, summed over training steps. */
typedef struct dlrm_timings {
  int64_t steps;
  double bottom_fwd, embedding_fwd, interaction_fwd, top_fwd, loss;
  double top_bwd, interaction_bwd, embedding_bwd, bottom_bwd;
  double dense_sync_wait, dense_optimizer, replica_sync, total;
  /* The embedding forward's phases (the collection's step timings of the training forwards;
     evaluation forwards are not counted): routing and id exchange, lookup, return exchange. */
  double input_dist, lookup, output_dist;
} dlrm_timings_t;

typedef struct dlrm dlrm_t;

/* Fills *config with a small Criteo-shaped default (rows given by the caller). */
void dlrm_config_defaults(dlrm_config_t* config);

/*
 * Collective over @p world: plans the tables for one sharding group, builds the mesh, the
 * collection, the MLPs (and the cross network) and the bucketer. Returns SHARDREC_OK or the
 * failing call's status (the message is in shardrec_last_error()).
 */
shardrec_status_t dlrm_create(dlrm_t** out, const dlrm_config_t* config, shardrec_comm_t* world);
void dlrm_destroy(dlrm_t* model);

/*
 * One training step on this rank's local batch: dense [B, num_dense], ids [num_sparse, B]
 * (feature-major, one id per sample and feature), labels [B] in {0, 1}. Collective.
 * *loss receives the mean BCE over the local batch; logits (optional) the B outputs before
 * the sigmoid.
 */
shardrec_status_t dlrm_train_step(dlrm_t* model, const float* dense, const int64_t* ids,
                                  const float* labels, double* loss, float* logits);

/*
 * Forward only (evaluation): logits [B] of a local batch laid out as for dlrm_train_step.
 * Computes no gradient and takes no optimizer step: parameters, optimizer state and the
 * training timings are unchanged, and the next dlrm_train_step is the same as without this
 * call. Collective (the embedding lookup exchanges ids and rows).
 */
shardrec_status_t dlrm_predict(dlrm_t* model, const float* dense, const int64_t* ids,
                               float* logits);

const dlrm_timings_t* dlrm_timings(const dlrm_t* model);
shardrec_embedding_t* dlrm_embedding(dlrm_t* model);
shardrec_mesh_t* dlrm_mesh(dlrm_t* model);
/* The plan of one sharding group (S ranks), shared by every group. */
const shardrec_plan_t* dlrm_plan(const dlrm_t* model);
shardrec_ddp_t* dlrm_ddp(dlrm_t* model);

/* Every dense parameter tensor of the model (bottom, cross, top) in registration order. */
size_t dlrm_num_dense_tensors(const dlrm_t* model);
shardrec_status_t dlrm_dense_tensor(const dlrm_t* model, size_t index, shardrec_dense_param_t* out);

/* Table name of sparse feature f ("t0", "t1", ...). */
const char* dlrm_table_name(const dlrm_t* model, int f);

#ifdef __cplusplus
}
#endif

#endif /* DLRM_MODEL_H_ */
