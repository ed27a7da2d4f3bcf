/**
 * @file shardrec/dynamic.h
 * @brief Dynamic tables of an embedding collection: this rank's statistics, delta export
 *        (the rows changed since a mark, and tombstones) and the caller's eviction scores.
 *
 * A dynamic table (shardrec_table_config_t.dynamic, config.h) takes any 64-bit id, creates a row
 * the first time a training forward sees its id (after admission) and evicts rows by policy when
 * a shard is full (docs/dynamic-tables.md). Its training and lookups go through the calls of
 * embedding.h like a fixed table's; this header holds the calls that exist only for dynamic
 * tables. Dynamic tables are host-only: GPU collections refuse them (SHARDREC_EUNSUPPORTED), and
 * nothing here touches a GPU or a stream.
 *
 * Thread-safety: as every call on a collection, one thread at a time per collection handle; a
 * call made while another thread uses the collection returns SHARDREC_EUSAGE.
 */
#ifndef SHARDREC_DYNAMIC_H_
#define SHARDREC_DYNAMIC_H_

#include "shardrec/common.h"
#include "shardrec/embedding.h"

SHARDREC_BEGIN_DECL

/* ---- Statistics and delta export ------------------------------------------------------ */

/**
 * This rank's part of one dynamic table (docs/dynamic-tables.md): the rows of the row blocks it
 * holds and what training forwards did to them. A block split into column shards is counted
 * once, by the rank that holds its first columns; a rank holding only later columns of a block
 * reports zeros for it except its memory (metadata_bytes, capacity_bytes). The table's totals
 * are the sums over ranks. A data-parallel table, whose copies are the same on every rank, is
 * counted once: rank 0 of the collection reports it, and every other rank reports zeros except
 * the memory its own copy holds (metadata_bytes, capacity_bytes). "Last" counts are those of the
 * last training forward, "total" counts those since the collection's creation: counts of this
 * collection's own forwards, which checkpoints do not carry (a load keeps the totals, clears the
 * last counts and sets size to the loaded table's).
 */
typedef struct shardrec_dynamic_table_stats {
  uint32_t version;                 /**< SHARDREC_DYNAMIC_TABLE_STATS_VERSION. */
  int64_t size;                     /**< Rows (ids with a row) held here. */
  int64_t capacity;                 /**< Slots of the row blocks held here. */
  double load_factor;               /**< size / capacity; 0 when capacity is 0. */
  int64_t last_inserted;            /**< Rows created (an admitted id counts here once it gets
                                         its row). */
  int64_t last_evicted;             /**< Rows that left (with their optimizer state). */
  int64_t last_rejected_admission;  /**< Distinct ids below the admission threshold. */
  int64_t last_rejected_full;       /**< Distinct admitted ids that found no slot. */
  int64_t total_inserted;           /**< As last_inserted, since creation. */
  int64_t total_evicted;            /**< As last_evicted, since creation. */
  int64_t total_rejected_admission; /**< As last_rejected_admission, summed over the forwards
                                         since creation (an id turned away by 3 forwards
                                         counts 3). */
  int64_t total_rejected_full;      /**< As last_rejected_full, since creation. */
  uint64_t metadata_bytes;          /**< Bytes of this rank's id index, per-slot metadata and
                                         admission counts for the table (beyond the rows and their
                                         optimizer state). */
  /* Version 2. */
  uint64_t capacity_bytes; /**< The capacity in bytes of memory: what this rank allocated for
                                the table's row blocks held here, every slot's row (storage
                                dtype) and optimizer state on every column shard, each shard's
                                zero row, and metadata_bytes. Compare with the table config's
                                capacity_bytes, which counts the slots alone
                                (docs/dynamic-tables.md, "Capacity in bytes"). */
  /* Version 3. */
  int64_t last_admitted;  /**< Distinct ids without a row that the last training forward
                               admitted (their count reached the admission threshold; every new
                               id at a threshold of 0 or 1): each then got a row (last_inserted)
                               or found no free slot (last_rejected_full), so this is their sum. */
  int64_t total_admitted; /**< As last_admitted, summed over the forwards since creation (an id
                               admitted by 3 forwards, finding no slot in the first 2, counts 3). */
} shardrec_dynamic_table_stats_t;

#define SHARDREC_DYNAMIC_TABLE_STATS_VERSION 3u
#define SHARDREC_DYNAMIC_TABLE_STATS_INIT \
  { SHARDREC_DYNAMIC_TABLE_STATS_VERSION, 0, 0, 0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0u, 0u, 0, 0 }

/**
 * Fills @p stats with zeros for struct version @p version.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t
shardrec_dynamic_table_stats_init(shardrec_dynamic_table_stats_t* stats, uint32_t version);

/**
 * This rank's part of dynamic table @p table (see shardrec_dynamic_table_stats_t).
 * @param coll  [in] Must not be NULL.
 * @param table [in] Table name; must not be NULL.
 * @param out   [in,out] Initialised with shardrec_dynamic_table_stats_init; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table; SHARDREC_EINVAL for NULL, an
 *         unsupported version or a table that is not dynamic; SHARDREC_EUSAGE when another
 *         thread is using the collection. Not collective; changes nothing.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_stats(
    const shardrec_embedding_t* coll, const char* table, shardrec_dynamic_table_stats_t* out);

/**
 * Collective over the collection's communicator: the whole dynamic table @p table, on every rank
 * alike. Each count and byte field is the sum over ranks of shardrec_embedding_dynamic_stats
 * (size and capacity are the table's rows and slots, the byte fields the memory every rank
 * holds for it, copies of a data-parallel table included), and load_factor is the summed size
 * over the summed capacity (0 when that is 0). The agreement below, then one all-reduce of 14
 * int64 values; the fields up to @p out's version are written.
 * Arguments: a rank refusing its own (NULL @p table or @p out, an unsupported version, an unknown
 * or fixed table) still takes part in one agreement before the sums, so every rank fails at once
 * (SHARDREC_EINVAL naming that rank on the others; a NULL @p coll alone fails only its rank).
 * Ranks naming different tables all get SHARDREC_EINVAL ("named different tables").
 * @param coll  [in] Must not be NULL.
 * @param table [in] Table name; must not be NULL; the same on every rank.
 * @param out   [in,out] Initialised with shardrec_dynamic_table_stats_init (any supported
 *              version; ranks may differ); must not be NULL. Unchanged on error.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table (on the rank that named it; the
 *         others get SHARDREC_EINVAL naming it); SHARDREC_EINVAL for NULL, an unsupported
 *         version or a table that is not dynamic; SHARDREC_EUSAGE when another thread is using
 *         the collection; a failed exchange (SHARDREC_EREMOTE, SHARDREC_ETIMEOUT). Changes
 *         nothing in the collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_stats_global(
    shardrec_embedding_t* coll, const char* table, shardrec_dynamic_table_stats_t* out);

/**
 * Sets this rank's mark of dynamic table @p table for delta export
 * (shardrec_embedding_dynamic_delta; docs/dynamic-tables.md, "Delta export"): forgets which rows
 * changed, which ids left and whether a checkpoint load replaced the table (SHARDREC_DELTA_FULL)
 * before, and starts tracking them (tracking is off until the first mark; it then costs one bit
 * per slot and 8 bytes per eviction until the next mark, and at loads 8 bytes per distinct id
 * held since the mark).
 * Not collective (it communicates nothing), but every rank must call it between the same two
 * training steps, or the deltas mix different periods.
 * @param coll  [in] Must not be NULL.
 * @param table [in] Table name; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table; SHARDREC_EINVAL for NULL or a
 *         table that is not dynamic; SHARDREC_EUSAGE when another thread is using the collection.
 *         Does not touch the GPU or any stream (dynamic tables are host-only).
 */
SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_mark(shardrec_embedding_t* coll,
                                                               const char* table);

/**
 * Collective over the collection's communicator: the whole dynamic table's changes since the
 * marks, on every rank. Rows changed are those a training forward saw or inserted since the mark
 * (a superset of those the optimizer changed), as their ids (ascending) and current weights
 * widened to fp32; tombstones are the ids that left since the mark and have no row now: evicted,
 * dropped by a 2D merge, or held before a checkpoint load that does not hold them (an id that
 * left and came back is a changed row). Replaying a delta (upsert each row, erase each
 * tombstone) onto a copy of the table as it was at the mark gives the table as it is. A
 * checkpoint load since the mark makes every row a changed row; only
 * shardrec_embedding_dynamic_delta_ext says so (SHARDREC_DELTA_FULL), which a copy that may not
 * be the table at the mark (a trainer restarted from a checkpoint) needs. The marks stay: call
 * shardrec_embedding_dynamic_mark to start the next period.
 * Buffers: if @p max_rows or @p max_tombstones is smaller than needed, nothing is written,
 * @p num_rows and @p num_tombstones receive the sizes needed and SHARDREC_EINVAL is returned (pass
 * 0 and NULL buffers to ask for the sizes; each call gathers again). The sizes are the same on
 * every rank, so ranks given the same capacities fail alike; a rank given smaller ones than the
 * others fails alone, after the gather, its peers' calls succeed and the ranks stay in step.
 * Arguments: a rank refusing its own (NULL out-parameters or buffers with a capacity, an unknown
 * or fixed table) still takes part in one agreement before the gather, so every rank fails at
 * once (SHARDREC_EINVAL naming that rank on the others; a NULL @p coll alone fails only its rank).
 * The same agreement compares the table: ranks naming different tables all get SHARDREC_EINVAL
 * ("named different tables") and nothing is gathered.
 * @param coll           [in] Must not be NULL.
 * @param table          [in] Table name; must not be NULL.
 * @param ids            [out] max_rows ids; may be NULL when max_rows is 0.
 * @param rows           [out] max_rows x dim floats, row-major; may be NULL when max_rows is 0.
 * @param max_rows       [in] Capacity of @p ids and of @p rows in rows.
 * @param tombstones     [out] max_tombstones ids; may be NULL when max_tombstones is 0.
 * @param max_tombstones [in] Capacity of @p tombstones.
 * @param num_rows       [out] Rows in the delta; must not be NULL.
 * @param num_tombstones [out] Tombstones in the delta; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table (on the rank that named it; the
 *         others get SHARDREC_EINVAL naming it); SHARDREC_EINVAL for NULL, a table that is not
 *         dynamic or buffers too small (see above); SHARDREC_EUSAGE, on every
 *         rank, when a rank has not marked the table or has an input distribution pending, or
 *         when another thread is using the collection; a failed exchange (SHARDREC_EREMOTE,
 *         SHARDREC_ETIMEOUT). Changes nothing in the collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_delta(
    shardrec_embedding_t* coll, const char* table, int64_t* ids, float* rows, size_t max_rows,
    int64_t* tombstones, size_t max_tombstones, size_t* num_rows, size_t* num_tombstones);

/**
 * shardrec_embedding_dynamic_delta, and the delta's flags (shardrec_delta_flag_t, common.h) in
 * @p flags: SHARDREC_DELTA_FULL when a checkpoint load (shardrec_checkpoint_load or _load_mesh)
 * replaced the table since the marks. The table held at the mark is then not known to be what a
 * serving copy holds: a trainer restarted from a checkpoint has a mark from after its start
 * while the copy still follows the trainer before it, and a load may step back to an older
 * checkpoint. So the delta holds every row of the table, and a consumer that applies it with
 * the flag (shardrec_inference_apply_delta_ext) replaces its copy's rows with them, removing
 * every other id, and ends equal to the table whatever it held; replayed without the flag onto
 * the table at the mark it still gives the table (its tombstones name every id gone since the
 * mark). A trainer that restarts thus creates its collection, marks, loads, and the next delta
 * brings every serving copy to the loaded table. The flag stays until the next mark; a mark after
 * the load clears it (the table at the mark is then the loaded one). A table import
 * (shardrec_checkpoint_import_table) or a 2D merge (shardrec_mesh_sync) does not set it: they
 * keep the table's history since the mark (an import removes nothing; a merge's dropped ids are
 * tombstones), so their deltas stay ordinary ones, every row of the shards they rewrote marked
 * changed.
 * @param flags [out] Receives the flags, also when the buffers are too small (so the size query
 *              tells them too); must not be NULL. Bits not defined today are 0; a consumer should
 *              pass them on unchanged (the apply refuses bits it does not know).
 * Other parameters, return codes and collectivity: as shardrec_embedding_dynamic_delta.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_delta_ext(
    shardrec_embedding_t* coll, const char* table, int64_t* ids, float* rows, size_t max_rows,
    int64_t* tombstones, size_t max_tombstones, size_t* num_rows, size_t* num_tombstones,
    uint32_t* flags);

/* ---- Caller's scores (SHARDREC_EVICTION_SCORE) ----------------------------------------- */

/**
 * Sets the eviction scores of rows of dynamic table @p table, whose eviction policy must be
 * SHARDREC_EVICTION_SCORE (docs/dynamic-tables.md, "Scores"): when a shard is full, the rows the
 * forward did not see leave lowest score first, ties by smallest id. A row's score is 0 when it
 * is created and stays what was last set until the row leaves (a row evicted and inserted again
 * starts at 0). Scores are saved by checkpoints.
 * Per owner, not collective: this rank sets the score of each id of @p ids that has a row on one
 * of its shards (every column shard of that row block) and ignores the others, so every rank may
 * be given the same whole list: the result does not depend on the plan or world size. An id
 * without a row is not remembered (set its score after the forward that inserts it). An id given
 * twice takes its last score. All values are checked before any is set: on error nothing changes.
 * A data-parallel table (every rank holds a copy) is different: this rank's entries that name a
 * row of its copy now are recorded, and the next training forward (collective anyway) gathers
 * every rank's recorded entries and sets them on every copy before it translates, in rank order
 * and each rank's call order, so a later rank's score wins for an id given by several ranks. The
 * call may thus be made on any ranks with any lists and the copies stay identical. Until that
 * forward the entries are pending: an evaluation forward, a checkpoint or an export does not see
 * them, and an entry whose row has left by then is ignored.
 * @param coll    [in] Must not be NULL.
 * @param table   [in] Table name; must not be NULL.
 * @param ids     [in] @p n ids (any 64-bit values); may be NULL when @p n is 0.
 * @param scores  [in] @p n finite scores, scores[i] for ids[i]; may be NULL when @p n is 0.
 * @param n       Number of ids.
 * @param num_set [out] How many of the @p n entries named a row held here (for a data-parallel
 *                table: a row of this rank's copy, the entries recorded); may be NULL.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for an unknown table; SHARDREC_EINVAL for NULL
 *         pointers (with n > 0), a non-finite score, a table that is not dynamic or whose
 *         eviction policy is not SCORE; SHARDREC_EUSAGE when another thread is using the
 *         collection. Does not touch the GPU or any stream (dynamic tables are host-only).
 * Thread-safety: one thread at a time per collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_dynamic_set_scores(shardrec_embedding_t* coll,
                                                                     const char* table,
                                                                     const int64_t* ids,
                                                                     const double* scores, size_t n,
                                                                     size_t* num_set);

SHARDREC_END_DECL

#endif /* SHARDREC_DYNAMIC_H_ */
