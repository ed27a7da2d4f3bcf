/**
 * @file shardrec/ddp.h
 * @brief Data-parallel training of dense parameters: DDP-style gradient bucketing with
 *        communication overlapping the backward (Li et al., VLDB 2020), and a fully sharded
 *        variant (FSDP / ZeRO-3, Zhao et al., VLDB 2023).
 *
 * Bucketer. The host registers the element counts of its dense gradients (any number, any
 * sizes, in its own order). The library assigns them to buckets: in reverse registration order
 * (a backward produces the last layer's gradients first), the first bucket closing at
 * first_bucket_bytes (1 MiB), the others at bucket_cap_bytes (25 MiB). Each gradient is a view
 * into its bucket's storage (no copies) unless the host points it at its own buffer. During the
 * backward, the host calls shardrec_ddp_mark_ready for each gradient once it is final; as soon
 * as a bucket is complete its average over the group starts on the bucketer's communication
 * thread, overlapping the rest of the backward. shardrec_ddp_finish waits for every bucket.
 * After the first synced step the buckets are rebuilt once in the order gradients became ready
 * on rank 0 (so the next steps launch as early as possible), as PyTorch's DDP does.
 *
 * The average is a rank-ordered reduce-scatter followed by an all-gather, so every rank ends
 * with bit-identical gradients, and the result does not depend on the bucket layout.
 *
 * Collective order: create, mark_ready (which launches buckets), finish and destroy are
 * collective over the group: every rank registers the same counts, marks the same set of
 * gradients each step and calls finish. The bucketer communicates on a private split of the
 * communicator, so the caller may keep using its communicator from its own thread (e.g. for
 * the embedding collection) while buckets are in flight.
 *
 * Thread-safety: a handle is used by one thread at a time (detected: SHARDREC_EUSAGE).
 * Buffers: host memory only in this release.
 */
#ifndef SHARDREC_DDP_H_
#define SHARDREC_DDP_H_

#include <stddef.h>

#include "shardrec/common.h"
#include "shardrec/config.h"

SHARDREC_BEGIN_DECL

typedef struct shardrec_ddp shardrec_ddp_t;   /**< A gradient bucketer. */
typedef struct shardrec_fsdp shardrec_fsdp_t; /**< Fully sharded parameters. */

/** Gradient compression of the bucketer (stored as int32_t). */
typedef enum shardrec_ddp_compression {
  SHARDREC_DDP_COMPRESSION_NONE = 0, /**< fp32 averages: exact rank-ordered mean. */
  SHARDREC_DDP_COMPRESSION_BF16 = 1  /**< Gradients travel as bfloat16 (round to nearest even)
                                          and are summed in bfloat16 in rank order: half the
                                          bytes. Each input, partial sum and the average round
                                          once (up to 2^-8 relative: bf16 has 8 significant
                                          bits), so with W ranks each averaged element is
                                          within (W + 1) * 2^-8 of mean_r |g_r| of the exact
                                          mean, to first order (tested at W = 2, 3 and 4, with
                                          an input pair that reaches 0.62 of it). */
} shardrec_ddp_compression_t;

#define SHARDREC_DDP_OPTIONS_VERSION 1u

/** Options of shardrec_ddp_create. Zero fields take the documented default. */
typedef struct shardrec_ddp_options {
  uint32_t version;           /**< SHARDREC_DDP_OPTIONS_VERSION. */
  int64_t first_bucket_bytes; /**< Cap of the first bucket; 0 means 1 MiB. */
  int64_t bucket_cap_bytes;   /**< Cap of the other buckets; 0 means 25 MiB. */
  int32_t compression;        /**< A shardrec_ddp_compression_t; 0 is none. */
} shardrec_ddp_options_t;

#define SHARDREC_DDP_OPTIONS_INIT \
  { SHARDREC_DDP_OPTIONS_VERSION, 0, 0, 0 }

/** Counters of a bucketer (shardrec_ddp_stats). */
typedef struct shardrec_ddp_stats {
  int64_t steps;          /**< Synced steps finished. */
  int64_t buckets;        /**< Current number of buckets. */
  double comm_seconds;    /**< Time the communication thread spent averaging, all steps. */
  double exposed_seconds; /**< Time finish waited for communication, all steps (the part of
                               the communication the backward did not hide). */
  int64_t bytes_reduced;  /**< Gradient bytes exchanged per synced step (after compression). */
} shardrec_ddp_stats_t;

/**
 * Fills @p options with the defaults for struct version @p version.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_ddp_options_init(shardrec_ddp_options_t* options,
                                                         uint32_t version);

/**
 * Creates a bucketer over @p comm (collective; typically the GLOBAL group, also in 2D).
 * @param counts      num_tensors element counts (>= 0), the same on every rank (checked: a
 *                    mismatch is SHARDREC_EINVAL on every rank, naming the first rank that
 *                    differs).
 * @param options     NULL for the defaults; the same on every rank (checked over a host
 *                    communicator: the bucket caps cut every all-reduce and compression encodes
 *                    it, so options that differ are SHARDREC_EINVAL on every rank).
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_ENOMEM; SHARDREC_EREMOTE / SHARDREC_ETIMEOUT
 *         when a peer fails during the check. A rank refusing its own arguments (a NULL @p out
 *         or @p counts, bad options, an impossible count) still meets its peers' agreement over
 *         a host communicator: every rank fails at once, the peers with SHARDREC_EINVAL naming
 *         the lowest refusing rank. A NULL @p comm fails on its rank alone.
 */
SHARDREC_API shardrec_status_t shardrec_ddp_create(shardrec_ddp_t** out, shardrec_comm_t* comm,
                                                   const int64_t* counts, size_t num_tensors,
                                                   const shardrec_ddp_options_t* options);

/** Destroys @p ddp after its in-flight buckets complete; NULL is a no-op. */
SHARDREC_API void shardrec_ddp_destroy(shardrec_ddp_t* ddp);

/**
 * Gradient storage of tensor @p index: a view into its bucket (valid until the bucketer is
 * destroyed; the address changes once, when the buckets are rebuilt after the first synced
 * step: rebind after that step, or query every step) or the external buffer set for it.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL, index out of range).
 */
SHARDREC_API shardrec_status_t shardrec_ddp_grad(const shardrec_ddp_t* ddp, size_t index,
                                                 float** out);

/**
 * Makes tensor @p index's gradient live in caller storage @p grad (count floats, kept alive by
 * the caller): its bucket copies it in and out around the exchange. Use when a host framework
 * owns its gradients. A NULL @p grad gives the tensor back its bucket storage.
 * @return SHARDREC_OK; SHARDREC_EINVAL.
 */
SHARDREC_API shardrec_status_t shardrec_ddp_set_external(shardrec_ddp_t* ddp, size_t index,
                                                         float* grad);

/**
 * Zeroes every gradient (bucket-owned and external). Refused between the first
 * shardrec_ddp_mark_ready of a step and shardrec_ddp_finish, while buckets may be in flight.
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_EUSAGE (in the middle of a step; nothing zeroed).
 */
SHARDREC_API shardrec_status_t shardrec_ddp_zero_grad(shardrec_ddp_t* ddp);

/**
 * Tensor @p index's gradient is final for this step; launches every bucket that is now complete
 * (in bucket order). With sync off (shardrec_ddp_set_sync), only records. From here until
 * shardrec_ddp_finish the gradient belongs to the bucketer: the caller must not write it (a
 * launched bucket reads and rewrites it on a worker thread). A refusal (below) fails this rank
 * alone without launching anything, as if the call were skipped: every rank's finish still
 * launches every bucket in the same order, and fails naming a rank that left a gradient
 * unmarked, so no rank waits for another here.
 * @return SHARDREC_OK; SHARDREC_EINVAL (index out of range); SHARDREC_EUSAGE (marked twice in
 *         one step); SHARDREC_EREMOTE after a communication failure.
 */
SHARDREC_API shardrec_status_t shardrec_ddp_mark_ready(shardrec_ddp_t* ddp, size_t index);

/**
 * Completes the step: waits for every bucket; the gradients then hold the group average.
 * A tensor never marked ready on a rank fails the step on every rank with SHARDREC_EUSAGE: that
 * rank's error names the tensor, the others' name that rank (its bucket is still exchanged so the
 * ranks stay in step, and one small all-reduce after the buckets tells every rank). The averaged
 * gradients of such a step include a buffer that was not a gradient and must not be applied on
 * any rank. With sync off (shardrec_ddp_set_sync) nothing is exchanged, and only the rank that
 * missed a tensor fails.
 * @param ddp [in,out] Not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL @p ddp); SHARDREC_EUSAGE (as above, or another
 *         thread is using @p ddp); SHARDREC_EREMOTE; SHARDREC_ETIMEOUT.
 */
SHARDREC_API shardrec_status_t shardrec_ddp_finish(shardrec_ddp_t* ddp);

/**
 * no_sync: with @p enabled 0, the following steps only accumulate gradients locally
 * (mark_ready and finish exchange nothing); the next step with sync on averages the sums. Every
 * rank must switch at the same step.
 * @return SHARDREC_OK; SHARDREC_EINVAL.
 */
SHARDREC_API shardrec_status_t shardrec_ddp_set_sync(shardrec_ddp_t* ddp, int32_t enabled);

/**
 * Copies the counters into @p out (not NULL), which the caller owns.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL @p ddp or @p out.
 */
SHARDREC_API shardrec_status_t shardrec_ddp_stats(const shardrec_ddp_t* ddp,
                                                  shardrec_ddp_stats_t* out);

/**
 * Tensor indices of bucket @p bucket in launch order: writes up to @p capacity indices to @p out
 * and the bucket's size to @p size (pass out NULL, capacity 0 to query the size).
 * @return SHARDREC_OK; SHARDREC_EINVAL (bucket out of range, capacity too small).
 */
SHARDREC_API shardrec_status_t shardrec_ddp_bucket(const shardrec_ddp_t* ddp, size_t bucket,
                                                   size_t* out, size_t capacity, size_t* size);

/* ---------------------------------------------------------------------------------------- */

/**
 * Creates fully sharded parameters (collective over @p comm): parameters are grouped into flat
 * units (e.g. one per layer); each rank keeps 1/W of every unit's parameters, gradient and
 * optimizer state. A unit's full parameters exist only between gather and release.
 * @param unit_counts  num_units element counts (>= 1), the same on every rank.
 * @param initial      num_units pointers to each unit's full initial values, identical on every
 *                     rank (each rank copies its slice; the caller keeps ownership).
 * @param optimizer    As shardrec_dense_optimizer_create (SGD, Adagrad, Adam/AdamW); the same on
 *                     every rank (checked over a host communicator: type and settings that
 *                     differ are SHARDREC_EINVAL on every rank).
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_ENOMEM; SHARDREC_EREMOTE / SHARDREC_ETIMEOUT.
 *         A rank refusing its own arguments (NULL pointers, a bad optimizer, an impossible
 *         count) still meets its peers' agreement over a host communicator: every rank fails at
 *         once, the peers with SHARDREC_EINVAL naming the lowest refusing rank. A NULL @p comm
 *         fails on its rank alone.
 */
SHARDREC_API shardrec_status_t shardrec_fsdp_create(shardrec_fsdp_t** out, shardrec_comm_t* comm,
                                                    const int64_t* unit_counts,
                                                    const float* const* initial, size_t num_units,
                                                    const shardrec_optimizer_config_t* optimizer);

/** Destroys @p fsdp after in-flight exchanges complete; NULL is a no-op. */
SHARDREC_API void shardrec_fsdp_destroy(shardrec_fsdp_t* fsdp);

/**
 * Full parameters of unit @p unit, valid until shardrec_fsdp_release(unit) or the next step
 * (collective: every rank gathers the same units in the same order). Waits for a prefetch of
 * the unit if one is in flight; with @p prefetch >= 0 also starts gathering that unit in the
 * background (overlapping the caller's compute on this one). A rank refusing its own arguments
 * (a NULL @p full, @p unit or @p prefetch out of range) fails alone, before any exchange, and
 * the other ranks wait in their gather until their timeout: agreeing first would cost every
 * gather a round trip on the caller's thread, so this call does not (give every rank the same
 * arguments).
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_EREMOTE; SHARDREC_ETIMEOUT.
 */
SHARDREC_API shardrec_status_t shardrec_fsdp_gather(shardrec_fsdp_t* fsdp, size_t unit,
                                                    int64_t prefetch, float** full);

/** Frees unit @p unit's full parameters. @return SHARDREC_OK; SHARDREC_EINVAL. */
SHARDREC_API shardrec_status_t shardrec_fsdp_release(shardrec_fsdp_t* fsdp, size_t unit);

/**
 * The unit's full gradient buffer for this step (zeroed when first handed out in a step); the
 * backward accumulates into it. Valid until shardrec_fsdp_reduce_grad(unit).
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_EUSAGE (already reduced this step).
 */
SHARDREC_API shardrec_status_t shardrec_fsdp_grad(shardrec_fsdp_t* fsdp, size_t unit, float** full);

/**
 * Starts averaging unit @p unit's gradient into this rank's shard (asynchronously, collective);
 * the full buffer is freed afterwards. A rank refusing its own arguments (@p unit out of range,
 * or already reduced this step) fails alone without starting anything, as if it had skipped the
 * call; its shardrec_fsdp_step then reduces the units it missed, in unit order, after those it
 * started. That pairs with the other ranks' reductions only when they reduced the missed units
 * in the same place of their order (e.g. last, in unit order); otherwise the reductions pair
 * wrongly (wrong averages, or over Gloo the end of the process when the units' sizes differ).
 * Give every rank the same arguments.
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_EUSAGE.
 */
SHARDREC_API shardrec_status_t shardrec_fsdp_reduce_grad(shardrec_fsdp_t* fsdp, size_t unit);

/**
 * Waits for every reduction and applies the optimizer to the local shards; gradients are
 * cleared. A unit this rank never reduced this step is reduced here with zeros from this rank
 * and updated like every other unit, so the model stays identical on every rank whichever ranks
 * missed it; the call then returns SHARDREC_EUSAGE naming the unit. After SHARDREC_EREMOTE or
 * SHARDREC_ETIMEOUT nothing is applied.
 * @param fsdp [in,out] Not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL @p fsdp); SHARDREC_EUSAGE (as above, or another
 *         thread is using @p fsdp); SHARDREC_EREMOTE; SHARDREC_ETIMEOUT.
 */
SHARDREC_API shardrec_status_t shardrec_fsdp_step(shardrec_fsdp_t* fsdp);

/**
 * This rank's slice of unit @p unit: *data (owned by the handle, valid until destruction),
 * *offset its first element in the unit and *count its length (the unit is cut into W blocks
 * of ceil(count / W) elements in rank order; the last blocks may be short or empty).
 * @return SHARDREC_OK; SHARDREC_EINVAL.
 */
SHARDREC_API shardrec_status_t shardrec_fsdp_shard(shardrec_fsdp_t* fsdp, size_t unit, float** data,
                                                   int64_t* offset, int64_t* count);

/**
 * Host bytes this rank holds now and at most so far (shards, optimizer state, gathered units,
 * gradient buffers). Either pointer may be NULL. @return SHARDREC_OK; SHARDREC_EINVAL.
 */
SHARDREC_API shardrec_status_t shardrec_fsdp_memory(const shardrec_fsdp_t* fsdp, int64_t* current,
                                                    int64_t* peak);

SHARDREC_END_DECL

#endif /* SHARDREC_DDP_H_ */
