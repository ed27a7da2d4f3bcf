/**
 * @file shardrec/checkpoint.h
 * @brief Sharded checkpoints of an embedding collection (1D or on a 2D mesh) that load under
 *        any plan and any world size, and export/import of single full tables.
 *
 * A checkpoint is a directory: one file per writing rank in the safetensors layout (8-byte
 * little-endian header length, JSON header, raw little-endian tensors; a Python user opens it
 * with the `safetensors` package, whose numpy loader cannot return BF16 tensors: see
 * docs/checkpoint-format.md) and `manifest.json`, which describes the whole model (tables,
 * dims, dtypes, features, per-table optimizer configs, the plan, the library version, the step
 * counter, and for every record its place in the full table and an XXH3-64 checksum per chunk of
 * rows). docs/checkpoint-format.md documents the layout.
 *
 * What is saved: every table's weights as stored (fp32, fp16, bf16, or an FP8 table's rows:
 * scale and codes, format version 3, which libraries before it refuse), every optimizer state
 * (fp32; row-wise states are full-row, so they reshard across any column split), the optimizer
 * step counter, and optional host-owned dense tensors (the dense side's parameters and optimizer
 * state). Replicated values are written once: data-parallel tables and dense tensors by world
 * rank 0; on a mesh, each shard by one of its replicas, spread over the replicas.
 * A tiered table (shardrec/tier.h) is not copied: its store, made to hold every row's
 * current value, is snapshotted into the directory (hard links to its segment files, one
 * directory per shard; format version 4, or 5 when a table is dynamic, which libraries before
 * it refuse), and reads back under any plan and world size like the other records
 * (docs/disk-tier.md, "Checkpoints"). After publishing, a save also removes the snapshot
 * directories its manifest does not name (left by a save that was killed).
 *
 * Atomicity: each file is written to a temporary name, fsync'ed, renamed and its directory
 * fsync'ed; the manifest is published last the same way. A crash or an I/O error at any point
 * leaves a complete checkpoint in the directory loadable (the previous one, or the new one once
 * rank 0 has published its manifest), and an incomplete checkpoint is never taken for a
 * complete one. After publishing, rank 0 removes the previous checkpoint's
 * files. All ranks must see the same directory (a shared file system for multi-host runs); a
 * save whose ranks' files are not all in rank 0's directory fails on every rank instead.
 *
 * Loading is all-or-nothing by default: a load that fails for any reason (a missing, truncated or
 * malformed file, a checksum that does not match, an I/O error, a mismatch, a peer's failure or a
 * timeout before the last agreement) returns the error on every rank and leaves the weights,
 * every optimizer state, the step counter and the dense tensors bit-identical on every rank. A
 * peer that dies during the last agreement is the exception: that agreement may complete on some
 * ranks, which commit and return OK, and fail on others, which return the communicator's error
 * having committed or not (see shardrec_checkpoint_load). Each rank reads only the
 * records that overlap its local shards, in chunks of about 1 MiB verified against their
 * checksums, into host staging memory; the ranks then agree (one all-reduce, under the
 * communicator's timeout) that every one of them has verified its part, and only then copy it
 * into place. The extra host memory is this rank's part of the checkpoint (its shards' weights
 * and states as stored, plus the dense tensors), at most 1 GiB per rank and call; what lies
 * beyond that limit is verified by a first read and read (and verified) again while committing,
 * so only an I/O error on that second read, or a GPU device copy, can fail after the commit
 * began; such a failure is reported on every rank as a partial load. Options can trade the
 * guarantee for speed and memory (allow_partial_load); docs/checkpoint-format.md, "Loading",
 * has the details.
 *
 * All calls here are collective over the collection's communicator (the mesh's world for the
 * mesh variants): every rank calls them with the same arguments. A rank refusing its own
 * arguments (a NULL or empty path, a NULL table name, options of an unknown version or with
 * NULL dense tensors) still takes part in one small agreement first, so every rank fails at once
 * with SHARDREC_EINVAL (the others naming that rank) and nothing changes anywhere; only a NULL
 * collection or mesh fails its rank alone. A collection is used by one thread at a time; it
 * must have no input distribution pending.
 *
 * GPU collections (SHARDREC_DEVICE_CUDA): the shard tensors are staged between the device and
 * host memory through the CUDA plugin, each copy waited for with the collection's device wait
 * bound (SHARDREC_ETIMEOUT instead of a hang): on save in chunks of about 1 MiB; on a default
 * load or an import, each shard tensor's verified host staging (as for a host collection, so
 * every file fault is found before the device is written) is copied to the device in the
 * commit; with allow_partial_load, or beyond the staging limit, in blocks of 8 MiB of rows
 * through one pinned host block per call when the plugin can pin it. The files are
 * byte-identical to those a host collection of the same plan and training writes, and a
 * checkpoint loads into either kind whichever kind wrote it (resharding included). A failed
 * device copy is SHARDREC_ECUDA (or SHARDREC_ETIMEOUT) on every rank: during a save it changes
 * neither the collection nor the previous checkpoint; during a load's commit it leaves the
 * collection partly loaded: load again. (A failed copy is tested through a fake plugin whose
 * device memory is host memory; GPU collections' saves and loads also ran on one GPU.)
 */
#ifndef SHARDREC_CHECKPOINT_H_
#define SHARDREC_CHECKPOINT_H_

#include "shardrec/common.h"
#include "shardrec/embedding.h"
#include "shardrec/replica.h"

SHARDREC_BEGIN_DECL

/**
 * A host-owned fp32 tensor saved and loaded with a checkpoint (e.g. an MLP's weights or its
 * optimizer state). The caller owns @p data; it is read during a save and overwritten during a
 * load, and only during the call. Dense tensors are replicated: rank 0 writes them, every rank
 * reads them.
 */
typedef struct shardrec_dense_tensor {
  const char* name; /**< NUL-terminated, non-empty, no '/'; unique among the tensors given. */
  float* data;      /**< @p count floats; may be NULL only when count is 0. */
  size_t count;     /**< Number of floats. */
} shardrec_dense_tensor_t;

#define SHARDREC_CHECKPOINT_OPTIONS_VERSION 2u

/**
 * Options of the save and load calls. Zero fields take the documented default. Version 1 ends
 * after verify_first; version 2 appends allow_partial_load (a version-1 caller loads
 * all-or-nothing). A load's four flags must be the same on every rank (they decide its
 * exchanges and what it leaves): ranks giving different ones all get SHARDREC_EINVAL before
 * anything is read. The dense tensors are each rank's own.
 */
typedef struct shardrec_checkpoint_options {
  uint32_t version;                     /**< SHARDREC_CHECKPOINT_OPTIONS_VERSION. */
  const shardrec_dense_tensor_t* dense; /**< Dense tensors; may be NULL when num_dense is 0. */
  size_t num_dense;                     /**< Number of entries in @p dense. */
  /** Load only: tables whose optimizer type differs from the checkpoint's load their weights
   *  and start their optimizer state (and the step counter) from zero. 0: that is an error. */
  int32_t reset_optimizer_state;
  /** Load only: accept a table whose weight dtype (fp32, fp16, bf16 or FP8) differs between
   *  the checkpoint and the collection (converted, narrowing rounds to nearest even, FP8
   *  encodes each row). 0: an error. */
  int32_t allow_dtype_change;
  /** Load only, with allow_partial_load: read and verify every chunk this rank needs before
   *  changing anything (the bytes are read twice, no staging memory), so a corrupt record still
   *  leaves the collection untouched; an I/O error during the second read does not. Without
   *  allow_partial_load it has no further effect: every load verifies before changing anything. */
  int32_t verify_first;
  /** Load only (version 2): nonzero skips the host staging of an all-or-nothing load: each
   *  chunk is verified in one chunk-sized buffer and then copied into the collection (no
   *  staging memory; a corrupt chunk's bytes never reach the collection, and the dense tensors
   *  reach the caller's buffers only once every rank has loaded). The risk is in the name: a
   *  checksum failure, an I/O error or a peer's failure found while copying leaves the
   *  collection partly loaded (on some ranks, not others), and it must be loaded again.
   *  0 (default): all-or-nothing. */
  int32_t allow_partial_load;
} shardrec_checkpoint_options_t;

#define SHARDREC_CHECKPOINT_OPTIONS_INIT \
  { SHARDREC_CHECKPOINT_OPTIONS_VERSION, NULL, 0, 0, 0, 0, 0 }

/**
 * Fills @p options with the defaults of struct version @p version (bindings; C may use
 * SHARDREC_CHECKPOINT_OPTIONS_INIT); a version-1 struct is filled up to verify_first only.
 * Thread-safe.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unknown version.
 */
SHARDREC_API shardrec_status_t
shardrec_checkpoint_options_init(shardrec_checkpoint_options_t* options, uint32_t version);

/**
 * Saves a collection (sharded with shardrec_embedding_create) into directory @p dir, created if
 * missing (its parent must exist). Collective over the collection's communicator.
 * @param coll    [in] Must not be NULL. Not modified.
 * @param dir     [in] NUL-terminated directory path; must not be NULL or empty.
 * @param options [in] May be NULL (no dense tensors).
 * Every rank must pass the same directory, one that every rank sees (on a file system they
 * share when they run on several hosts): rank 0 publishes the manifest in its @p dir, naming
 * every rank's file, and first checks that each is there, of the size its rank wrote.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or bad arguments (dense tensors), or when a
 *         rank's file is not in rank 0's directory (ranks given different directories, or one
 *         not shared by every rank: nothing is published, the previous checkpoint in rank 0's
 *         directory stays as it was and loadable); SHARDREC_EUSAGE
 *         while an input distribution is pending; SHARDREC_EIO when a file cannot be written
 *         (the previous checkpoint in @p dir stays loadable); SHARDREC_ECUDA when a GPU
 *         collection's device copy fails (the collection and the previous checkpoint stay as
 *         they were); SHARDREC_ETIMEOUT / SHARDREC_EREMOTE. A failure on any rank fails the call
 *         on every rank, but for a peer lost (killed, aborted, timed out) in the save's last
 *         agreement, after rank 0 published the manifest: then ranks may return different
 *         results, and the directory holds the previous or the new checkpoint, complete (rank
 *         0's message says when it published; the others' that it may have). Load it to learn
 *         which.
 */
SHARDREC_API shardrec_status_t shardrec_checkpoint_save(
    shardrec_embedding_t* coll, const char* dir, const shardrec_checkpoint_options_t* options);

/**
 * Loads the checkpoint in @p dir into a collection of any plan and any world size, with the
 * same tables (names, rows, dims, dtypes unless allow_dtype_change) and optimizer types (unless
 * reset_optimizer_state). Also restores the step counter and the dense tensors named in
 * @p options (each must exist in the checkpoint with the same count). Collective.
 * All-or-nothing by default (see the file comment): every error below except those of the
 * commit leaves the collection and the dense tensors unchanged on every rank, and every rank
 * returns it (a rank that was fine names the rank that failed).
 * Memory: up to 1 GiB of host staging per rank and call (this rank's part of the checkpoint
 * when smaller), freed before the call returns; none with allow_partial_load.
 * The checkpoint does not hold the collection's seed (shardrec_embedding_options_t.seed), which
 * draws the first values of dynamic-table rows created after the load and the bits of
 * stochastic rounding: to go on bit-identically, load into a collection created with the
 * original's seed.
 * @param coll    [in,out] Must not be NULL.
 * @param dir     [in] NUL-terminated directory path; must not be NULL.
 * @param options [in] May be NULL (defaults). Dense tensors' data is written only on success.
 * @return SHARDREC_OK. Nothing changed: SHARDREC_ENOTFOUND when @p dir has no manifest;
 *         SHARDREC_EINVAL for a mismatch (the message names the table and what differs), ranks
 *         that read different checkpoints (given different directories), or bad arguments;
 *         SHARDREC_ECORRUPT for a malformed manifest (or one that does not match its
 *         own checksum), a missing, truncated or
 *         malformed rank file, a chunk whose checksum fails (the message names the file and
 *         record), or a dynamic table's id saved more than once (naming the id and its "ids"
 *         records); SHARDREC_EIO; SHARDREC_ETIMEOUT / SHARDREC_EREMOTE / SHARDREC_EABORTED
 *         (but see below); SHARDREC_EUSAGE while an input distribution is pending. During the
 *         commit (the message says "partly loaded"; load again): SHARDREC_ECUDA /
 *         SHARDREC_ETIMEOUT when a GPU collection's device copy fails, SHARDREC_EIO or
 *         SHARDREC_ECORRUPT when the second read of a part beyond the staging limit, or of a
 *         tiered table's rows (never staged: verified first, read again and written through
 *         the tier in bounded chunks), fails, or a tiered table's write-back fails. With
 *         allow_partial_load, SHARDREC_ECORRUPT, SHARDREC_EIO and a peer's failure found while
 *         copying leave the collection partly loaded as well (the message says "partly
 *         loaded").
 *         A peer that dies (or stalls past the timeout, or an abort) during the load's last
 *         agreement can reach the ranks unevenly; no protocol can prevent it. A rank that returns
 *         SHARDREC_OK holds its part of the checkpoint, but its peers may not. A rank that returns
 *         SHARDREC_EREMOTE, SHARDREC_ETIMEOUT or SHARDREC_EABORTED may or may not have committed
 *         (a host collection within the staging limit has not; a GPU collection, or one beyond
 *         the limit, may hold the checkpoint or part of it), and its communicator is poisoned.
 *         After such a failure on any rank, treat every rank's collection as unknown: recreate
 *         the communicators and collections and load again on every rank
 *         (docs/checkpoint-format.md, "A peer lost during a load").
 */
SHARDREC_API shardrec_status_t shardrec_checkpoint_load(
    shardrec_embedding_t* coll, const char* dir, const shardrec_checkpoint_options_t* options);

/**
 * shardrec_checkpoint_save for a collection created with shardrec_mesh_embedding_create: every
 * shard is written once, by one of its replicas (chosen per table and shard, so the replicas
 * share the writing). Collective over the mesh's world. Dynamic tables are written as in 1D,
 * keyed by id, which needs every replica of a shard to hold the same rows: sync the mesh
 * (shardrec_mesh_sync) after the last training step; the save checks it over each replica group.
 * @param mesh [in] Must not be NULL; the mesh @p coll was created on.
 * @return As shardrec_checkpoint_save; SHARDREC_EUSAGE on every rank, nothing written, when the
 *         replicas of a dynamic shard hold different rows (no sync since the last step).
 */
SHARDREC_API shardrec_status_t
shardrec_checkpoint_save_mesh(shardrec_mesh_t* mesh, shardrec_embedding_t* coll, const char* dir,
                              const shardrec_checkpoint_options_t* options);

/**
 * shardrec_checkpoint_load for a collection on a mesh: every replica loads its own shards. The
 * checkpoint may come from any mesh or any 1D collection with the same tables. Collective over
 * the mesh's world.
 * @return As shardrec_checkpoint_load.
 */
SHARDREC_API shardrec_status_t
shardrec_checkpoint_load_mesh(shardrec_mesh_t* mesh, shardrec_embedding_t* coll, const char* dir,
                              const shardrec_checkpoint_options_t* options);

/**
 * Exports one full table to a safetensors file at @p path (written atomically by rank 0):
 * tensor "weights" (F32, [rows, dim]; an FP8 table's decoded rows, exact) and, with
 * @p with_optimizer_state, each optimizer state by
 * its name ("momentum1", ...; F32, [rows] for row-wise states, else [rows, dim]). The metadata
 * holds the table name and the library version. Collective over the collection's communicator:
 * the table is gathered on every rank, so each rank needs its size in host memory. On a mesh the
 * communicator is the sharding group: call it in one sharding group, or in every group with the
 * same path (each writes the same bytes under its own temporary name; the last rename wins).
 * A dynamic table (docs/dynamic-tables.md) exports its live rows keyed by id: tensors "ids"
 * (I64, [n], ascending), "weights" (F32, [n, dim]) and, with @p with_optimizer_state, each state
 * (F32, [n] or [n, dim]), row i of each belonging to ids[i]; metadata format
 * "shardrec-dynamic-table". Its eviction metadata (last seen, counts, scores) is not exported.
 * Every rank must give the same @p table and @p with_optimizer_state (the gathers' sizes follow
 * from them): ranks that differ all get SHARDREC_EINVAL before anything moves. Only rank 0's
 * @p path is written.
 * @param coll  [in] Must not be NULL.
 * @param table [in] NUL-terminated table name; must not be NULL.
 * @param path  [in] NUL-terminated file path; must not be NULL or empty; its directory must exist.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table; SHARDREC_EINVAL for NULL
 *         arguments; SHARDREC_EUSAGE while an input distribution is pending (dynamic tables);
 *         SHARDREC_EIO;
 *         SHARDREC_ETIMEOUT / SHARDREC_EREMOTE.
 */
SHARDREC_API shardrec_status_t shardrec_checkpoint_export_table(shardrec_embedding_t* coll,
                                                                const char* table, const char* path,
                                                                int32_t with_optimizer_state);

/**
 * Imports one full table from a safetensors file (pretrained embeddings, or an export): its
 * "weights" tensor (F32, F16 or BF16, [rows, dim] of the table) is converted to the table's
 * storage type (an FP8 table encodes each row as set_weights does, so importing an FP8 table's
 * export gives back its bytes); with @p with_optimizer_state, the file's tensors named like the
 * table's optimizer states are loaded too (states the file lacks stay as they are). Each rank reads
 * only its own shards' rows. Collective. All-or-nothing like shardrec_checkpoint_load: each rank
 * reads its rows into host staging (the same 1 GiB limit) before anything changes.
 * A dynamic table reads a file keyed by id (its table export: "ids", I64 [n], unique; "weights"
 * [n, dim]; with @p with_optimizer_state the states, F32 [n] or [n, dim]): each rank reads the
 * whole file and inserts the ids its shards own under this plan, beside the rows they hold. An
 * id with a row takes the file's row (and state when read; else it keeps its own); a new id takes
 * a free slot, the file's row, the file's state or zeros, last seen now, count and score 0. Rows
 * the file does not name stay. A shard that would hold more rows than its slots fails the import
 * on every rank (SHARDREC_EINVAL; nothing evicted, nothing changed). docs/dynamic-tables.md,
 * "Table export and import". Every rank must give the same @p table and
 * @p with_optimizer_state (ranks that differ all get SHARDREC_EINVAL, nothing changed: one
 * replica of a data-parallel table reading its state and another not would leave them different).
 * A dynamic table's ranks each read the whole file and compare what they read: ranks given
 * different files (a copy at another path is fine) all get SHARDREC_EINVAL, nothing changed. A
 * fixed table's ranks read only their own rows and do not compare them: give every rank the same
 * file, or a data-parallel fixed table's copies start different.
 * Values are taken as the file has them: a NaN or infinite weight,
 * or a state no optimizer could have made (a negative Adagrad sum), is not refused here, and no
 * later check catches it: a forward reads such a row as it is (NaN outputs), and the non-finite
 * check (embedding_options.h) tests only per-id weights and output gradients, so a step is
 * refused only if the caller's gradient turns non-finite, while a NaN row (or a negative sum,
 * which the next Adagrad step turns into one) otherwise trains on. Check a file's values before
 * importing it when it may hold them.
 * @return SHARDREC_OK. Nothing changed: SHARDREC_ENOTFOUND for an unknown table or a missing
 *         file; SHARDREC_EINVAL for a shape or dtype mismatch, NULL arguments, or (dynamic
 *         tables) a file without "ids", a repeated id or too few free slots;
 *         SHARDREC_ECORRUPT for a malformed or truncated file; SHARDREC_EIO; SHARDREC_ETIMEOUT /
 *         SHARDREC_EREMOTE; SHARDREC_EUSAGE while an input distribution is pending. During the
 *         commit ("partly imported"): SHARDREC_ECUDA when a GPU collection's device copy fails,
 *         SHARDREC_EIO on the second read of rows beyond the staging limit. A peer lost during
 *         the last agreement leaves the ranks as after shardrec_checkpoint_load: import again on
 *         every rank, after recreating the communicators and collections.
 */
SHARDREC_API shardrec_status_t shardrec_checkpoint_import_table(shardrec_embedding_t* coll,
                                                                const char* table, const char* path,
                                                                int32_t with_optimizer_state);

SHARDREC_END_DECL

#endif /* SHARDREC_CHECKPOINT_H_ */
