/**
 * @file shardrec/tier.h
 * @brief Tiered tables of an embedding collection (docs/disk-tier.md): this rank's statistics of
 *        a table whose rows live on disk under a DRAM cache (shardrec_table_tier_t,
 *        embedding_options.h, makes a table tiered).
 *
 * Thread-safety: as every call on a collection, one thread at a time per collection handle; a
 * call made while another thread uses the collection returns SHARDREC_EUSAGE.
 */
#ifndef SHARDREC_TIER_H_
#define SHARDREC_TIER_H_

#include "shardrec/common.h"
#include "shardrec/embedding.h"

SHARDREC_BEGIN_DECL

/**
 * This rank's part of one tiered table, summed over the shards of it this rank holds; counts
 * since the collection's creation. A "row of a batch" is a distinct row of one forward on one
 * shard: hits + misses counts each once per forward. The write-back queue is shared by every
 * tiered table of the collection: written, queue_depth and queue_max_depth are the queue's. A
 * forward refused because its batch does not fit the cache counts in none of the fields; one that
 * fails later (a store read) counts no step and none of its exposed seconds.
 */
typedef struct shardrec_tier_stats {
  uint32_t version;             /**< SHARDREC_TIER_STATS_VERSION. */
  int64_t cache_bytes;          /**< DRAM of the cache: slots x (record + 32 bytes). */
  int64_t cache_slots;          /**< Rows the cache can hold. */
  int64_t cache_rows;           /**< Rows it holds now. */
  int64_t hits;                 /**< Rows of a batch found in the cache. */
  int64_t misses;               /**< Rows of a batch that were not (read or initialised). */
  double hit_rate;              /**< hits / (hits + misses); 0 before the first forward. */
  int64_t disk_reads;           /**< Records read from the store, those it still held in its
                                     write buffer in memory (copied, not read from a file)
                                     included. */
  int64_t disk_read_bytes;      /**< Bytes the store read from its files (whole pages); not
                                     counting records copied from its write buffer, so it may
                                     be 0 while disk_reads is not. */
  int64_t disk_bytes;           /**< Bytes of the store's files. */
  int64_t queue_reads;          /**< Misses served from the write-back queue. */
  int64_t initialised;          /**< Misses of rows never written (their initial values). */
  int64_t prefetched;           /**< Misses read one batch ahead (pipelined input distribution). */
  int64_t write_backs;          /**< Changed rows evicted to the write-back queue. */
  int64_t written;              /**< Records the queue's thread wrote to the stores. */
  int64_t queue_depth;          /**< Records queued now. */
  int64_t queue_max_depth;      /**< The most records queued at once. */
  int64_t steps;                /**< Forwards that resolved the table's rows. */
  double exposed_fetch_seconds; /**< Seconds forwards waited for rows from disk or the queue
                                     (a prefetch not finished, its installs included, and
                                     misses read at the forward), in total; divide by steps
                                     for the mean per step. */
  double last_exposed_fetch_seconds; /**< The same, in the last forward. */
} shardrec_tier_stats_t;

#define SHARDREC_TIER_STATS_VERSION 1u
#define SHARDREC_TIER_STATS_INIT \
  { SHARDREC_TIER_STATS_VERSION, 0, 0, 0, 0, 0, 0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0 }

/**
 * Fills @p stats with zeros for struct version @p version.
 * @param stats   [out] Struct to fill; must not be NULL.
 * @param version SHARDREC_TIER_STATS_VERSION.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_tier_stats_init(shardrec_tier_stats_t* stats,
                                                        uint32_t version);

/**
 * This rank's statistics of tiered table @p table (see shardrec_tier_stats_t). Local: no
 * collective. Does not wait for a prefetch or the write-back queue.
 * @param coll  The collection; must not be NULL.
 * @param table A table of the collection's plan; must not be NULL.
 * @param out   [in,out] Initialised with shardrec_tier_stats_init; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND for a table not in the plan; SHARDREC_EINVAL for NULL
 *         arguments, an unsupported version or a table this rank does not hold tiered;
 *         SHARDREC_EUSAGE when another thread is using the collection.
 */
SHARDREC_API shardrec_status_t shardrec_embedding_tier_stats(const shardrec_embedding_t* coll,
                                                             const char* table,
                                                             shardrec_tier_stats_t* out);

SHARDREC_END_DECL

#endif /* SHARDREC_TIER_H_ */
