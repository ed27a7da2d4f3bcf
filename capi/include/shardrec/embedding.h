/**
 * @file shardrec/embedding.h
 * @brief The sharded embedding collection: forward (input distribution, lookup, output
 *        distribution), backward with a fused optimizer, pipelined input distribution, and
 *        full-table accessors for weights and optimizer states.
 *
 * A collection is created by every rank of a communicator from the same plan (plan.h). Each
 * rank stores the shards the plan gives it; every id of a batch is sent to the rank(s) that
 * hold its row, looked up there, and the results come back to the rank that owns the sample.
 * The options of a collection and the policies they select are in shardrec/embedding_options.h
 * (included here).
 *
 * Semantics (the same for every sharding type, and equal to one unsharded table trained on
 * the concatenation of all ranks' batches, up to float rounding):
 *  - Pooled collections (every table SUM or MEAN) return `[B, output_dim]` floats, row-major:
 *    for each feature in plan order, for each table reading it (table order), that table's
 *    `dim` columns. MEAN divides the sum by the bag length, or by the sum of the bag's weights
 *    for a weighted batch; an empty bag (or a zero divisor) gives zeros.
 *  - Sequence collections (every table NONE) return one row per id: `[num_values, dim]` in the
 *    order of the batch's values; with a weighted batch each row is multiplied by its id's
 *    weight (TorchRec's EmbeddingCollection ignores per-id weights; libshardrec applies them,
 *    and the gradient follows). All tables of a sequence collection share one dim and each
 *    feature is read by at most one table. A plan that mixes pooled and NONE tables is
 *    rejected (SHARDREC_EUNSUPPORTED): make one collection per kind.
 *  - Gradient rule (TorchRec's): the gradient applied to a row is the sum, over all
 *    occurrences of the row in the batches of all W ranks of the collection's communicator, of
 *    the output gradient times the id's weight (divided by the bag divisor for MEAN), divided
 *    by W. With equal local batches this is the gradient of the mean loss over the global
 *    batch when each rank's loss is the mean over its local batch. Data-parallel tables divide
 *    by the size of the data-parallel group instead (options.dp_comm, default the same W).
 *  - Optimizers are exact: duplicate ids (in a bag, across bags, features and ranks) are summed
 *    before one update per row; rows not in the global batch are untouched. Row-wise state
 *    (row-wise Adagrad, partial row-wise Adam, LAMB norms) always covers the full row, also
 *    when the plan splits the row over column shards.
 *  - Initial weights: element (row, col) of table t is low + (high - low) * U(seed, t's name,
 *    row, col) with a counter-based U, so they do not depend on the plan or the world size.
 *  - Weight storage: each table stores its weights in its plan dtype, SHARDREC_DTYPE_FLOAT32,
 *    FLOAT16 or BFLOAT16 (a 16-bit table takes half the memory of an fp32 one). All math is
 *    fp32: lookups widen 16-bit rows exactly and accumulate in fp32, the optimizer computes the
 *    update in fp32 and rounds the new weights back to the storage type (round to nearest even,
 *    or stochastically with shardrec_optimizer_config_t.stochastic_rounding). Initial weights
 *    are the fp32 values above rounded to nearest even. Optimizer states are always fp32. The
 *    accessors speak fp32: get_weights returns the stored values widened (exactly), set_weights
 *    rounds to the storage type (nearest even).
 *    SHARDREC_DTYPE_FP8_E4M3 / FP8_E5M2 tables (host collections only) store each row as an fp32
 *    power-of-two scale and one 8-bit code a value (4 + dim bytes): lookups decode exactly, the
 *    optimizer computes in fp32 and encodes the whole updated row again, deterministically (the
 *    scale from the row's largest finite magnitude, each value to nearest even, saturating, or
 *    stochastically with stochastic_rounding); get_weights decodes, set_weights encodes each
 *    row. Error bound, the rounding in full and the limits (no column split, no dynamic or
 *    tiered table; a 2D sync averages decoded rows and encodes them again): docs/semantics.md,
 *    "FP8 weights".
 *
 * Thread-safety: one thread at a time per collection handle (the background input
 * distribution thread is internal). Different collections may be used concurrently, except that
 * a device may hold only one GPU collection over an NCCL communicator in use at a time: two used
 * from two threads on one device can deadlock (a buffer growth's cudaFree synchronises the device
 * while the other's collective waits for its peers).
 * Device: a collection lives on the host or, with options->device_type, on one CUDA device (GPU
 * collection, see shardrec_embedding_options_t.device_type). A GPU collection queues its device
 * work on a stream of its own. Calls with host buffers return with that work complete. Calls
 * given CUDA views on the collection's device are stream-ordered where noted
 * (shardrec_embedding_forward_tensor, _forward_distributed_tensor, _backward_tensor): they return
 * with their device work queued, ordered after the work already queued on the caller's `stream`
 * and before the work queued on it afterwards, and what that work finds (a rejected backward on
 * any rank, a device failure) is returned by the next call that synchronises
 * (shardrec_embedding_synchronize, and every call documented as synchronising).
 */
#ifndef SHARDREC_EMBEDDING_H_
#define SHARDREC_EMBEDDING_H_

#include "shardrec/common.h"
#include "shardrec/config.h"
#include "shardrec/embedding_options.h"
#include "shardrec/tensor.h"

SHARDREC_BEGIN_DECL

/**
 * Creates this rank's part of a sharded collection. Collective: every rank of @p comm calls it
 * with the same plan (checked through the plan hash) and the same options and optimizer
 * (checked through a digest of the seed, bounds and non-finite policies, communication
 * encodings, each table's optimizer settings and the tier cache_bytes of a column-split table
 * whose optimizer keeps row statistics; the thread count, huge pages, capacity hints and other
 * tiers may differ), and all ranks fail together if one rejects its arguments. Allocates all local
 * shard weights (one arena per weight dtype) and optimizer states (one fp32 arena) and initialises
 * the weights.
 * @param out       [out] Receives the collection; must not be NULL. Set only on success.
 * @param plan      [in] The plan; must not be NULL. Shared: the caller may destroy it after.
 * @param comm      [in] Communicator whose size equals the plan's world size; must not be
 *                  NULL. Shared: the collection keeps it alive. The collection also splits
 *                  a private communicator off it for the input distribution (of every
 *                  forward, pipelined or not), which keeps the timeout @p comm had at
 *                  creation: set the timeout before creating the collection.
 * @param optimizer [in] Default optimizer of the tables without their own; NULL means the
 *                  plan's (topology.optimizer, default hyperparameters). Its type must be the
 *                  plan's when some table has no optimizer of its own, else SHARDREC_EINVAL
 *                  names both.
 * @param options   [in] Options; NULL means the defaults.
 * @return SHARDREC_OK; SHARDREC_EINVAL for bad arguments, a size mismatch, different plans or
 *         options on different ranks, or an argument rejected on another rank (the message names
 * it; a rank given a NULL @p out or @p plan still meets its peers' agreement over a host
 *         communicator, so they fail at once rather than at their timeout);
 *         SHARDREC_EUNSUPPORTED for a table dtype other than FLOAT32, FLOAT16, BFLOAT16 or FP8
 *         (and for FP8 tables on a GPU, split into column shards, or dynamic),
 *         pooled and NONE tables in one plan, or what a GPU collection refuses (see
 *         shardrec_embedding_options_t.device_type) or a CUDA device in a build without CUDA
 *         (SHARDREC_CUDA_PLUGIN unset);
 *         SHARDREC_ENODEVICE for a CUDA device without the plugin or that device;
 *         SHARDREC_ENOMEM when this rank's
 *         weights and optimizer states exceed the memory the host has available (MemAvailable
 *         less what collections being created by other threads of this process have claimed,
 *         checked before anything is written, since Linux would map them and kill the process
 *         on first write) or cannot be mapped, or exceed the free memory of a GPU
 *         collection's device (with its per-step buffers sized from the capacity hints, the
 *         message naming their bytes); SHARDREC_EIO when a tiered table's directory or store
 *         cannot be made (shardrec_table_tier_t.dir: a path through a regular file, a name over
 *         the file system's limit; the message names the path and the system's reason);
 *         SHARDREC_ECUDA when a device copy
 *         fails; SHARDREC_ETIMEOUT /
 *         SHARDREC_EREMOTE
 * when a peer does not take part. Thread-safety: each rank calls from its own thread. The caller
 * owns *out.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_create(
    shardrec_embedding_t** out, const shardrec_plan_t* plan, shardrec_comm_t* comm,
    const shardrec_optimizer_config_t* optimizer, const shardrec_embedding_options_t* options);

/**
 * Destroys a collection, waiting for a started input distribution to finish first. Not
 * collective. NULL is a no-op.
 * @param coll [in] Collection to destroy, or NULL.
 */
SHARDREC_API void shardrec_embedding_destroy(shardrec_embedding_t* coll);

/**
 * Width of one output row: the sum of the dims of all (feature, table) pairs for a pooled
 * collection, the common table dim for a sequence collection.
 * @param coll [in] Must not be NULL.  @param out [out] Receives the width; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Not collective.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_output_dim(const shardrec_embedding_t* coll,
                                                             int64_t* out);

/**
 * Whether the collection is a sequence collection (every table NONE-pooled): outputs have one
 * row per id instead of one per sample.
 * @param coll [in] Must not be NULL.  @param out [out] Receives 1 or 0; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Not collective.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_is_sequence(const shardrec_embedding_t* coll,
                                                              int32_t* out);

/**
 * Forward pass of one local batch: input distribution, lookup and output distribution in one
 * call (equivalent to input_dist_start + input_dist_wait + forward_distributed). Collective.
 * The batch is validated before anything is exchanged: a rank whose batch is invalid returns
 * SHARDREC_EINVAL naming the feature, sample, value position and id; every other rank returns
 * SHARDREC_EINVAL saying which rank rejected its batch; nothing changes anywhere.
 * @param coll    [in] Must not be NULL.
 * @param batch   [in] This rank's batch; must not be NULL; borrowed for the call. Host memory,
 *                or, for a GPU collection, memory of its device (see
 *                shardrec_embedding_options_t.device_type); a device KJT is read after the work
 *                already queued on @p stream (it may still be being written there when the call
 *                starts) and is no longer used when the call returns.
 * @param out     [out] Pooled: batch_size x output_dim floats; sequence: num_values x dim.
 *                Overwritten. NULL only when that size is 0.
 * @param out_len Number of floats in @p out; must equal the size above.
 * @param stream  For a device KJT, the cudaStream_t (NULL: the legacy default stream) the
 *                collection's stream waits for (an event, no host wait) before it reads the
 *                batch; ignored otherwise. A GPU collection returns after its device work is
 *                complete (@p out is host memory, written from the rows copied back), so nothing
 *                of the call is left in flight.
 * @return SHARDREC_OK; SHARDREC_EINVAL (a bad batch or a wrong @p out_len, here or on another
 *         rank: every rank's forward fails together and none changes state, so a loop that
 *         skips the backward after a failed forward stays in step on every rank);
 *         SHARDREC_EUSAGE when a started input distribution has not been consumed;
 *         SHARDREC_ETIMEOUT / SHARDREC_EREMOTE on communication failure; with tiered tables
 *         (shardrec/tier.h), SHARDREC_EIO when a store cannot read or write (a full disk: the
 *         next forward tries the write again) and SHARDREC_ECORRUPT for a record that fails its
 *         checksum, naming the table and the store's path, on every rank (docs/disk-tier.md).
 *         Synchronising (GPU collection): it first returns what earlier stream-ordered calls
 *         found (see shardrec_embedding_synchronize; every rank then returns that error and this
 *         batch is not forwarded).
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_forward(shardrec_embedding_t* coll,
                                                          const shardrec_kjt_view_t* batch,
                                                          float* out, size_t out_len, void* stream);

/**
 * Starts the input distribution of a batch: validates and routes it on the calling thread,
 * then exchanges the ids on a background thread over a private communicator, so that it
 * overlaps with the forward/backward of the previous batch. The batch's memory may be reused
 * as soon as this returns. At most one distribution may be in flight. Collective.
 * A rank whose batch is invalid returns SHARDREC_EINVAL here (after telling its peers, whose
 * input_dist_wait then fails); nothing is in flight on any rank afterwards. On a 2D mesh with
 * data-parallel dynamic tables the other sharding groups learn of it in their
 * forward_distributed, whose agreement these ranks join first thing in their next forward call
 * of any kind (docs/dynamic-tables.md, "Data-parallel tables").
 * Over an NCCL communicator (a GPU collection) the exchange completes within this call, on the
 * calling thread, and input_dist_wait returns at once: NCCL promises progress for operations of
 * two communicators only when they are not in flight together and every rank issues them in the
 * same order, which a background exchange beside the caller's backward or 2D sync would break.
 * There a peer's rejection or a communication failure is returned by this call.
 * @param coll   [in] Must not be NULL.
 * @param batch  [in] This rank's batch; must not be NULL; borrowed for the call only.
 * @param stream For a device KJT (GPU collection), the cudaStream_t (NULL: the legacy default
 *               stream) whose queued work the batch is read after, as in
 *               shardrec_embedding_forward; ignored otherwise.
 * @return SHARDREC_OK; SHARDREC_EINVAL for an invalid batch (here or, over NCCL, a peer's);
 *         SHARDREC_EUSAGE when a distribution is already in flight; SHARDREC_EABORTED after
 *         shardrec_comm_abort() and SHARDREC_EUSAGE after a communication failure, at once
 *         (comm.h); over NCCL also SHARDREC_ETIMEOUT / SHARDREC_EREMOTE. Synchronising (GPU
 *         collection), as shardrec_embedding_forward: nothing is then in flight.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_input_dist_start(shardrec_embedding_t* coll,
                                                                   const shardrec_kjt_view_t* batch,
                                                                   void* stream);

/**
 * Waits for the started input distribution. Calling it again after success is a no-op.
 * @param coll   [in] Must not be NULL.
 * @param stream Ignored on the host.
 * @return SHARDREC_OK; SHARDREC_EINVAL when another rank rejected its batch (nothing is in
 *         flight afterwards); SHARDREC_EUSAGE when nothing was started; SHARDREC_ETIMEOUT /
 *         SHARDREC_EREMOTE on communication failure.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_input_dist_wait(shardrec_embedding_t* coll,
                                                                  void* stream);

/**
 * Lookup and output distribution of the batch whose input distribution has been waited for;
 * the result is bit-identical to shardrec_embedding_forward on the same batch. Collective.
 * The batch becomes the one the next backward applies to. A wrong @p out_len (or a NULL
 * @p out) on any rank fails the call on every rank before any state changes: that rank returns
 * SHARDREC_EINVAL saying why, every other rank SHARDREC_EINVAL naming it, and no rank has a batch
 * to train (the next backward fails with SHARDREC_EUSAGE on every rank, as after a failed
 * forward). At world > 1 this costs one all-reduce of one integer per call, except in a
 * collection with dynamic tables, whose forward agrees anyway. A GPU collection over NCCL adds
 * no host synchronisation for it: there the refusing rank still takes part in the exchange and
 * fails alone, its peers' calls succeed, and the next backward fails on every rank (so every
 * rank must still call it).
 * @param coll    [in] Must not be NULL.
 * @param out     [out] As for shardrec_embedding_forward.
 * @param out_len As for shardrec_embedding_forward.
 * @param stream  Ignored on the host.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a wrong @p out_len here or, where the ranks agree
 *         on their buffers, on another rank (on a 2D mesh with data-parallel dynamic tables
 *         also a batch another sharding group refused: see input_dist_start);
 *         SHARDREC_EUSAGE when no distribution was waited for (one that failed in
 *         input_dist_start or input_dist_wait included): that is a failed forward too, so the
 *         next backward fails with SHARDREC_EUSAGE and cannot train the batch before it with
 *         this forward's gradient; SHARDREC_ETIMEOUT / SHARDREC_EREMOTE; with tiered tables
 *         SHARDREC_EIO / SHARDREC_ECORRUPT, as shardrec_embedding_forward.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_forward_distributed(shardrec_embedding_t* coll,
                                                                      float* out, size_t out_len,
                                                                      void* stream);

/**
 * Backward pass of the last forward: sends each output gradient slice back to the shards
 * that produced it, sums the gradient per unique row (see the gradient rule above) and
 * applies the fused optimizer in place; advances the step counter by one. One backward per
 * forward. Collective; if any rank rejects the call, no rank changes anything. With
 * data-parallel tables reduced over another group than the collection's (options.dp_comm; a 2D
 * mesh's world) the verdict is agreed over that group too (one more all-reduce of one integer),
 * so a rejection in one sharding group fails every group's backward (except where a GPU
 * collection agrees on its device: the NCCL paths).
 * @param coll     [in] Must not be NULL.
 * @param grad     [in] Gradient of the last forward's output, same shape; NULL only if empty.
 * @param grad_len Number of floats in @p grad; must equal the last output's size.
 * @param stream   Ignored: a GPU collection returns after its device work is complete (@p grad
 *                 is host memory, read before the call returns).
 * @return SHARDREC_OK; SHARDREC_EINVAL for a wrong size here or a rejection on another rank;
 *         SHARDREC_EUSAGE without a preceding forward, or when the last forward failed (on
 *         any rank: the batch before it is not trained with this gradient), or when the step
 *         counter is at its maximum, 2^53 (nothing changes; see shardrec_embedding_num_steps);
 *         SHARDREC_ETIMEOUT / SHARDREC_EREMOTE;
 *         SHARDREC_ECUDA / SHARDREC_ETIMEOUT when a GPU collection's device work fails (after
 *         the gradient exchange: the step may then be partly applied on that rank). A GPU
 *         collection first returns what an earlier stream-ordered backward found, when one is
 *         still unknown (see shardrec_embedding_synchronize), and then does nothing else.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_backward(shardrec_embedding_t* coll,
                                                           const float* grad, size_t grad_len,
                                                           void* stream);

/**
 * shardrec_embedding_forward with the output as a tensor view that names its device. The view
 * must be SHARDREC_DTYPE_FLOAT32, row-major, with as many elements as shardrec_embedding_forward's
 * @p out_len and, when ndim >= 2, a last dimension equal to the output width
 * (shardrec_embedding_output_dim). A view this rank cannot use is a rejected input: every rank
 * fails the call and nothing changes. Collective.
 *
 * CUDA views (a collection feeding a model that runs on a GPU): a host collection (and a GPU
 * collection whose output is combined in host memory: rows exchanged over a host communicator at
 * world > 1, 16-bit return messages) writes the output to a pinned staging block it owns, copies
 * that to the view on @p stream after the work already queued there and waits for the copy, at
 * most the communicator's timeout, before returning; the view may then be read by later work on
 * any stream. A GPU collection on the view's device that combines on the device (world 1, or an
 * NCCL communicator; pooled or sequence) is stream-ordered instead: it returns with its lookup
 * phase queued on its own stream (the forward's one wait is its counts exchange over NCCL, which
 * learns the received sizes; none at world 1 unless an earlier stream-ordered call is to be
 * learnt), that phase writes the view device to device after the work already queued on
 * @p stream, and the work queued on @p stream after the call is ordered after that write: read
 * the view on @p stream (or on another stream after an event recorded on @p stream, or on the host
 * after synchronising @p stream); do not write it until that work is done. A failure the lookup
 * phase finds on the device (an internal error: a row outside its shard, an id message whose
 * lengths disagree with its counts; a peer lost during its exchanges) is returned by the next
 * synchronising call (shardrec_embedding_synchronize, the next forward or input_dist_start, an
 * accessor, a checkpoint, a 2D sync) on this rank; its peers may then time out. The batch may be
 * reused as soon as the call returns (a device KJT is read before it returns). A CUDA view needs
 * the CUDA plugin and that device (shardrec_device_check): without them the view is a rejected
 * input (SHARDREC_ENODEVICE on this rank). If a staged copy itself fails (SHARDREC_ECUDA,
 * SHARDREC_ETIMEOUT), the forward has already taken place on every rank and the view's contents
 * are undefined; a backward may follow.
 * @param coll   [in] Must not be NULL.
 * @param batch  [in] As for shardrec_embedding_forward.
 * @param out    [in] The output view; must not be NULL; its memory is overwritten.
 * @param stream For a CUDA view, the cudaStream_t (NULL: the legacy default stream) the write of
 *               the view is ordered on (see above); ignored for a host view. A device KJT is
 *               read after the work already queued on it too (shardrec_embedding_forward).
 * @return As shardrec_embedding_forward (synchronising, as it is); SHARDREC_EINVAL also for a
 *         malformed view; SHARDREC_ENODEVICE for a CUDA view without a usable device;
 *         SHARDREC_ECUDA / SHARDREC_ETIMEOUT when the copy to the device fails.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_forward_tensor(shardrec_embedding_t* coll,
                                                                 const shardrec_kjt_view_t* batch,
                                                                 const shardrec_tensor_view_t* out,
                                                                 void* stream);

/**
 * shardrec_embedding_forward_distributed with the output as a tensor view (see
 * shardrec_embedding_forward_tensor for the view's rules). A view this rank cannot use behaves
 * like a wrong @p out_len there (see shardrec_embedding_forward_distributed).
 * A CUDA view is written on @p stream's order as in shardrec_embedding_forward_tensor (staged and
 * waited for, or stream-ordered: this call has no wait of its own then).
 * @param coll   [in] Must not be NULL.
 * @param out    [in] The output view; must not be NULL.
 * @param stream For a CUDA view, the stream the write is ordered on; ignored for a host view.
 * @return As shardrec_embedding_forward_distributed; SHARDREC_ENODEVICE for a CUDA view without
 *         a usable device; SHARDREC_ECUDA / SHARDREC_ETIMEOUT when the copy to the device fails.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_forward_distributed_tensor(
    shardrec_embedding_t* coll, const shardrec_tensor_view_t* out, void* stream);

/**
 * shardrec_embedding_backward with the gradient as a tensor view (same rules as the output view
 * of shardrec_embedding_forward_tensor). A view this rank cannot use rejects the call on every
 * rank; nothing changes. Collective.
 *
 * A CUDA view is copied into a pinned staging block on @p stream (so after the work that
 * produced it there) and the copy is waited for, at most the communicator's timeout, before the
 * step; a view that cannot be copied (no plugin or device, a CUDA error, a timeout) rejects the
 * step on every rank with nothing changed. The view may be overwritten once the call returns.
 *
 * Stream-ordered: a GPU collection that reads the view on its device (world 1, or an NCCL
 * communicator with fp32 messages; a plugin with the gated backward) returns with the whole step
 * queued on its own stream, with no host wait: the view is read after the work already queued on
 * @p stream, and the work queued on @p stream after the call is ordered after those reads (so it
 * may overwrite the view; the host or another stream must first synchronise @p stream). The
 * step's verdict is agreed between the ranks on the device and gates its updates there: a
 * rejection on any rank (a non-finite element, a wrong size, a refused output, a view this rank
 * cannot use) changes no weight or state anywhere, and is returned on every rank by the next
 * synchronising call (shardrec_embedding_synchronize, or the next forward, input_dist_start,
 * backward, accessor, checkpoint or 2D sync, which then does nothing else): this rank's own error
 * on the rank that rejected, "rank N rejected its last backward call" on the others. The step
 * counter counts the step when the call returns and takes it back then; the batch may be trained
 * again with a new backward while it is still the last one forwarded. A device failure found by
 * the step is returned there too.
 * @param coll   [in] Must not be NULL.
 * @param grad   [in] The gradient view; must not be NULL; read only.
 * @param stream For a CUDA view, the stream the reads are ordered on; ignored for a host view.
 * @return As shardrec_embedding_backward; SHARDREC_ENODEVICE, SHARDREC_ECUDA or SHARDREC_ETIMEOUT
 *         on the rank whose CUDA view could not be copied (SHARDREC_EINVAL on its peers).
 *         Stream-ordered: SHARDREC_OK once queued (see above), or at once the errors of
 *         shardrec_embedding_backward that need no device work (no forward first).
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_backward_tensor(
    shardrec_embedding_t* coll, const shardrec_tensor_view_t* grad, void* stream);

/**
 * Waits for the device work a GPU collection's stream-ordered calls left queued (bounded: at most
 * 300 s, then SHARDREC_ETIMEOUT) and returns what that work found, once: the first of a device
 * failure (SHARDREC_ECUDA, SHARDREC_ETIMEOUT), a rejected stream-ordered backward (SHARDREC_EINVAL
 * with this rank's own error, or naming the rank that rejected; the same on every rank: no weight
 * or state changed, the step counter is taken back, and the batch may be trained again while it is
 * still the last one forwarded), an internal error found on this rank's device (a row outside its
 * shard, an id message whose lengths disagree with its counts: SHARDREC_EINTERNAL), a peer lost
 * during a queued exchange (SHARDREC_ETIMEOUT / SHARDREC_EREMOTE). Every synchronising call does
 * this first. A host collection, or nothing queued: SHARDREC_OK at once. Not collective: every
 * rank learns the same outcome of a backward.
 * @param coll [in] Must not be NULL.
 * @return As above; SHARDREC_EINVAL for NULL.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_synchronize(shardrec_embedding_t* coll);

/**
 * Sets the learning rate used by the following backward calls (learning-rate schedules).
 * Not collective, but every rank should set the same value.
 * @param coll [in] Must not be NULL.  @param learning_rate Finite and >= 0.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an invalid rate.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_set_learning_rate(shardrec_embedding_t* coll,
                                                                    float learning_rate);

/**
 * Number of optimizer steps taken (backward calls), the `t` of Adam's bias correction. A GPU
 * collection's stream-ordered backward (shardrec_embedding_backward_tensor) counts when it
 * returns; a rejection learnt later (shardrec_embedding_synchronize) takes it back. The count
 * stays at most 2^53 (9007199254740992, the largest Adam's `t`, a double, holds exactly): a
 * backward at 2^53 is refused with SHARDREC_EUSAGE and changes nothing (a stream-ordered one
 * counts until the synchronisation that reports the refusal, like its other rejections), so
 * the counter never wraps and every checkpoint of it loads.
 * @param coll [in] Must not be NULL.  @param out [out] Receives the count; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Not collective.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_num_steps(const shardrec_embedding_t* coll,
                                                            int64_t* out);

/**
 * Sets the step counter (restoring a checkpoint). Every rank should set the same value.
 * @param coll [in] Must not be NULL.  @param steps In [0, 2^53] (see shardrec_embedding_num_steps).
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or a value out of range (nothing changes). Not
 *         collective.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_set_num_steps(shardrec_embedding_t* coll,
                                                                int64_t steps);

/**
 * Copies a table's full weights `[rows, dim]` (row-major) into @p out on every rank, gathered
 * from the ranks holding its shards. Collective: every rank calls it with the same table.
 * Always fp32: the weights of a FLOAT16/BFLOAT16 table are widened exactly.
 * @param coll  [in] Must not be NULL.
 * @param table [in] NUL-terminated table name; must not be NULL.
 * @param out   [out] rows x dim floats; must not be NULL.
 * @param len   Number of floats in @p out; must equal rows x dim.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table; SHARDREC_EINVAL for a NULL
 *         @p table or a wrong @p len (here or on another rank); SHARDREC_ETIMEOUT /
 *         SHARDREC_EREMOTE.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_get_weights(shardrec_embedding_t* coll,
                                                              const char* table, float* out,
                                                              size_t len);

/**
 * Replaces a table's weights with a full `[rows, dim]` table: each rank copies the parts of
 * its own shards from its @p weights, so every rank must pass the same values. Collective;
 * if any rank rejects the call, no rank changes anything. Optimizer states are unchanged.
 * The values are fp32; a FLOAT16/BFLOAT16 table stores each rounded to nearest even (values
 * beyond the type's range become infinities).
 * @param coll    [in] Must not be NULL.
 * @param table   [in] NUL-terminated table name; must not be NULL.
 * @param weights [in] rows x dim floats; must not be NULL; not retained.
 * @param len     Number of floats; must equal rows x dim.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table; SHARDREC_EINVAL for a NULL
 *         @p table or a wrong @p len (here or on another rank); SHARDREC_ETIMEOUT / EREMOTE.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_set_weights(shardrec_embedding_t* coll,
                                                              const char* table,
                                                              const float* weights, size_t len);

/**
 * Number of optimizer state tensors per table (0 for SGD).
 * @param coll [in] Must not be NULL.  @param out [out] Receives the count; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Not collective.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_num_states(const shardrec_embedding_t* coll,
                                                             size_t* out);

/**
 * Name and shape kind of one optimizer state ("momentum1", "momentum2").
 * @param coll         [in] Must not be NULL.
 * @param index        State index, < shardrec_embedding_num_states().
 * @param name_out     [out] Receives a NUL-terminated name owned by the collection (valid
 *                     until it is destroyed); must not be NULL.
 * @param row_wise_out [out] Receives 1 for one value per row (`[rows]`), 0 for one value per
 *                     element (`[rows, dim]`); may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments or an index out of range.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_state_info(const shardrec_embedding_t* coll,
                                                             size_t index, const char** name_out,
                                                             int32_t* row_wise_out);

/**
 * Copies one full optimizer state of a table (`[rows]` or `[rows, dim]`) into @p out on every
 * rank. Collective.
 * @param coll  [in] Must not be NULL.
 * @param table [in] Table name; must not be NULL.
 * @param state [in] State name (see shardrec_embedding_state_info); must not be NULL.
 * @param out   [out] Destination; must not be NULL.
 * @param len   Number of floats in @p out; must equal the state's size.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table or state; SHARDREC_EINVAL for a
 *         NULL @p table or @p state or a wrong @p len (here or on another rank);
 *         SHARDREC_ETIMEOUT / SHARDREC_EREMOTE.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_get_state(shardrec_embedding_t* coll,
                                                            const char* table, const char* state,
                                                            float* out, size_t len);

/**
 * Replaces one full optimizer state of a table; every rank passes the same values and keeps
 * its own part. Collective; if any rank rejects the call, no rank changes anything.
 * @param coll   [in] Must not be NULL.
 * @param table  [in] Table name; must not be NULL.
 * @param state  [in] State name; must not be NULL.
 * @param values [in] `[rows]` or `[rows, dim]` floats; must not be NULL; not retained.
 * @param len    Number of floats; must equal the state's size.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table or state; SHARDREC_EINVAL for a
 *         NULL @p table or @p state or a wrong @p len (here or on another rank);
 *         SHARDREC_ETIMEOUT / EREMOTE.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_set_state(shardrec_embedding_t* coll,
                                                            const char* table, const char* state,
                                                            const float* values, size_t len);

/**
 * Wall-clock seconds this rank spent in forward/backward calls since creation, and the part
 * of it spent waiting in collectives (communication vs. compute split).
 * @param coll               [in] Must not be NULL.
 * @param comm_seconds_out   [out] Seconds in collectives; may be NULL.
 * @param total_seconds_out  [out] Seconds in forward, forward_distributed and backward; may be
 *                           NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL @p coll. Not collective.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_timings(const shardrec_embedding_t* coll,
                                                          double* comm_seconds_out,
                                                          double* total_seconds_out);

/* ---- Variable batch size per feature (VBE) ---------------------------------------------- */

/**
 * The number of floats of the output of a VBE batch (see shardrec_kjt_vbe_view_t): with inverse
 * indices that of a plain batch of kjt.batch_size samples; without, sum_f B_f * width_f pooled
 * or num_values * dim for a sequence collection. Reads only the view's sizes, except for a
 * sequence collection with inverse indices, whose output has a row per id of the expanded batch
 * (it then reads the lengths and inverse indices too). A plain view (feature_batch_sizes NULL)
 * gives the plain output's length. Not collective.
 * @param coll  [in] Must not be NULL.
 * @param batch [in] Must not be NULL; its version must be SHARDREC_KJT_VBE_VIEW_VERSION.
 * @param out   [out] Receives the count; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments, an unknown version or sizes that do
 *         not fit the collection (F, a negative B_f, the lengths count, an inverse index out of
 *         range where it is read). Thread-safe with other const calls.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_vbe_output_len(
    const shardrec_embedding_t* coll, const shardrec_kjt_vbe_view_t* batch, size_t* out);

/**
 * shardrec_embedding_forward of a VBE batch: the same semantics, validation, agreement and
 * errors, with the output layout of shardrec_kjt_vbe_view_t. The backward that follows takes a
 * gradient of the same layout and length (docs/variable-batch.md: the order of its sums, and
 * where training equals the expanded batch bit for bit). A bag that no output sample reads
 * (inverse indices that skip it) runs as an empty bag, as in the expanded batch: it is neither
 * looked up nor trained, nor seen by a dynamic table. Collective; ranks may mix VBE and plain
 * batches in one
 * step (a plain batch is a VBE batch whose B_f all equal B). A view this rank refuses (a wrong
 * version, F, lengths count, B_f, or an inverse index outside [0, B_f)) is SHARDREC_EINVAL
 * naming the feature and sample, on every rank, and nothing changes anywhere.
 * @param coll    [in] Must not be NULL; a host collection (a GPU collection returns
 *                SHARDREC_EUNSUPPORTED on every rank, nothing changed).
 * @param batch   [in] Must not be NULL; host memory, borrowed for the call.
 * @param out     [out] shardrec_embedding_vbe_output_len(batch) floats, overwritten; NULL only
 *                when that is 0.
 * @param out_len Must equal shardrec_embedding_vbe_output_len(batch).
 * @param stream  Ignored (host memory only).
 * @return As shardrec_embedding_forward; SHARDREC_EUNSUPPORTED for a GPU collection.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_forward_vbe(shardrec_embedding_t* coll,
                                                              const shardrec_kjt_vbe_view_t* batch,
                                                              float* out, size_t out_len,
                                                              void* stream);

/**
 * shardrec_embedding_input_dist_start of a VBE batch (pipelined input distribution); the
 * forward_distributed that consumes it writes the VBE output layout (its @p out_len is
 * shardrec_embedding_vbe_output_len of this batch). The view, its sizes and inverse indices may
 * be reused when this returns.
 * @param coll   [in] Must not be NULL; a host collection.
 * @param batch  [in] Must not be NULL; borrowed for the call only.
 * @param stream Ignored.
 * @return As shardrec_embedding_input_dist_start; SHARDREC_EUNSUPPORTED for a GPU collection.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_input_dist_start_vbe(
    shardrec_embedding_t* coll, const shardrec_kjt_vbe_view_t* batch, void* stream);

/**
 * shardrec_embedding_forward_tensor of a VBE batch: a host or CUDA tensor view (the rules of
 * shardrec_embedding_forward_tensor) with shardrec_embedding_vbe_output_len(batch) elements; when
 * ndim >= 2 its last dimension must be the output width, which only an output of the plain layout
 * (inverse indices given, or a sequence collection) has.
 * @param coll [in] Must not be NULL; a host collection.  @param batch [in] Must not be NULL.
 * @param out  [in] Must not be NULL.  @param stream As in shardrec_embedding_forward_tensor.
 * @return As shardrec_embedding_forward_tensor; SHARDREC_EUNSUPPORTED for a GPU collection.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_forward_vbe_tensor(
    shardrec_embedding_t* coll, const shardrec_kjt_vbe_view_t* batch,
    const shardrec_tensor_view_t* out, void* stream);

/* ---- Per-table optimizers ------------------------------------------------------------- */

/**
 * Sets one table's learning rate (per-table schedules); shardrec_embedding_set_learning_rate
 * sets every table's. Not collective, but every rank should set the same value.
 * @param coll          [in] Must not be NULL.
 * @param table         [in] Table name; must not be NULL.
 * @param learning_rate Finite and >= 0.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table; SHARDREC_EINVAL for NULL or an
 *         invalid rate; SHARDREC_EUSAGE when another thread is using the collection.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_set_table_learning_rate(
    shardrec_embedding_t* coll, const char* table, float learning_rate);

/**
 * The optimizer a table trains with: its own (shardrec_table_config_t.optimizer, kept in the
 * plan), or the collection's default (the optimizer given at creation, or, when none was, the
 * plan's topology optimizer with default hyperparameters). The learning rate is the current one.
 * @param coll  [in] Must not be NULL.
 * @param table [in] Table name; must not be NULL.
 * @param out   [out] Filled completely (version SHARDREC_OPTIMIZER_CONFIG_VERSION); not NULL.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND; SHARDREC_EINVAL; SHARDREC_EUSAGE (another thread).
 */
SHARDREC_API shardrec_status_t shardrec_embedding_table_optimizer(const shardrec_embedding_t* coll,
                                                                  const char* table,
                                                                  shardrec_optimizer_config_t* out);

/**
 * Number of optimizer state tensors of one table (its own optimizer's;
 * shardrec_embedding_num_states describes the default optimizer's).
 * @param coll [in] Must not be NULL.  @param table [in] Table name; not NULL.
 * @param out  [out] Receives the count; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND; SHARDREC_EINVAL. Not collective.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_table_num_states(const shardrec_embedding_t* coll,
                                                                   const char* table, size_t* out);

/**
 * Name and shape kind of one optimizer state of one table.
 * @param coll         [in] Must not be NULL.
 * @param table        [in] Table name; must not be NULL.
 * @param index        State index, < shardrec_embedding_table_num_states().
 * @param name_out     [out] A static NUL-terminated name ("momentum1"); must not be NULL.
 * @param row_wise_out [out] 1 for `[rows]`, 0 for `[rows, dim]`; may be NULL.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND; SHARDREC_EINVAL (NULL, index out of range).
 */
SHARDREC_API shardrec_status_t shardrec_embedding_table_state_info(const shardrec_embedding_t* coll,
                                                                   const char* table, size_t index,
                                                                   const char** name_out,
                                                                   int32_t* row_wise_out);

/* ---- Output keys (TorchRec's KeyedTensor) ---------------------------------------------- */

/**
 * Number of column blocks of the output: one per (feature, table) pair, in output order (for
 * each feature in plan order, each table reading it, in table order).
 * @param coll [in] Must not be NULL.  @param out [out] Receives the count; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Not collective.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_num_outputs(const shardrec_embedding_t* coll,
                                                              size_t* out);

/**
 * One column block of the output. Pooled collections: the block's columns are [offset,
 * offset + width) of every output row. Sequence collections: every block has offset 0 and
 * width dim; the rows of feature f are the rows of its ids (the batch's value order).
 * @param coll        [in] Must not be NULL.
 * @param index       Block index, < shardrec_embedding_num_outputs().
 * @param feature_out [out] The feature's name, owned by the collection (valid until it is
 *                    destroyed); may be NULL.
 * @param table_out   [out] The table's name, owned by the collection; may be NULL.
 * @param offset_out  [out] First column; may be NULL.
 * @param width_out   [out] Number of columns (the table's dim); may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL collection or an index out of range.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_output_info(
    const shardrec_embedding_t* coll, size_t index, const char** feature_out,
    const char** table_out, int64_t* offset_out, int64_t* width_out);

/* ---- Timings ------------------------------------------------------------------------------ */

/**
 * Where a rank's time went since the collection was created (wall-clock seconds), for progress
 * lines and profiles. The forward phases are input distribution (routing, the id exchange and
 * unpacking, including the part that ran on the background worker), lookup, and output
 * distribution (the return exchange and combining the rows); backward is one phase (gradient
 * exchange, aggregation, optimizer). On the host at world > 1 the return exchange runs on the
 * background worker while this rank looks up its own samples' rows: output_dist_seconds counts
 * only the part the caller's thread waited for it, collective_seconds and embedding_comm_seconds
 * its whole duration. collective_seconds is the time inside or waiting for
 * collectives across all phases; total_seconds the time inside forward, input_dist_*,
 * forward_distributed and backward calls. samples / total_seconds is this rank's samples/s.
 */
typedef struct shardrec_step_timings {
  uint32_t version;           /**< SHARDREC_STEP_TIMINGS_VERSION. */
  int64_t forwards;           /**< Completed forwards. */
  int64_t backwards;          /**< Completed backwards. */
  int64_t samples;            /**< Local samples forwarded (sum of batch sizes). */
  double total_seconds;       /**< Inside the collection's step calls. */
  double collective_seconds;  /**< Inside or waiting for collectives. */
  double input_dist_seconds;  /**< Routing, id exchange, unpacking. */
  double lookup_seconds;      /**< Embedding lookups (shard owners). */
  double output_dist_seconds; /**< Return exchange and combine. */
  double backward_seconds;    /**< Backward: gradients, aggregation, optimizer. */
  /* Version 2. */
  double embedding_comm_seconds; /**< Part of collective_seconds spent in the collectives that
                                      carry embeddings or their gradients (the forward's return
                                      all-to-all, the backward's gradient all-to-all and the
                                      data-parallel gradient all-reduce), encoding and decoding
                                      included: what shardrec_comm_encoding_t can shrink. */
} shardrec_step_timings_t;

#define SHARDREC_STEP_TIMINGS_VERSION 2u
#define SHARDREC_STEP_TIMINGS_INIT \
  { SHARDREC_STEP_TIMINGS_VERSION, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0 }

/**
 * Fills @p timings with zeros for struct version @p version (1 has no embedding_comm_seconds).
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_step_timings_init(shardrec_step_timings_t* timings,
                                                          uint32_t version);

/**
 * Copies the collection's timings into @p out (the fields of out->version; a version-1 struct is
 * shorter and its missing fields are never written).
 * @param coll [in] Must not be NULL.
 * @param out  [in,out] Initialised with shardrec_step_timings_init; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version; SHARDREC_EUSAGE when
 *         another thread is using the collection. Not collective.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_step_timings(const shardrec_embedding_t* coll,
                                                               shardrec_step_timings_t* out);

/* ---- Evaluation mode ------------------------------------------------------------------ */

/**
 * Sets whether the collection's next forwards train (@p training 1, the default) or evaluate
 * (@p training 0), like a model's train()/eval() (docs/dynamic-tables.md, "Evaluation").
 * An evaluation forward changes nothing: a dynamic table's known ids read their rows and its
 * unknown or not yet admitted ids read zeros, and no row is inserted, touched (last seen, count),
 * admitted (the admission counts stay), evicted or marked changed for delta export; the table
 * statistics, last and total, stay those of the last training forward. Fixed tables read as in
 * training. The backward of an evaluation forward is refused (SHARDREC_EUSAGE on this rank;
 * every rank fails it). The mode is read when the lookup runs: by shardrec_embedding_forward,
 * and by shardrec_embedding_forward_distributed in the pipelined path (not by input_dist_start).
 * Every rank must be in the same mode for a forward. A collection with a dynamic table checks it
 * within the agreement that forward already makes (no added collective): if the ranks differ,
 * the forward fails on every rank with SHARDREC_EUSAGE and changes nothing. A collection of fixed
 * tables only does not check at the forward (its forward changes nothing in either mode); a
 * following backward then fails on every rank, refused by the evaluating ranks.
 * Not collective; changes nothing else. GPU collections refuse evaluation mode.
 * @param coll     [in] Must not be NULL.
 * @param training 1: training forwards; 0: evaluation forwards. Any other value is refused.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or a value other than 0 or 1;
 *         SHARDREC_EUNSUPPORTED for 0 on a GPU collection; SHARDREC_EUSAGE when another thread
 *         is using the collection.
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_set_training(shardrec_embedding_t* coll,
                                                               int32_t training);

/**
 * Whether the collection's forwards train (1) or evaluate (0); see
 * shardrec_embedding_set_training.
 * @param coll     [in] Must not be NULL.
 * @param training [out] Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL; SHARDREC_EUSAGE when another thread is using
 *         the collection. Changes nothing.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_is_training(const shardrec_embedding_t* coll,
                                                              int32_t* training);

SHARDREC_END_DECL

#endif /* SHARDREC_EMBEDDING_H_ */
