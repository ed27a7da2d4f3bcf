/**
 * @file shardrec/config.h
 * @brief Versioned configuration structs shared by the planner and the embedding collection:
 *        features, tables, the topology the plan is made for, and per-table constraints.
 *
 * Every struct starts with `uint32_t version`. Fill it with its `_init()` function (bindings)
 * or its `_INIT` macro (C), then set fields. Zero means "default" where the field says so.
 * Fields are only ever appended; a caller built against an older header keeps working.
 * That holds for arrays too: an array of these structs (shardrec_plan_create's tables, features
 * and constraints) is read at the stride of the version its first element declares, so every
 * element of one array must declare the same version.
 */
#ifndef SHARDREC_CONFIG_H_
#define SHARDREC_CONFIG_H_

#include "shardrec/common.h"

SHARDREC_BEGIN_DECL

/**
 * Sharding types (stored as int32_t; constraint masks use `1u << SHARDREC_SHARDING_*`).
 * The values never change; they mirror the library's internal enum.
 */
typedef enum shardrec_sharding_type {
  SHARDREC_SHARDING_DATA_PARALLEL = 0,     /**< Whole table on every rank; gradients all-reduced. */
  SHARDREC_SHARDING_TABLE_WISE = 1,        /**< Whole table on one rank. */
  SHARDREC_SHARDING_ROW_WISE = 2,          /**< ceil(rows/W)-row blocks on ranks 0..W-1. */
  SHARDREC_SHARDING_COLUMN_WISE = 3,       /**< Full-height column blocks on any ranks. */
  SHARDREC_SHARDING_TABLE_ROW_WISE = 4,    /**< Row blocks over the ranks of one node. */
  SHARDREC_SHARDING_TABLE_COLUMN_WISE = 5, /**< Column blocks on ranks of one node. */
  SHARDREC_SHARDING_GRID = 6               /**< Column blocks, each row-split over one node. */
} shardrec_sharding_type_t;

/** Number of sharding types; valid constraint mask bits are below `1u << SHARDREC_SHARDING_COUNT`.
 */
#define SHARDREC_SHARDING_COUNT 7

/** How the ids of one bag are combined (stored as int32_t). */
typedef enum shardrec_pooling {
  SHARDREC_POOLING_SUM = 0,  /**< Sum of the rows of the bag. */
  SHARDREC_POOLING_MEAN = 1, /**< Mean of the rows of the bag (0 for an empty bag). */
  SHARDREC_POOLING_NONE = 2  /**< No pooling: one output row per id (sequence features). */
} shardrec_pooling_t;

/** How a table's weights are initialised (stored as int32_t). */
typedef enum shardrec_init_kind {
  SHARDREC_INIT_DEFAULT = 0, /**< Uniform in [-sqrt(1/rows), +sqrt(1/rows)]. */
  SHARDREC_INIT_UNIFORM = 1, /**< Uniform in [init_low, init_high). */
  SHARDREC_INIT_CONSTANT = 2 /**< Every element equals init_low. */
} shardrec_init_kind_t;

/* ---------------------------------------------------------------------------------------- */

/** A sparse feature (one key of the KJT input). Features are addressed by their index. */
typedef struct shardrec_feature_config {
  uint32_t version;     /**< SHARDREC_FEATURE_CONFIG_VERSION. */
  const char* name;     /**< Unique, non-empty, NUL-terminated; copied by the callee. */
  float pooling_factor; /**< Planner hint: expected ids per bag; 0 means 1.0. */
} shardrec_feature_config_t;

#define SHARDREC_FEATURE_CONFIG_VERSION 1u
#define SHARDREC_FEATURE_CONFIG_INIT \
  { SHARDREC_FEATURE_CONFIG_VERSION, NULL, 0.0f }

/**
 * Fills @p config with defaults for struct version @p version.
 * @param config  [out] Struct to fill; must not be NULL.
 * @param version SHARDREC_FEATURE_CONFIG_VERSION (or an older supported version).
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_feature_config_init(shardrec_feature_config_t* config,
                                                            uint32_t version);

/* ---------------------------------------------------------------------------------------- */

/** Fused optimizer types (stored as int32_t). */
typedef enum shardrec_optimizer_type {
  SHARDREC_OPTIMIZER_SGD = 0,                  /**< w -= lr * g. No state. */
  SHARDREC_OPTIMIZER_ADAGRAD = 1,              /**< State "momentum1" [rows, dim]. */
  SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD = 2,      /**< State "momentum1" [rows]. */
  SHARDREC_OPTIMIZER_ADAM = 3,                 /**< "momentum1", "momentum2" [rows, dim]. */
  SHARDREC_OPTIMIZER_PARTIAL_ROWWISE_ADAM = 4, /**< "momentum1" [rows, dim], "momentum2" [rows]. */
  SHARDREC_OPTIMIZER_LAMB = 5                  /**< "momentum1", "momentum2" [rows, dim]. */
} shardrec_optimizer_type_t;

/** Weight decay modes (stored as int32_t). */
typedef enum shardrec_weight_decay_mode {
  SHARDREC_WEIGHT_DECAY_NONE = 0,     /**< No weight decay. */
  SHARDREC_WEIGHT_DECAY_L2 = 1,       /**< g += weight_decay * w before the update rule. */
  SHARDREC_WEIGHT_DECAY_DECOUPLED = 2 /**< AdamW-style: w -= lr * weight_decay * w, apart from
                                           the rule; for LAMB the term weight_decay * w is added
                                           to the update direction inside the trust ratio (as
                                           the LAMB paper and FBGEMM do). */
} shardrec_weight_decay_mode_t;

/** Fused optimizer configuration (TorchRec/FBGEMM names and defaults). */
typedef struct shardrec_optimizer_config {
  uint32_t version;            /**< SHARDREC_OPTIMIZER_CONFIG_VERSION. */
  int32_t type;                /**< A shardrec_optimizer_type_t; 0 is SGD. */
  float learning_rate;         /**< >= 0; taken literally (init sets 0.01). */
  float eps;                   /**< > 0; 0 means 1e-8. */
  float beta1;                 /**< In [0, 1); taken literally (init sets 0.9). */
  float beta2;                 /**< In [0, 1); taken literally (init sets 0.999). */
  float weight_decay;          /**< >= 0; 0 disables weight decay. */
  int32_t weight_decay_mode;   /**< A shardrec_weight_decay_mode_t; 0 is NONE. */
  int32_t stochastic_rounding; /**< Non-zero: FLOAT16/BFLOAT16 tables round each updated
                                    weight stochastically (up with probability equal to the
                                    discarded fraction) instead of to nearest even, so many
                                    small updates do not vanish; FP8_E4M3/FP8_E5M2 tables
                                    encode each updated row with its usual scale and each
                                    value so rounded between its two nearest codes
                                    (docs/semantics.md "FP8 weights"). The random bits are a pure
                                    function of (options.seed, step, table, row, column), for
                                    a dynamic table (seed, step, table, id, column): the id
                                    its row holds, whatever slot it occupies. Results are
                                    deterministic and plan-independent. 0 (the default):
                                    round to nearest even. No effect on FLOAT32. */
} shardrec_optimizer_config_t;

#define SHARDREC_OPTIMIZER_CONFIG_VERSION 1u
#define SHARDREC_OPTIMIZER_CONFIG_INIT                                                           \
  {                                                                                              \
    SHARDREC_OPTIMIZER_CONFIG_VERSION, SHARDREC_OPTIMIZER_SGD, 0.01f, 1e-8f, 0.9f, 0.999f, 0.0f, \
        0, 0                                                                                     \
  }

/**
 * Fills @p config with the defaults (SGD, lr 0.01, eps 1e-8, betas 0.9/0.999, no decay,
 * round to nearest even).
 * @param config  [out] Struct to fill; must not be NULL.
 * @param version SHARDREC_OPTIMIZER_CONFIG_VERSION.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_optimizer_config_init(shardrec_optimizer_config_t* config,
                                                              uint32_t version);

/* ---------------------------------------------------------------------------------------- */

/** What a full dynamic table does with an id it would insert (stored as int32_t). */
typedef enum shardrec_eviction_policy {
  SHARDREC_EVICTION_NONE = 0, /**< Nothing is evicted: a full shard refuses new ids (they read as
                                   zeros and train nothing) and counts them as rejected. */
  SHARDREC_EVICTION_LRU = 1,  /**< The row seen longest ago leaves first (ties: smallest id). */
  SHARDREC_EVICTION_LFU = 2,  /**< The row seen least often leaves first (ties: seen longest ago,
                                   then smallest id). */
  SHARDREC_EVICTION_TTL = 3,  /**< Only rows not seen for more than ttl_steps training steps may
                                   leave, longest ago first; otherwise as NONE. */
  SHARDREC_EVICTION_SCORE = 4 /**< The row with the lowest score the caller set leaves first
                                   (ties: smallest id); new rows score 0
                                   (shardrec_embedding_dynamic_set_scores). */
} shardrec_eviction_policy_t;

/**
 * What makes a table dynamic (docs/dynamic-tables.md): its ids are any 64-bit value, a row is
 * created the first time training sees its id (after admission) and leaves by eviction. The
 * table's `rows` is then its capacity in rows. Host collections only (GPU collections refuse
 * with SHARDREC_EUNSUPPORTED); every sharding type. A data-parallel dynamic table's ranks agree
 * on each training forward's inserts (one all-gather of every rank's ids of the step).
 */
typedef struct shardrec_dynamic_table_config {
  uint32_t version;            /**< SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION. */
  int32_t eviction;            /**< A shardrec_eviction_policy_t; 0 is NONE. */
  int32_t admission_threshold; /**< Occurrences in training an id needs before it gets a row
                                    (counted in a bounded sketch that may overcount, never
                                    undercount); 0 or 1: at first sight. 0 to 65535 (the
                                    counts saturate at 65535); else SHARDREC_EINVAL. */
  int64_t ttl_steps;           /**< TTL only: steps a row may go unseen before it may be
                                    evicted; >= 1 with TTL, else ignored. */
  /* Version 2. */
  int64_t capacity_bytes; /**< 0: the capacity is the table's `rows`. Else the capacity in bytes
                               of memory, and the table's `rows` must be 0 (give one of the two):
                               shardrec_plan_create turns it into the largest slot count whose
                               rows at the storage dtype, optimizer state (the table's optimizer,
                               else the topology's) and per-slot metadata, counted as the planner
                               counts them for one shard, fit in it (docs/dynamic-tables.md,
                               "Capacity in bytes"; rounded down). A figure too small for one slot
                               is SHARDREC_EINVAL naming the table and the cost of a slot. >= 0. */
  /* Version 3. */
  int64_t admission_decay_steps; /**< 0: admission counts never decay (the default). Else, at
                               the start of every training step whose number (1, 2, ... since
                               the table was created, checkpoints included) is a multiple of
                               it, before that step counts its ids, every admission count of
                               the table is halved, rounded down (docs/dynamic-tables.md,
                               "Admission"): an id must then be seen about admission_threshold
                               times within recent steps rather than over the whole run, and
                               the counts of ids seen long ago fade instead of filling the
                               sketch. Ignored when admission_threshold <= 1. >= 0. */
} shardrec_dynamic_table_config_t;

#define SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION 3u
#define SHARDREC_DYNAMIC_TABLE_CONFIG_INIT \
  { SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION, SHARDREC_EVICTION_NONE, 0, 0, 0, 0 }

/**
 * Fills @p config with the defaults (no eviction, admission at first sight, no capacity in bytes,
 * no decay) for struct version @p version (1, 2 or 3; version 1 has no capacity_bytes, version 2
 * no admission_decay_steps).
 * @param config  [out] Struct to fill; must not be NULL.
 * @param version SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t
shardrec_dynamic_table_config_init(shardrec_dynamic_table_config_t* config, uint32_t version);

/* ---------------------------------------------------------------------------------------- */

/** An embedding table. Several features may read one table; each feature reads one table. */
typedef struct shardrec_table_config {
  uint32_t version;        /**< SHARDREC_TABLE_CONFIG_VERSION. */
  const char* name;        /**< Unique, non-empty, NUL-terminated; copied by the callee. */
  int64_t rows;            /**< Number of rows (hash size); must be > 0, and rows x dim at
                                most 2^56. A dynamic table (@ref dynamic): its capacity in rows,
                                split into row blocks like a fixed table's rows; 0 when its
                                capacity is given in bytes (its dynamic config's capacity_bytes),
                                and the plan then holds the slot count. */
  int32_t dim;             /**< Embedding dimension; must be > 0. */
  int32_t pooling;         /**< SHARDREC_POOLING_*; 0 is SUM. */
  int32_t dtype;           /**< Weight storage type, SHARDREC_DTYPE_*; 0 is FLOAT32. */
  const int32_t* features; /**< Indices into the feature array of the features that read this
                                table, in output order; copied by the callee. NULL when the
                                features are named instead (@ref feature_names). */
  size_t num_features;     /**< Length of @ref features; >= 1 unless @ref feature_names is used. */
  int32_t init_kind;       /**< SHARDREC_INIT_*; 0 is DEFAULT. */
  float init_low;          /**< Lower bound (UNIFORM) or the value (CONSTANT). */
  float init_high;         /**< Upper bound (UNIFORM). */
  /* Version 2. */
  const shardrec_optimizer_config_t* optimizer; /**< The table's own fused optimizer (TorchRec's
                                per-table fused params), copied into the plan: the planner counts
                                its state and the collection trains the table with it. NULL: the
                                collection's default optimizer. */
  const char* const* feature_names; /**< The names of the features that read this table, in
                                output order, as an alternative to @ref features (use one of the
                                two); copied by the callee. NULL when @ref features is used. */
  size_t num_feature_names;         /**< Length of @ref feature_names. */
  /* Version 3. */
  const shardrec_dynamic_table_config_t* dynamic; /**< NULL: a fixed table (ids in [0, rows)).
                                Else a dynamic table (docs/dynamic-tables.md), configured by it;
                                copied by the callee. */
} shardrec_table_config_t;

#define SHARDREC_TABLE_CONFIG_VERSION 3u
#define SHARDREC_TABLE_CONFIG_INIT \
  { SHARDREC_TABLE_CONFIG_VERSION, NULL, 0, 0, 0, 0, NULL, 0, 0, 0.0f, 0.0f, NULL, NULL, 0, NULL }

/**
 * Fills @p config with defaults for struct version @p version (1, 2 or 3; version 1 has no
 * optimizer or feature names, version 2 no dynamic config).
 * @param config  [out] Struct to fill; must not be NULL.
 * @param version SHARDREC_TABLE_CONFIG_VERSION.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_table_config_init(shardrec_table_config_t* config,
                                                          uint32_t version);

/* ---------------------------------------------------------------------------------------- */

/**
 * The machines a plan is made for: one sharding group of `world_size` ranks.
 * Bandwidths are in bytes per second. Memory is HBM for CUDA ranks, host memory for host ranks.
 */
typedef struct shardrec_topology {
  uint32_t version;       /**< SHARDREC_TOPOLOGY_VERSION. */
  int32_t world_size;     /**< Ranks in the sharding group; in [1, 65536]. */
  int32_t ranks_per_node; /**< Ranks per node (TWRW/TWCW/grid node size); 0 means world_size.
                               Must be in [1, world_size]; node-local sharding types are only
                               offered when it divides world_size. */
  int32_t device_type;    /**< SHARDREC_DEVICE_HOST (0) or SHARDREC_DEVICE_CUDA. */
  uint64_t memory_bytes;  /**< Usable memory per rank; 0 means 128 GiB (host) or 32 GiB (CUDA). */
  const uint64_t* memory_bytes_per_rank; /**< Optional per-rank capacities (overrides
                                  @ref memory_bytes); NULL or world_size entries. Not retained. */
  size_t num_memory_bytes_per_rank;      /**< 0, or world_size. */
  double intra_node_bandwidth;           /**< Bytes/s between ranks of a node; 0 means 600 GiB/s
                                              (CUDA) or 2 GiB/s (host: Gloo over loopback TCP).
                                              shardrec_topology_calibrate writes the
                                              shared-memory transport's figure where the ranks
                                              of a node use it. */
  double inter_node_bandwidth; /**< Bytes/s between nodes (per rank); 0 means 12.5 GiB/s (CUDA)
                                    or 1 GiB/s (host). */
  int32_t batch_size;          /**< Expected samples per rank per step; 0 means 512. */
  int32_t optimizer;           /**< Default optimizer of the tables that have none of their own:
                                    its state is counted in storage, and a collection created with
                                    a NULL optimizer trains with it (default hyperparameters). By
                                    the values of
                                    SHARDREC_OPTIMIZER_* (0 SGD, 1 Adagrad, 2 row-wise Adagrad,
                                    3 Adam, 4 partial row-wise Adam, 5 LAMB); 0 is SGD (no state). */
  double memory_bandwidth;     /**< Bytes/s of the embedding lookup's memory traffic; 0 means
                                    897 GiB/s (CUDA HBM) or 5 GiB/s (host: one rank's random-row
                                    gather, far below a socket's streaming bandwidth). */
  double reserved_fraction;    /**< Share of each rank's memory kept free for other uses, in
                                    [0, 1); 0 reserves nothing. */
  /* Version 2. */
  double collective_latency; /**< Seconds of fixed cost per collective (5 per training step,
                                  +1 with a data-parallel table, +1 when column shards exchange
                                  row statistics; none at world_size 1); 0 means
                                  the default: none for CUDA (TorchRec's model), 50 us for host.
                                  Negative values are refused. */
  double per_id_cost;        /**< Seconds of host work per id of a rank's batch per training
                                  step (routing, packing, the backward's aggregation); 0 means
                                  the default: none for CUDA, 15 ns for host. */
  /* Version 3: the local disk of tiered tables (docs/disk-tier.md, "Planning"). */
  uint64_t disk_capacity;     /**< Bytes of disk per rank for tiered tables' records; 0 means
                                   1 TiB. shardrec_topology_calibrate_disk fills it. */
  double disk_read_bandwidth; /**< Bytes/s per rank of random 4 KiB reads; 0 means 1 GiB/s.
                                   Measured by shardrec_topology_calibrate_disk. */
  double disk_read_iops;      /**< Random 4 KiB reads per second per rank; 0 means 100000.
                                   Measured by shardrec_topology_calibrate_disk. */
} shardrec_topology_t;

#define SHARDREC_TOPOLOGY_VERSION 3u
#define SHARDREC_TOPOLOGY_INIT                                                                   \
  {                                                                                              \
    SHARDREC_TOPOLOGY_VERSION, 1, 0, SHARDREC_DEVICE_HOST, 0, NULL, 0, 0.0, 0.0, 0, 0, 0.0, 0.0, \
        0.0, 0.0, 0, 0.0, 0.0                                                                    \
  }

/**
 * Fills @p topology with defaults (one host rank) for struct version @p version (1 to 3;
 * version 1 has no collective_latency or per_id_cost, version 2 no disk figures).
 * @param topology [out] Struct to fill; must not be NULL.
 * @param version  SHARDREC_TOPOLOGY_VERSION.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_topology_init(shardrec_topology_t* topology,
                                                      uint32_t version);

/* ---------------------------------------------------------------------------------------- */

/**
 * Constraints on how the planner may shard one table (keyed by table name). Restricting a
 * table to one sharding type gives that type; how many blocks it has stays the planner's
 * choice (column-wise may keep a narrow table as one block of its full dim, when that is
 * cheapest).
 *
 * Pinned ranks (@ref ranks) are a set: the order given is not kept (the planner sorts them),
 * and a rank listed twice or outside [0, world_size) is SHARDREC_EINVAL. With the type
 * restricted as well, pinning gives:
 *  - CW, and TWCW whose pinned ranks are all on one node, with min_partition 0: one shard per
 *    pinned rank, the k-th shard in column order on the k-th lowest pinned rank; widths are
 *    dim / n, the first dim % n shards one column wider (a dim smaller than the number n of
 *    pinned ranks is SHARDREC_EINVAL). CW pinned to {1, 0} on a dim of 128 gives columns 0-63
 *    to rank 0 and 64-127 to rank 1. No two shards share a rank, and a shard that does not fit
 *    its rank is not moved to another.
 *  - CW with min_partition > 0, and TWCW with min_partition > 0 or pinned ranks on several
 *    nodes: column blocks of the planner's width, as without pins. Each block in column order
 *    goes to the pinned rank that fits it and has the least estimated cost placed on it so far
 *    (earlier tables and this table's earlier blocks count), ties to the lower local rank
 *    (rank % ranks_per_node), then the lower rank; TWCW first picks one node (the least summed
 *    cost among those with a pinned rank, ties to the lower node; the next if the blocks do not
 *    fit) and uses only its pinned ranks. Several blocks can land on one rank: 4 blocks over
 *    pinned ranks {0, 1} go 0, 1, 0, 1; TWCW pinned to {1, 2} with 2 ranks per node puts every
 *    block on rank 1.
 *  - TW: the one shard goes to the pinned rank chosen as for a block above: neither the first
 *    listed nor necessarily the lowest (pinned to {1, 2} with 2 ranks per node and nothing
 *    placed yet, rank 2).
 *  - DP and RW use every rank: offered only when every rank is pinned. TWRW and grid use whole
 *    nodes: offered when all ranks of some node are pinned, and placed only on such nodes.
 * For an exact layout the planner does not give (a rank order, widths of your choosing), write
 * the plan as JSON and read it with shardrec_plan_from_json (docs/plan-format.md).
 */
typedef struct shardrec_table_constraints {
  uint32_t version;             /**< SHARDREC_TABLE_CONSTRAINTS_VERSION. */
  const char* table;            /**< Name of the constrained table; must name a configured table. */
  uint32_t sharding_types;      /**< Bitmask of `1u << SHARDREC_SHARDING_*`; 0 means the default set
                                     (every type except GRID, which is used only when asked for). */
  int32_t min_partition;        /**< Lower bound of a column block width (CW/TWCW/grid); 0 means
                                     128, or, with pinned ranks and CW (TWCW: pinned ranks on one
                                     node), one shard per pinned rank (see above). */
  const int32_t* ranks;         /**< Pinned ranks, a set (order ignored, no rank twice): shards go
                                     only to these ranks (types that need other ranks are not
                                     offered; which shard goes where: see above). NULL when
                                     @ref num_ranks is 0. Copied by the callee. */
  size_t num_ranks;             /**< Length of @ref ranks; 0 means any rank. */
  const float* pooling_factors; /**< Optional expected ids per bag for each feature of the table
                                  (in the table's feature order), overriding the feature config. */
  size_t num_pooling_factors;   /**< 0, or the table's number of features. */
  /* Version 2: a tiered table (docs/disk-tier.md, "Planning"). */
  uint64_t tier_cache_bytes; /**< The table is tiered with this cache per rank
                                  (shardrec_table_tier_t.cache_bytes): the plan counts the cache,
                                  its write-back queue and the store's index in memory, the
                                  records on the topology's disk, and prices the misses at the
                                  disk's rate. 0: held in memory. A tiered table is never
                                  data-parallel; a dynamic one is refused (SHARDREC_EINVAL). */
  double tier_hit_rate;      /**< The expected share of a step's distinct rows the cache
                                  holds, in (0, 1]; 0: estimated from @ref id_zipf_alpha. */
  double id_zipf_alpha;      /**< The Zipf exponent of the table's ids (0: uniform, the
                                  cache's share of the rows); >= 0. Used for the hit rate. */
} shardrec_table_constraints_t;

#define SHARDREC_TABLE_CONSTRAINTS_VERSION 2u
#define SHARDREC_TABLE_CONSTRAINTS_INIT \
  { SHARDREC_TABLE_CONSTRAINTS_VERSION, NULL, 0u, 0, NULL, 0, NULL, 0, 0, 0.0, 0.0 }

/**
 * Fills @p constraints with defaults (no constraint) for struct version @p version.
 * @param constraints [out] Struct to fill; must not be NULL.
 * @param version     SHARDREC_TABLE_CONSTRAINTS_VERSION.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t
shardrec_table_constraints_init(shardrec_table_constraints_t* constraints, uint32_t version);

SHARDREC_END_DECL

#endif /* SHARDREC_CONFIG_H_ */
