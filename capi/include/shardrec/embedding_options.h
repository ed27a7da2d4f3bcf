/**
 * @file shardrec/embedding_options.h
 * @brief The options of an embedding collection (shardrec_embedding_options_t) and the policies
 *        they select: ids out of range, non-finite inputs, the encoding of communicated
 *        embeddings and gradients, and the memory backing of weights and optimizer state.
 *
 * Included by shardrec/embedding.h, which creates collections with these options; a program
 * includes either. Thread-safety: the types are plain data; shardrec_embedding_options_init is
 * thread-safe.
 */
#ifndef SHARDREC_EMBEDDING_OPTIONS_H_
#define SHARDREC_EMBEDDING_OPTIONS_H_

#include "shardrec/common.h"

SHARDREC_BEGIN_DECL

/**
 * What happens to an id outside [0, rows) of a fixed table that reads its feature. A dynamic
 * table has no such ids (every 64-bit value is one) and ignores the policy.
 */
typedef enum shardrec_bounds_policy {
  SHARDREC_BOUNDS_ERROR = 0, /**< Reject the batch with SHARDREC_EINVAL (default). */
  SHARDREC_BOUNDS_CLAMP = 1, /**< Use row 0 instead (FBGEMM's default behaviour). */
  SHARDREC_BOUNDS_SKIP = 2   /**< Drop the id from its bag (it counts for nothing, MEAN too); in
                                  a sequence collection its output row stays (the output keeps one
                                  row per id) and is zeros, and it trains nothing. */
} shardrec_bounds_policy_t;

/**
 * A tiered table (docs/disk-tier.md): this rank keeps the rows and optimizer state of its shards
 * of @ref table in record stores on its own disk, under @ref dir, and only the hot rows in a DRAM
 * cache of @ref cache_bytes. Forward, backward and the fused optimizer touch cached rows only: a
 * forward makes every row of its batch resident first (a miss is read from disk, through the
 * pipelined input distribution one batch ahead), and a changed row leaving the cache is written
 * back asynchronously, never lost. The results are bit-identical to the same table held in
 * memory, whatever the cache size. Per rank: ranks may pass different directories and sizes,
 * except that a table whose column shards exchange row statistics (row-wise Adagrad, partial
 * row-wise Adam or LAMB with split columns) needs the same @ref cache_bytes on every rank.
 * Host collections only (a GPU collection refuses any tier with SHARDREC_EUNSUPPORTED); not
 * data-parallel tables (SHARDREC_EUNSUPPORTED). A dynamic table may be tiered: its id index and
 * eviction metadata stay in memory for every slot of its capacity, its rows and optimizer state
 * go to the store, and admission, eviction and every result are those of the dynamic table in
 * memory; its cache must hold the distinct ids of each training forward's batch per shard
 * (SHARDREC_EINVAL on every rank before any id is inserted otherwise). A forward that fails on
 * one rank's tier (its batch does not fit, its store fails a read) fails on every rank at once
 * with the error naming that rank. Checkpoint save and load take tiered tables (streamed in
 * bounded chunks, in the format of in-memory tables, so a checkpoint moves between tiered and
 * in-memory collections); table import and 2D replicas refuse them (SHARDREC_EUNSUPPORTED) in
 * this version; table export, delta export of dynamic tables and get/set of weights and
 * optimizer state (fixed tables) work. Plain data.
 */
typedef struct shardrec_table_tier {
  uint32_t version;    /**< SHARDREC_TABLE_TIER_VERSION. */
  const char* table;   /**< A table of the plan, named by at most one tier; copied. A name
                            the plan lacks, or a second tier of one table, is an invalid
                            argument of creation (SHARDREC_EINVAL), not a lookup
                            (SHARDREC_ENOTFOUND is shardrec_embedding_tier_stats'). */
  const char* dir;     /**< This rank's directory for the table's stores (one subdirectory per
                            local shard), created if missing (SHARDREC_EIO at creation, naming
                            the path, when it cannot be); non-empty; copied. What it holds is
                            scratch for the collection's life: an earlier run's stores are
                            emptied at creation, never read. */
  int64_t cache_bytes; /**< > 0: DRAM for this rank's cached rows of the table (rows at their
                            storage dtype, optimizer state and 32 bytes of metadata each),
                            divided among the most shards of the table one rank holds, at most
                            the shard's rows each. A forward needs its batch's distinct rows per
                            shard resident at once (SHARDREC_EINVAL naming the counts when they
                            do not fit); a size worth no row is SHARDREC_EINVAL at creation. */
} shardrec_table_tier_t;

#define SHARDREC_TABLE_TIER_VERSION 1u
#define SHARDREC_TABLE_TIER_INIT \
  { SHARDREC_TABLE_TIER_VERSION, NULL, NULL, 0 }

/**
 * Fills @p tier with the defaults (no table, no directory, no cache).
 * @param tier    [out] Struct to fill; must not be NULL.
 * @param version SHARDREC_TABLE_TIER_VERSION.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_table_tier_init(shardrec_table_tier_t* tier,
                                                        uint32_t version);

/** Options of a collection. */
typedef struct shardrec_embedding_options {
  uint32_t version;         /**< SHARDREC_EMBEDDING_OPTIONS_VERSION. */
  uint64_t seed;            /**< Seed of the initial weights; 0 is a valid seed. */
  int32_t bounds_policy;    /**< A shardrec_bounds_policy_t; 0 is ERROR. */
  int32_t num_threads;      /**< Host threads for lookups and updates, at most 1024; 0 or 1
                                 runs on the calling thread (ranks are often threads of one
                                 process). */
  shardrec_comm_t* dp_comm; /**< Group over which data-parallel tables average gradients;
                                NULL means the collection's communicator (2D training passes
                                the global group). Borrowed for creation, then shared: the
                                collection keeps it alive. */
  int32_t device_type;      /**< SHARDREC_DEVICE_HOST (0), or SHARDREC_DEVICE_CUDA for a GPU
                                 collection (v1): weights and optimizer states live on that
                                 device and its lookups and optimizer updates run there through
                                 the CUDA plugin, while the combine and (with a host
                                 communicator) every exchange stay on the host, the data staged
                                 across PCIe through a pinned block the collection owns, on a
                                 stream of its own, one bounded wait per step phase; a call with
                                 host buffers returns with its device work complete, one with
                                 CUDA views on this device is stream-ordered (embedding.h's
                                 Device note, shardrec_embedding_synchronize, the capacity
                                 hints below). A KJT in host memory is routed on the host; a KJT
                                 declared on the collection's device (shardrec_kjt_view_t
                                 device fields) is validated and routed there, and the routed
                                 ids are copied to the host for the exchange (one wait to learn
                                 the sizes, one for the copies), with the same results and
                                 error messages as the host routing; a KJT on another device
                                 is SHARDREC_EINVAL. It needs the plugin and the device
                                 (shardrec_device_check), else create fails with
                                 SHARDREC_ENODEVICE (SHARDREC_EUNSUPPORTED from a libshardrec
                                 built without CUDA while SHARDREC_CUDA_PLUGIN is unset).
                                 Checkpoints, table export/import and the replica sync of
                                 2D training stage the parameters through host memory: the
                                 same files as a host collection
                                 (shardrec/checkpoint.h), the same averages
                                 (shardrec/replica.h). It also takes a CUDA (NCCL)
                                 communicator of its own device_index (another device is
                                 SHARDREC_EINVAL): then the ids, the return and gradient
                                 messages, the row statistics and the data-parallel gradients
                                 travel between device buffers on the collection's stream, and
                                 only the route summaries (which learn the received sizes: the
                                 step's one bounded wait with CUDA views) are staged through the
                                 host; a host collection refuses an NCCL communicator
                                 (SHARDREC_EUNSUPPORTED). A device KJT with a plugin built
                                 before the device routing is SHARDREC_EUNSUPPORTED. It
                                 starts with the same weights as a host collection of the same
                                 plan and seed and trains to the same bits (tested through a
                                 fake plugin, and on one H200 at worlds 1 and 2:
                                 docs/status.md). */
  int32_t device_index;     /**< CUDA ordinal (>= 0) of a GPU collection; ignored on the host. */
  /* Version 2. */
  int32_t non_finite;   /**< A shardrec_non_finite_policy_t; 0 is CHECK. */
  int32_t table_memory; /**< A shardrec_table_memory_t; 0 is HUGE_PAGES. */
  /* Version 3. */
  int32_t forward_comm_encoding;  /**< A shardrec_comm_encoding_t for the forward's return
                                       all-to-all of looked-up (pooled or per-id) rows; 0 is
                                       FP32 (exact). */
  int32_t backward_comm_encoding; /**< A shardrec_comm_encoding_t for the backward's gradient
                                       all-to-all and the data-parallel tables' gradient
                                       all-reduce; 0 is FP32 (exact). May differ from the
                                       forward's. */
  /* Version 4: capacity hints of a GPU collection. Host collections accept and ignore them. */
  int64_t max_batch_size;    /**< Most samples this rank passes to one forward (its batch_size);
                                  0 = unknown. */
  int64_t max_ids_per_batch; /**< Most ids this rank passes to one forward, over all features
                                  (its num_values); 0 = unknown. With both hints > 0 a GPU
                                  collection sizes every per-step device buffer and its pinned
                                  staging block at creation for the worst case of the plan
                                  (every rank at the hints, all ids routed here): a step within
                                  the hints allocates nothing and waits only at its phase ends,
                                  and creation fails with SHARDREC_ENOMEM naming the bytes when
                                  the device cannot hold them. A batch beyond the hints still
                                  works: the buffers grow on demand (cudaMalloc and a stream
                                  wait in that step) and stay grown. With either hint 0 every
                                  buffer grows on demand from the first steps on. Negative is
                                  SHARDREC_EINVAL. */
  /* Version 5. */
  const shardrec_table_tier_t* tiers; /**< The tiered tables of this rank (see
                                  shardrec_table_tier_t), an array of num_tiers filled for one
                                  version; read during creation only. NULL when num_tiers is 0. */
  size_t num_tiers;                   /**< Length of @ref tiers; 0: every table in memory. */
} shardrec_embedding_options_t;

/**
 * How the floats of a collection's embedding collectives travel between ranks
 * (shardrec_embedding_options_t.forward_comm_encoding / backward_comm_encoding), TorchRec's
 * "qcomms". The caller always passes and receives fp32; only the wire is 16-bit (half the bytes
 * of the collective) or FP8 (below). Each value is rounded once, to nearest even (the same
 * conversion as FLOAT16/BFLOAT16 weight storage), when it is sent and widened exactly when it
 * arrives. Blocks a rank sends to itself are not encoded, so a world-1 collection is exact in any
 * encoding. Sums are never formed in 16 or 8 bits: received values are widened and added in fp32.
 *
 * Error per element, with u = 2^-11 (FP16) or 2^-8 (BF16), for a value x that crosses ranks:
 *  - |decode(encode(x)) - x| <= u * |x| while |x| is in the normal range (FP16: 2^-14 <= |x| <=
 *    65504; BF16: fp32's whole range); below it FP16 adds at most 2^-25 absolute.
 *  - FP16 saturates: a finite |x| > 65504 arrives as +-65504 (not as an infinity); infinities and
 *    NaN pass through. BF16 has fp32's range and never overflows.
 *  - Forward: an output element is the fp32 sum of the partial sums of the ranks that hold parts
 *    of its rows (one partial for table-, column-wise and data-parallel tables, one per row block
 *    for row-wise), each rounded once: |error| <= u * sum over partials of |partial|, which is at
 *    most u * sum over the bag of |weight * row element| (divided by the bag divisor for MEAN).
 *    Data-parallel tables are looked up locally: exact.
 *  - Backward, sharded tables: each id's output-gradient slice (already divided by the MEAN
 *    divisor) is rounded once before the owner sums it in fp32, so a row's gradient is off by at
 *    most u * sum over its occurrences of |gradient * weight / divisor| / W.
 *  - Backward, data-parallel tables: the gradient all-reduce is a reduce-scatter (each rank's
 *    block rounded once, summed in fp32 in rank order) and an all-gather of the rounded sums, so
 *    at most (2u + u^2) * sum over ranks of |that rank's gradient| / W per element, and every
 *    replica receives the same values (replicas stay identical).
 * (Each bound is on top of the fp32 rounding the exact run has too.) The optimizer then works on
 * these gradients in fp32 (an SGD step moves a weight by at most lr times the gradient error). Row
 * statistics of column shards, accessors and checkpoints are always exact fp32.
 *
 * FP8 (FP8_E4M3, FP8_E5M2) sends 1 byte a value plus 1 byte per block of 32 consecutive
 * values of one destination's buffer (1.03 bytes a value: 0.26x fp32's bytes, 0.52x fp16's).
 * A block's values are divided by a shared power-of-two scale (exact) chosen so that its largest
 * magnitude A does not saturate, then rounded to nearest even, as FP8 weight storage rounds a row
 * (docs/semantics.md, "FP8 weights"). Per value |decode(encode(x)) - x| <= max(u |x|, f A,
 * 2^-136) with u = 2^-4, f = 2^-17 (E4M3) or u = 2^-3, f = 2^-31 (E5M2), so the bounds above
 * hold with that u plus, per rounding, f times the largest magnitude in its block. Nothing
 * saturates; an infinity arrives as its block's largest finite value, a NaN as a NaN. Blocks
 * need not align to rows: one may span the end of a row and the start of the next.
 */
typedef enum shardrec_comm_encoding {
  SHARDREC_COMM_ENCODING_FP32 = 0,     /**< Exact fp32 (the default): bit-identical results. */
  SHARDREC_COMM_ENCODING_FP16 = 1,     /**< IEEE half: u = 2^-11, saturates beyond +-65504. */
  SHARDREC_COMM_ENCODING_BF16 = 2,     /**< bfloat16: u = 2^-8, fp32's range. */
  SHARDREC_COMM_ENCODING_FP8_E4M3 = 3, /**< OCP FP8 E4M3, 32-value blocks with a shared
                                            power-of-two scale: u = 2^-4, f = 2^-17 (above). */
  SHARDREC_COMM_ENCODING_FP8_E5M2 = 4  /**< OCP FP8 E5M2, the same blocks: u = 2^-3,
                                            f = 2^-31. */
} shardrec_comm_encoding_t;

/** How the host memory of weights and optimizer state is backed (shardrec_embedding_options_t). */
typedef enum shardrec_table_memory {
  /** 2 MiB aligned and advised for transparent huge pages: random row reads miss the TLB far
      less (large tables look rows up ~2x faster). Where the OS offers no huge pages this is
      ordinary memory. The default. */
  SHARDREC_TABLE_MEMORY_HUGE_PAGES = 0,
  /** Ordinary pages (for hosts that reserve huge pages for other uses). */
  SHARDREC_TABLE_MEMORY_SMALL_PAGES = 1
} shardrec_table_memory_t;

/** What a collection does with NaN and infinite inputs (shardrec_embedding_options_t). */
typedef enum shardrec_non_finite_policy {
  /** A NaN or infinite per-id weight (forward) or output-gradient element (backward) is
      rejected like any bad input: SHARDREC_EINVAL naming the feature/sample (or sample and
      column), nothing changes on any rank. The check costs one pass over the weights and the
      gradient per step. The default. */
  SHARDREC_NON_FINITE_CHECK = 0,
  /** No check: non-finite values flow into outputs, weights and optimizer state. */
  SHARDREC_NON_FINITE_ALLOW = 1
} shardrec_non_finite_policy_t;

#define SHARDREC_EMBEDDING_OPTIONS_VERSION 5u
#define SHARDREC_EMBEDDING_OPTIONS_INIT                                                           \
  {                                                                                               \
    SHARDREC_EMBEDDING_OPTIONS_VERSION, 0u, SHARDREC_BOUNDS_ERROR, 0, NULL, SHARDREC_DEVICE_HOST, \
        0, SHARDREC_NON_FINITE_CHECK, SHARDREC_TABLE_MEMORY_HUGE_PAGES,                           \
        SHARDREC_COMM_ENCODING_FP32, SHARDREC_COMM_ENCODING_FP32, 0, 0, NULL, 0                   \
  }

/**
 * Fills @p options with the defaults (seed 0, bounds ERROR, calling thread, host, non-finite
 * values rejected, exact fp32 communication, no capacity hints). Version 1 callers (no
 * non_finite field) get the check; version 1 and 2 callers (no encoding fields) communicate in
 * exact fp32; version 1 to 3 callers (no hint fields) have no hints; version 1 to 4 callers (no
 * tiers) keep every table in memory.
 * @param options [out] Struct to fill; must not be NULL.
 * @param version SHARDREC_EMBEDDING_OPTIONS_VERSION.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t
shardrec_embedding_options_init(shardrec_embedding_options_t* options, uint32_t version);

SHARDREC_END_DECL

#endif /* SHARDREC_EMBEDDING_OPTIONS_H_ */
