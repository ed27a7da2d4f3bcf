/**
 * @file shardrec/inference.h
 * @brief A read-only embedding collection for services: opened from a training checkpoint or a
 *        serving file, looked up from any number of threads at once, and hot-swapped.
 *
 * An inference handle holds one *version* at a time: every table reassembled whole (whatever
 * plan, world size and mesh wrote the checkpoint), in the storage type asked for, plus the
 * checkpoint's dense tensors. There is no communicator and no optimizer state. A table named in
 * the options' tiers instead stays in the checkpoint's files and is read through a row cache of
 * its own (shardrec_serving_tier_t), so a model larger than memory serves.
 *
 * Versions and swaps: a version is immutable. Every lookup enters the handle's current version
 * when it starts (one atomic increment of a reader count, no mutex, no wait) and leaves it when it
 * returns, so it reads exactly one version from its first row to its last.
 * shardrec_inference_reload opens a newer checkpoint or serving file and swaps it in atomically
 * while lookups run: lookups that started before the swap finish on the old version; those that
 * start after it read the new one. The old version's memory is freed when its last reader (a
 * running lookup, or a snapshot pinned with shardrec_inference_pin) lets it go. Memory during a
 * swap: the old and the new version are both held until then, so a swap needs at most one
 * version's memory on top of the one being served (for a serving file opened by mmap, page-cache
 * pages rather than private memory; a delta needs one copy of the table it changes). Version
 * numbers start at 1 at open and grow by 1 with each successful reload or delta.
 *
 * Storage types (per table, SHARDREC_SERVING_*; docs/serving.md has the error bounds):
 *  - AS_TRAINED keeps the checkpoint's dtype (fp32, fp16, bf16, or FP8_E4M3/FP8_E5M2 for an FP8
 *    table, whose rows and scales are kept as trained and which table_info then reports as that
 *    FP8 storage): lookups then equal the
 *    training collection's forward bit for bit wherever training summed each bag on one rank
 *    (every type but the row-split RW, TWRW and grid, whose partial sums are added in another
 *    order; docs/serving.md).
 *  - FP32; FP16 and BF16 round each fp32 value to nearest even (relative error at most 2^-11
 *    for FP16 in its normal range, 2^-8 for BF16).
 *  - INT8 and INT4 are row-wise (FBGEMM's convention): each row stores an fp32 scale and an fp32
 *    bias, bias = the row's minimum, scale = (max - min) / (2^bits - 1), q = round((x - bias) /
 *    scale) computed in fp32, to nearest (ties to even), clamped to [0, 2^bits - 1]; a value
 *    reads back as q * scale + bias, within scale / 2 of the trained value (plus the fp32
 *    rounding of that expression, and up to (2^bits - 1) x 2^-23 x scale where the fp32
 *    quotient's rounding carries it across a half; docs/serving.md). A row whose values
 *    are all equal has scale 0 and reads back exactly. shardrec_inference_row_scales gives
 *    the scale and bias of any row, so a caller can check the bound without an fp32 copy.
 *  - FP8_E4M3 and FP8_E5M2 (OCP 8-bit floats, E4M3 without infinities) store an fp32 per-row
 *    scale, the smallest power of two with which the row's largest magnitude fits the format
 *    (448 for E4M3, 57344 for E5M2), then one code a value: x / scale rounded to nearest even,
 *    saturating. A value reads back as decoded code x scale, exactly in fp32, within
 *    max(2^-4 |x|, 2^-10 scale) of the trained value x for E4M3 and max(2^-3 |x|, 2^-17 scale)
 *    for E5M2, for |x| up to 464 x 2^111 (E4M3) or 61440 x 2^111 (E5M2): the scale is at most
 *    2^111, so that no decoded value overflows fp32, and larger magnitudes saturate (3e38 reads
 *    back as about 1.16e36 in E4M3). Non-finite trained values are refused, as for INT8. Row
 *    scales read back through shardrec_inference_row_scales (bias 0).
 * Lookups accumulate in fp32 and dequantize on the fly. Pooled INT8 and INT4 lookups fold the
 * dequantization into the sum (code x (weight x scale) per value, weight x bias once per row, as
 * FBGEMM does): element j of a SUM bag of n ids is within g(n+3) x sum |w| (|q s| + |b|) of the
 * exact sum of the stored values, g(k) = k 2^-24 / (1 - k 2^-24), and may differ in its last bits
 * between instruction-set levels (docs/serving.md).
 *
 * Sources: a checkpoint directory written by shardrec_checkpoint_save or _save_mesh (manifest and
 * rank files are read, every weights record's checksums verified, optimizer states skipped), or a
 * serving file written by shardrec_inference_save (one file, mapped read-only: zero-copy, and the
 * page cache is shared between the processes serving the same file; docs/serving-format.md).
 *
 * Dynamic tables (docs/dynamic-tables.md) are served keyed by id: the rows the checkpoint holds,
 * in the table's storage type, behind a hash index built at open. An id without a row reads as
 * zeros (and still counts in a MEAN bag's divisor, as in training); the bounds policy does not
 * apply to them. shardrec_inference_apply_delta_ext applies a delta export
 * (shardrec_embedding_dynamic_delta_ext) as a new version without reopening anything; a full
 * delta (SHARDREC_DELTA_FULL, after the trainer loaded a checkpoint) replaces the table.
 *
 * Host only: a device request (options.device_type) or a device batch is refused with
 * SHARDREC_EUNSUPPORTED; a storage value outside shardrec_serving_storage_t with SHARDREC_EINVAL.
 *
 * Thread-safety: lookups, dense-tensor reads, pins and the introspection calls may run from any
 * number of threads at once on one handle, together with one reload or delta.
 * shardrec_inference_destroy must not race with any other call on the same handle. Errors are
 * reported per calling thread (shardrec_last_error); a rejected request never affects another
 * thread's request.
 */
#ifndef SHARDREC_INFERENCE_H_
#define SHARDREC_INFERENCE_H_

#include <stddef.h>
#include <stdint.h>

#include "shardrec/common.h"
#include "shardrec/tensor.h"

SHARDREC_BEGIN_DECL

/** A read-only, hot-swappable embedding collection for serving (see the file comment). */
typedef struct shardrec_inference shardrec_inference_t;

/** A pinned snapshot of one version of an inference handle: its tables and dense tensors stay
 *  valid and unchanged until shardrec_inference_unpin, whatever reloads happen meanwhile. */
typedef struct shardrec_inference_snapshot shardrec_inference_version_t;

/** How a table's rows are stored for serving (stored as int32_t in option structs). */
typedef enum shardrec_serving_storage {
  SHARDREC_SERVING_AS_TRAINED = 0, /**< The checkpoint's dtype (fp32, fp16, bf16 or an FP8
                                        type); default. */
  SHARDREC_SERVING_FP32 = 1,       /**< 4 bytes per value. */
  SHARDREC_SERVING_FP16 = 2,       /**< IEEE half, rounded to nearest even. */
  SHARDREC_SERVING_BF16 = 3,       /**< bfloat16, rounded to nearest even. */
  SHARDREC_SERVING_INT8 = 4,       /**< Row-wise 8-bit: 1 byte per value + 8 bytes per row. */
  SHARDREC_SERVING_INT4 = 5,       /**< Row-wise 4-bit: 2 values per byte + 8 bytes per row. */
  SHARDREC_SERVING_FP8_E4M3 = 6,   /**< FP8 E4M3: 1 byte per value + a 4-byte scale per row. */
  SHARDREC_SERVING_FP8_E5M2 = 7    /**< FP8 E5M2: 1 byte per value + a 4-byte scale per row. */
} shardrec_serving_storage_t;

#define SHARDREC_TABLE_STORAGE_VERSION 1u

/** A per-table storage override, by table name. */
typedef struct shardrec_table_storage {
  uint32_t version;  /**< SHARDREC_TABLE_STORAGE_VERSION. */
  const char* table; /**< Table name; must not be NULL; must name a table of the source. */
  int32_t storage;   /**< A shardrec_serving_storage_t. */
} shardrec_table_storage_t;

#define SHARDREC_TABLE_STORAGE_INIT \
  { SHARDREC_TABLE_STORAGE_VERSION, NULL, 0 }

#define SHARDREC_SERVING_TIER_VERSION 1u

/**
 * A table served from the checkpoint's files through a row cache of its own instead of being
 * read into memory (docs/disk-tier.md, "Serving a tiered checkpoint"), so a model whose rows exceed
 * the machine's memory serves. Open verifies every chunk of the table's weights once (streamed:
 * bounded memory) and keeps the checkpoint's rank files (and a store snapshot, read-only) open; a
 * lookup copies the distinct rows of its request out of the cache, reads the request's misses from
 * the files as one batch (through the page cache) and converts them to the table's storage type as
 * the in-memory open does, so lookups give the same bits as the same checkpoint opened without a
 * tier. A dynamic table's ids are read and indexed in memory at open (48-80 bytes per live id) and
 * its rows stay in the files; an id without a row reads zeros, as in memory. The checkpoint's files
 * must stay in place, unchanged, while a version opened from them is served (a reload swaps to the
 * new checkpoint's files and a new, empty cache). Pooled tables only: a sequence (NONE pooling)
 * table with a tier, and a tier on a serving file (mapped already), are refused with
 * SHARDREC_EUNSUPPORTED; a version with a tiered table refuses shardrec_inference_save and a delta
 * of that table (SHARDREC_EUNSUPPORTED). Every storage type is accepted (int8, int4 and fp8
 * quantize each row on its own, so a miss quantizes just its row; open checks every row once, as in
 * memory).
 */
typedef struct shardrec_serving_tier {
  uint32_t version;     /**< SHARDREC_SERVING_TIER_VERSION. */
  const char* table;    /**< Table name; must not be NULL; must name a table of the checkpoint;
                             each table at most once. */
  uint64_t cache_bytes; /**< DRAM of the table's row cache: rows x (stored row + 64 bytes of
                             bookkeeping); must pay for at least one row (SHARDREC_EINVAL). */
} shardrec_serving_tier_t;

#define SHARDREC_SERVING_TIER_INIT \
  { SHARDREC_SERVING_TIER_VERSION, NULL, 0 }

#define SHARDREC_INFERENCE_OPTIONS_VERSION 2u

/** Options of shardrec_inference_open. Zero fields take the documented default. The handle
 *  keeps a copy (names included) and uses it again for each reload. */
typedef struct shardrec_inference_options {
  uint32_t version;        /**< SHARDREC_INFERENCE_OPTIONS_VERSION. */
  int32_t default_storage; /**< A shardrec_serving_storage_t for tables not overridden; 0 is
                                AS_TRAINED. Ignored for a serving file, which keeps its own. */
  const shardrec_table_storage_t* table_storage; /**< Overrides; NULL only when the count is 0.
                                                      Each table at most once. Ignored for a
                                                      serving file. */
  size_t num_table_storage;                      /**< Entries in @ref table_storage. */
  int32_t bounds_policy; /**< A shardrec_bounds_policy_t (embedding.h); 0 is ERROR. */
  int32_t device_type;   /**< Must be SHARDREC_DEVICE_HOST (0); anything else is
                              SHARDREC_EUNSUPPORTED. */
  /* Version 2. */
  const shardrec_serving_tier_t* tiers; /**< Tables served from the checkpoint's files through
                                             a row cache (shardrec_serving_tier_t), filled for
                                             one version; copied. NULL when num_tiers is 0. */
  size_t num_tiers;                     /**< Entries in @ref tiers; 0: every table in memory. */
} shardrec_inference_options_t;

#define SHARDREC_INFERENCE_OPTIONS_INIT \
  { SHARDREC_INFERENCE_OPTIONS_VERSION, 0, NULL, 0, 0, 0, NULL, 0 }

/**
 * Fills @p tier with the defaults of struct version @p version (bindings; C may use
 * SHARDREC_SERVING_TIER_INIT). Thread-safe.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unknown version.
 */
SHARDREC_API shardrec_status_t shardrec_serving_tier_init(shardrec_serving_tier_t* tier,
                                                          uint32_t version);

/**
 * Fills @p options with the defaults of struct version @p version (bindings; C may use
 * SHARDREC_INFERENCE_OPTIONS_INIT). Thread-safe.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unknown version.
 */
SHARDREC_API shardrec_status_t
shardrec_inference_options_init(shardrec_inference_options_t* options, uint32_t version);

/**
 * Opens a checkpoint directory or a serving file for serving (see the file comment).
 * A checkpoint's tables are reassembled whole and converted to their storage types; a serving
 * file is mapped read-only and its checksums verified before this returns.
 * @param path    [in] A checkpoint directory or a serving file; must not be NULL or empty.
 * @param options [in] May be NULL (defaults). Read during the call only; copied.
 * @param out     [out] Receives the new handle on success (the caller owns it: destroy it with
 *                shardrec_inference_destroy); set to NULL on failure. Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for bad arguments or options (an unknown table name or
 *         storage); SHARDREC_EUNSUPPORTED for a device request; SHARDREC_ENOTFOUND when @p path
 *         does not exist or a directory has no manifest; SHARDREC_ECORRUPT for a malformed,
 *         truncated or mismatching file or a checksum that does not match (the message names the
 *         file and the record); SHARDREC_EIO; SHARDREC_ENOMEM.
 * Thread-safety: any thread.
 */
SHARDREC_API shardrec_status_t shardrec_inference_open(const char* path,
                                                       const shardrec_inference_options_t* options,
                                                       shardrec_inference_t** out);

/**
 * Writes the handle's current version (tables in their storage types, dense tensors) as one
 * serving file: written to a temporary name beside @p path, fsync'ed, renamed over @p path, and
 * the directory fsync'ed, so @p path holds either its previous content or the whole new file.
 * @param inf  [in] Must not be NULL.
 * @param path [in] File path (its directory must exist); must not be NULL or empty.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments; SHARDREC_EUNSUPPORTED when the version
 *         has a table served from the checkpoint's files (shardrec_serving_tier_t: open the
 *         checkpoint without tiers to convert it); SHARDREC_EIO when the file cannot be written
 *         (@p path is then unchanged in either case).
 * Thread-safety: any thread, concurrently with lookups and a reload (it saves the version that
 * was current when it started).
 */
SHARDREC_API shardrec_status_t shardrec_inference_save(const shardrec_inference_t* inf,
                                                       const char* path);

/**
 * Destroys the handle. Snapshots pinned from it stay valid until unpinned.
 * @param inf [in] Handle, or NULL (no-op). Must not be in use by another thread.
 */
SHARDREC_API void shardrec_inference_destroy(shardrec_inference_t* inf);

/**
 * Width of one output row: the sum of the dims of all (feature, table) pairs for a pooled
 * collection, the common table dim for a sequence collection (as shardrec_embedding_output_dim).
 * @param inf [in] Must not be NULL.  @param out [out] Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_inference_output_dim(const shardrec_inference_t* inf,
                                                             int64_t* out);

/**
 * Whether every table is NONE-pooled (one output row per id instead of one per sample).
 * @param inf [in] Must not be NULL.  @param out [out] Receives 1 or 0; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_inference_is_sequence(const shardrec_inference_t* inf,
                                                              int32_t* out);

/**
 * Number of features a batch must carry (the training plan's features, in its order).
 * @param inf [in] Must not be NULL.  @param out [out] Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_inference_num_features(const shardrec_inference_t* inf,
                                                               size_t* out);

/**
 * Number of tables.
 * @param inf [in] Must not be NULL.  @param out [out] Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_inference_num_tables(const shardrec_inference_t* inf,
                                                             size_t* out);

/**
 * Describes table @p index (plan order). Every output pointer may be NULL (not wanted).
 * @param inf     [in] Must not be NULL.
 * @param index   Table index, below shardrec_inference_num_tables.
 * @param name    [out] The table's name, owned by the handle, valid while the handle lives.
 * @param rows    [out] Number of rows: for a dynamic table, the ids with a row in the current
 *                version (it changes with reloads and deltas).  @param dim [out] Row width.
 * @param storage [out] The shardrec_serving_storage_t it is served in (never AS_TRAINED: the
 *                type it resolved to).
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL handle or an index out of range. Thread-safe
 *         (reloads keep names, dims, storage types and a fixed table's rows).
 */
SHARDREC_API shardrec_status_t shardrec_inference_table_info(const shardrec_inference_t* inf,
                                                             size_t index, const char** name,
                                                             int64_t* rows, int32_t* dim,
                                                             int32_t* storage);

/**
 * The row-wise quantization parameters of rows of an INT8, INT4 or FP8 table in the current
 * version (see the file comment): each value of an INT8/INT4 row i reads back as
 * q * scales[i] + biases[i] and lies within scales[i] / 2 of the trained value (plus the fp32
 * rounding of that expression and of the quotient; see the file comment), so a bag's lookup error
 * is bounded by the sum over its ids of |weight| * scale / 2; an FP8 row's value reads back as its
 * decoded code x scales[i] (bias 0), within the FP8 bound of the file comment.
 * @param inf         [in] Must not be NULL.
 * @param table       [in] Table name; must not be NULL; its storage must be INT8, INT4,
 *                    FP8_E4M3 or FP8_E5M2 (an FP8 checkpoint served AS_TRAINED included).
 * @param ids         [in] @p n rows: a fixed table's row indices in [0, rows), or a dynamic
 *                    table's ids (an id without a row reads the zero row: scale 0, bias 0); may
 *                    be NULL when @p n is 0. The bounds policy does not apply.
 * @param n           Number of ids.
 * @param scales      [out] @p n scales; may be NULL when @p n is 0.
 * @param biases      [out] @p n biases (each row's minimum; 0 for FP8 rows); may be NULL (not
 *                    wanted).
 * @param version_out [out] Receives the number of the version read; may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments, a table served in another storage or
 *         a fixed table's index out of range (nothing is written); SHARDREC_ENOTFOUND for an
 *         unknown table; SHARDREC_ECORRUPT / SHARDREC_EIO for a table served from the
 *         checkpoint's files whose rows cannot be read or changed since open, as
 *         shardrec_inference_lookup. Thread-safe, as a lookup: one version is read from the first
 *         id to the last.
 */
SHARDREC_API shardrec_status_t shardrec_inference_row_scales(const shardrec_inference_t* inf,
                                                             const char* table, const int64_t* ids,
                                                             size_t n, float* scales, float* biases,
                                                             uint64_t* version_out);

/**
 * The number of the version currently served: 1 after open, +1 per successful reload or delta.
 * @param inf [in] Must not be NULL.  @param out [out] Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_inference_version(const shardrec_inference_t* inf,
                                                          uint64_t* out);

/**
 * Looks up one batch on the current version, with shardrec_embedding_forward's batch and output
 * layout (pooled SUM/MEAN with per-id weights: [batch_size, output_dim]; sequence:
 * [num_values, dim]). Ids outside a table's rows follow the handle's bounds policy.
 * @param inf         [in] Must not be NULL.
 * @param batch       [in] Host batch; must not be NULL; borrowed for the call. Its num_features
 *                    must equal shardrec_inference_num_features.
 * @param out         [out] The output, overwritten; NULL only when its size is 0. Each thread
 *                    passes its own.
 * @param out_len     Number of floats in @p out; must equal the size above.
 * @param version_out [out] Receives the number of the version that answered; may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a bad batch (the message names the feature, sample,
 *         position and id; a per-id weight that is NaN or infinite is refused too, as training
 *         refuses it by default) or a wrong @p out_len (@p out is then unspecified);
 *         SHARDREC_EUNSUPPORTED for a device batch; for a table served from the checkpoint's
 *         files (shardrec_serving_tier_t), SHARDREC_ECORRUPT when a missed row's bytes no longer
 *         match the checksums taken at open (each unit of a rank file it reads, whole rows of at
 *         least 512 bytes, is checked before any of its rows is used; a store snapshot's record
 *         by its own checksum) or the file is shorter than at open, and SHARDREC_EIO when a
 *         read fails: the message names the table and the file, @p out is unspecified, nothing
 *         read is cached, the table's statistics do not change, and the handle goes on serving
 *         (other rows, and these once the file is whole again or the handle reloaded).
 * Thread-safety: any number of threads at once; tables held in memory take no lock, a table
 * served from its files (shardrec_serving_tier_t) takes its row cache's stripe locks and, for a
 * request with misses, a disk reader from a mutex-guarded pool. See the file comment.
 */
SHARDREC_API shardrec_status_t shardrec_inference_lookup(const shardrec_inference_t* inf,
                                                         const shardrec_kjt_view_t* batch,
                                                         float* out, size_t out_len,
                                                         uint64_t* version_out);

/**
 * shardrec_inference_lookup of a VBE batch (shardrec_kjt_vbe_view_t: a batch size per feature,
 * optional inverse indices), with the output layout that view describes: with inverse indices,
 * bit for bit the output of the expanded plain batch, each distinct bag summed once.
 * @param inf         [in] Must not be NULL.
 * @param batch       [in] Host VBE batch; must not be NULL; borrowed for the call.
 * @param out         [out] Overwritten; NULL only when its size is 0.
 * @param out_len     Number of floats; must equal the size the view describes.
 * @param version_out [out] May be NULL.
 * @return As shardrec_inference_lookup; SHARDREC_EINVAL also for a wrong view version, sizes that
 *         do not add up, or an inverse index outside [0, B_f) (the message names feature and
 *         sample).
 * Thread-safety: any number of threads at once, as shardrec_inference_lookup.
 */
SHARDREC_API shardrec_status_t shardrec_inference_lookup_vbe(const shardrec_inference_t* inf,
                                                             const shardrec_kjt_vbe_view_t* batch,
                                                             float* out, size_t out_len,
                                                             uint64_t* version_out);

/**
 * The number of floats shardrec_inference_lookup_vbe writes for @p batch (reads only its sizes).
 * @param inf [in] Must not be NULL.  @param batch [in] Must not be NULL.
 * @param out [out] Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments, a wrong version or F. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_inference_vbe_output_len(
    const shardrec_inference_t* inf, const shardrec_kjt_vbe_view_t* batch, size_t* out);

/**
 * Zero-copy read of a dense tensor saved with the checkpoint (shardrec_checkpoint_options_t's
 * dense tensors, e.g. an MLP's parameters) in the current version. The pointer stays valid until
 * the handle is destroyed or reloaded (a reload may free it once no reader holds the old
 * version): to read dense tensors and embeddings of one version safely across reloads, pin a
 * snapshot and use shardrec_inference_snapshot_dense_tensor.
 * @param inf         [in] Must not be NULL.
 * @param name        [in] The dense tensor's name as saved; must not be NULL.
 * @param data        [out] Receives the read-only floats (NULL when @p count is 0); not NULL.
 * @param count       [out] Receives the number of floats; must not be NULL.
 * @param version_out [out] Receives the version number read; may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments; SHARDREC_ENOTFOUND for an unknown
 *         name. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_inference_dense_tensor(const shardrec_inference_t* inf,
                                                               const char* name, const float** data,
                                                               size_t* count,
                                                               uint64_t* version_out);

/**
 * Pins the current version: the snapshot keeps its tables and dense tensors alive and unchanged
 * (also after reloads, and after the handle is destroyed) until shardrec_inference_unpin. A
 * request that runs the embedding lookup and the dense layers pins once and uses both through
 * the snapshot, so it sees one version. Each pinned snapshot holds its version's memory.
 * @param inf [in] Must not be NULL.
 * @param out [out] Receives the snapshot (the caller owns it: release it with
 *            shardrec_inference_unpin); NULL on failure. Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments; SHARDREC_ENOMEM. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_inference_pin(const shardrec_inference_t* inf,
                                                      shardrec_inference_version_t** out);

/**
 * Releases a snapshot; its version is freed if nothing else holds it.
 * @param ver [in] Snapshot, or NULL (no-op). Must not be in use by another thread.
 */
SHARDREC_API void shardrec_inference_unpin(shardrec_inference_version_t* ver);

/**
 * The version number of a snapshot.
 * @param ver [in] Must not be NULL.  @param out [out] Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t
shardrec_inference_snapshot_version(const shardrec_inference_version_t* ver, uint64_t* out);

/**
 * shardrec_inference_lookup on a pinned snapshot (same batch, output and errors).
 * @param ver     [in] Must not be NULL.
 * @param batch   [in] As for shardrec_inference_lookup.
 * @param out     [out] As for shardrec_inference_lookup.
 * @param out_len As for shardrec_inference_lookup.
 * @return As shardrec_inference_lookup. Thread-safe: any number of threads at once.
 */
SHARDREC_API shardrec_status_t
shardrec_inference_snapshot_lookup(const shardrec_inference_version_t* ver,
                                   const shardrec_kjt_view_t* batch, float* out, size_t out_len);

/**
 * shardrec_inference_lookup_vbe on a pinned snapshot (same batch, output and errors).
 * @param ver [in] Must not be NULL.  @param batch [in] As for shardrec_inference_lookup_vbe.
 * @param out [out] As for shardrec_inference_lookup_vbe.  @param out_len As there.
 * @return As shardrec_inference_lookup_vbe. Thread-safe: any number of threads at once.
 */
SHARDREC_API shardrec_status_t shardrec_inference_snapshot_lookup_vbe(
    const shardrec_inference_version_t* ver, const shardrec_kjt_vbe_view_t* batch, float* out,
    size_t out_len);

/**
 * shardrec_inference_dense_tensor on a pinned snapshot: the pointer stays valid until the
 * snapshot is unpinned.
 * @param ver   [in] Must not be NULL.  @param name [in] Must not be NULL.
 * @param data  [out] Must not be NULL.  @param count [out] Must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments; SHARDREC_ENOTFOUND for an unknown
 *         name. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_inference_snapshot_dense_tensor(
    const shardrec_inference_version_t* ver, const char* name, const float** data, size_t* count);

/**
 * Opens @p path (a checkpoint directory or a serving file) with the handle's options and swaps
 * it in as the next version, atomically, while lookups run (see the file comment: requests
 * started before the swap finish on the old version, whose memory is freed when its last reader
 * leaves). The new source must have the same features (names and order) and the same tables
 * (names, dims, pooling, resolved storage types, fixed or dynamic, and a fixed table's rows);
 * otherwise nothing changes. A reload also replaces every applied delta. One reload or delta at a
 * time per handle: a reload started while another reload or a delta runs is refused with
 * SHARDREC_EUSAGE (it does not wait). The call returns once the lookups that were running on the
 * old version have returned, with the old version freed unless a snapshot pins it.
 * @param inf  [in,out] Must not be NULL.
 * @param path [in] Must not be NULL or empty.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments or a source that does not match;
 *         SHARDREC_EUSAGE while another reload or a delta runs; as shardrec_inference_open
 *         for the source (SHARDREC_ENOTFOUND, SHARDREC_ECORRUPT, SHARDREC_EIO, SHARDREC_ENOMEM).
 *         On any error the handle keeps serving its current version.
 */
SHARDREC_API shardrec_status_t shardrec_inference_reload(shardrec_inference_t* inf,
                                                         const char* path);

/**
 * Applies a row delta to table @p table and publishes the result as the next version, atomically,
 * while lookups run (as shardrec_inference_reload: requests started before it finish on the old
 * version; version + 1). Only that table is copied: the new version shares every other table and
 * the dense tensors with the old one, so the extra memory is one copy of that table (plus its
 * index for a dynamic table) until the old version's last reader leaves.
 * Dynamic table: each id of @p ids gets row i of @p rows (inserted, or overwritten if present);
 * each id of @p tombstones loses its row (an id without a row is ignored: it already reads as
 * zeros). This is the replay of shardrec_embedding_dynamic_delta's output. A fixed table accepts
 * row updates only: each id must be a row index in [0, rows); tombstones are refused.
 * The fp32 rows are converted to the table's storage type as at open (rounding or row-wise
 * quantization). Nothing changes on any error.
 * @param inf            [in,out] Must not be NULL.
 * @param table          [in] Table name; must not be NULL.
 * @param ids            [in] num_rows ids, each at most once; may be NULL when num_rows is 0.
 * @param rows           [in] num_rows x dim floats, row-major, row i for ids[i]; may be NULL when
 *                       num_rows is 0. Read during the call only.
 * @param num_rows       Number of upserted rows.
 * @param tombstones     [in] num_tombstones ids to remove, none of them also in @p ids; may be
 *                       NULL when num_tombstones is 0.
 * @param num_tombstones Number of ids removed.
 * @param version_out    [out] Receives the new version number; may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments, an id given twice or both upserted and
 *         removed, a fixed table's id out of range or tombstones for a fixed table, or a row
 *         with a value that is not finite or that its fp16/bf16 storage cannot hold (beyond its
 *         range: it would read as infinity), or, for INT8/INT4, whose max - min is beyond fp32's
 *         range (its scale would be infinite); SHARDREC_ENOTFOUND for an unknown table;
 *         SHARDREC_EUNSUPPORTED for a table served from the checkpoint's files
 *         (shardrec_serving_tier_t; reload a newer checkpoint instead), the version unchanged;
 *         SHARDREC_EUSAGE while a reload or another delta of this handle runs (it does not wait);
 *         SHARDREC_ENOMEM.
 * Thread-safety: as shardrec_inference_reload (any thread, with lookups running; one reload or
 * delta at a time per handle). Returns once the lookups running on the old version have returned.
 */
SHARDREC_API shardrec_status_t shardrec_inference_apply_delta(
    shardrec_inference_t* inf, const char* table, const int64_t* ids, const float* rows,
    size_t num_rows, const int64_t* tombstones, size_t num_tombstones, uint64_t* version_out);

/**
 * shardrec_inference_apply_delta with the delta's flags (shardrec_delta_flag_t, common.h), as
 * shardrec_embedding_dynamic_delta_ext exported them: pass them on unchanged. 0 applies the
 * delta as shardrec_inference_apply_delta does. SHARDREC_DELTA_FULL (a dynamic table only) makes
 * the delta's rows the whole table: the new version holds exactly @p ids with their rows, and
 * every other id the table served is removed (it reads as zeros), so a copy in any state (opened
 * from an older checkpoint, or having missed deltas) ends equal to the training table. Its
 * tombstones are still checked (each at most once, none also upserted) and have nothing left to
 * remove. A service that follows training by deltas should use this call: the trainer sets the
 * flag when it loaded a checkpoint since its mark, and a full delta merged as an ordinary one
 * could keep rows the trainer no longer holds (docs/serving.md, "Deltas").
 * @param flags Bits of shardrec_delta_flag_t; a bit this library does not define is refused
 *              (SHARDREC_EINVAL), since it could change what the delta means.
 * Other parameters: as shardrec_inference_apply_delta.
 * @return As shardrec_inference_apply_delta; SHARDREC_EINVAL also for an unknown flag or
 *         SHARDREC_DELTA_FULL on a fixed table (it has no rows to remove). Nothing changes on any
 *         error.
 * Thread-safety: as shardrec_inference_apply_delta.
 */
SHARDREC_API shardrec_status_t
shardrec_inference_apply_delta_ext(shardrec_inference_t* inf, const char* table, const int64_t* ids,
                                   const float* rows, size_t num_rows, const int64_t* tombstones,
                                   size_t num_tombstones, uint32_t flags, uint64_t* version_out);

/**
 * The row cache of a table served from the checkpoint's files (shardrec_serving_tier_t), in the
 * version that answered: counts since that version was opened (a reload starts a new cache and
 * new counts). A "row of a request" is a distinct row of one lookup (or row_scales call): a row
 * named by many ids of one request counts once.
 */
typedef struct shardrec_serving_tier_stats {
  uint32_t version;        /**< SHARDREC_SERVING_TIER_STATS_VERSION. */
  uint64_t model_version;  /**< The handle's version these figures belong to. */
  int64_t cache_bytes;     /**< DRAM of the cache: cache_slots x (stored row + 64). */
  int64_t cache_slots;     /**< Rows the cache can hold. */
  int64_t cache_rows;      /**< Rows it holds now. */
  int64_t hits;            /**< Rows of a request found in the cache. A request that fails
                                (a read, a checksum) counts nowhere in these statistics. */
  int64_t misses;          /**< Rows of a request read from the checkpoint's files. */
  double hit_rate;         /**< hits / (hits + misses); 0 before the first lookup. */
  int64_t disk_reads;      /**< Reads issued to the files: a request's misses are read as one
                                batch, parts of a rank file less than a page apart sharing one
                                read, a store snapshot's rows one record each; so fewer than
                                misses where missed rows lie close. The page cache may answer
                                some without the disk. */
  int64_t disk_read_bytes; /**< Bytes those reads asked for: a rank file is read in whole
                                checksum units (whole rows of the record, the fewest of
                                at least 512 bytes), so 512 or more per read where rows
                                are smaller. */
} shardrec_serving_tier_stats_t;

#define SHARDREC_SERVING_TIER_STATS_VERSION 1u
#define SHARDREC_SERVING_TIER_STATS_INIT \
  { SHARDREC_SERVING_TIER_STATS_VERSION, 0, 0, 0, 0, 0, 0, 0.0, 0, 0 }

/**
 * Fills @p stats with zeros for struct version @p version. Thread-safe.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version.
 */
SHARDREC_API shardrec_status_t
shardrec_serving_tier_stats_init(shardrec_serving_tier_stats_t* stats, uint32_t version);

/**
 * The row cache statistics of tiered table @p table in the handle's current version.
 * @param inf   [in] Must not be NULL.
 * @param table [in] A table name; must not be NULL.
 * @param out   [in,out] Initialised with shardrec_serving_tier_stats_init or
 *              SHARDREC_SERVING_TIER_STATS_INIT; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments, an unsupported version or a table held
 *         in memory; SHARDREC_ENOTFOUND for an unknown table.
 * Thread-safety: any thread, at the same time as lookups and a reload (lock-free like a lookup;
 * cache_rows takes each lock stripe of the cache in turn).
 */
SHARDREC_API shardrec_status_t shardrec_inference_tier_stats(const shardrec_inference_t* inf,
                                                             const char* table,
                                                             shardrec_serving_tier_stats_t* out);

SHARDREC_END_DECL

#endif /* SHARDREC_INFERENCE_H_ */
