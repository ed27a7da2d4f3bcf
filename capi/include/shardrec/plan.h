/**
 * @file shardrec/plan.h
 * @brief The sharding planner: from tables, features, a topology and constraints to a plan that
 *        says which rank holds which rectangle of every table; queries, JSON text form, stats.
 *
 * A plan is made for one sharding group of `world_size` ranks. Planning is deterministic: the
 * same inputs give a byte-identical plan (same JSON text, same hash) on every rank and thread,
 * so ranks can plan locally and compare shardrec_plan_hash() instead of shipping the plan.
 *
 * Thread-safety: a shardrec_plan_t is immutable after creation; every function of this header
 * may be called on the same plan from any number of threads at once (destroy excepted).
 */
#ifndef SHARDREC_PLAN_H_
#define SHARDREC_PLAN_H_

#include "shardrec/common.h"
#include "shardrec/config.h"

SHARDREC_BEGIN_DECL

/** One rectangle of a table placed on one rank (ranks are sharding-group local). */
typedef struct shardrec_shard {
  int64_t row_offset; /**< First global row of the shard. */
  int64_t rows;       /**< Number of rows; 0 for the empty tail shards of row-wise layouts. */
  int32_t col_offset; /**< First column of the shard. */
  int32_t cols;       /**< Number of columns; always > 0. */
  int32_t rank;       /**< Rank holding the shard, in [0, world_size). */
} shardrec_shard_t;

/**
 * Plans the placement of @p tables on @p topology.
 *
 * Options per table are enumerated from its allowed sharding types, estimated (storage:
 * weights + optimizer state + input/output buffers; cost: TorchRec's perf model), proposed
 * (grid search when small, greedy, uniform) and partitioned under each rank's memory; the
 * cheapest placement (lowest cost of the busiest rank) wins, ties going to the first found.
 *
 * Arrays of versioned structs (@p tables, @p features, @p constraints): each array is read at
 * the stride of the struct version its first element declares, so a program built against an
 * older config.h passes arrays of the older, shorter struct and keeps working (fields appended
 * after its version take their defaults). Every element of one array must therefore declare the
 * same version (fill them all with the same `_init(x, version)` or `_INIT` macro); the three
 * arrays are independent of one another. A program built against this header passes arrays of
 * today's struct and must declare the current version in each element.
 *
 * @param out             [out] Receives the new plan; must not be NULL. Set only on success.
 * @param tables          [in] @p num_tables table configs; not retained. NULL only if 0 tables.
 * @param num_tables      Number of tables; must be >= 1.
 * @param features        [in] @p num_features feature configs (KJT key order); not retained.
 * @param num_features    Number of features; each must be read by at least one table (a
 *                        feature may feed several tables, each giving its own output block).
 * @param topology        [in] The sharding group; must not be NULL.
 * @param constraints     [in] Optional per-table constraints; NULL only if @p num_constraints
 *                        is 0. At most one per table.
 * @param num_constraints Number of constraints.
 * @return SHARDREC_OK; SHARDREC_EINVAL for invalid arguments (the message names the table,
 *         feature or field; bad struct version, elements of one array declaring different
 *         versions, zero rows, duplicate names, unknown feature index, impossible
 *         constraints); SHARDREC_ENOMEM when no placement fits the memory of
 *         the topology (the message names the table, its size and the largest free capacity,
 *         or, for shards that must share one host, what the roomiest host offers).
 * Thread-safety: safe to call concurrently. The caller owns *out (shardrec_plan_destroy).
 */
SHARDREC_API shardrec_status_t
shardrec_plan_create(shardrec_plan_t** out, const shardrec_table_config_t* tables,
                     size_t num_tables, const shardrec_feature_config_t* features,
                     size_t num_features, const shardrec_topology_t* topology,
                     const shardrec_table_constraints_t* constraints, size_t num_constraints);

/**
 * Builds a plan from its JSON text form (as written by shardrec_plan_to_json) and validates
 * it: every element of every table covered exactly once (every rank for data-parallel), ranks
 * in range, layouts following the rules of their sharding type, feature indices valid.
 * @param out  [out] Receives the new plan; must not be NULL. Set only on success.
 * @param text [in] UTF-8 JSON text of @p len bytes (need not be NUL-terminated); not retained.
 * @param len  Length of @p text in bytes.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL @p out, a NULL @p text with @p len > 0, or
 *         when the text parses but the plan is invalid (message names the table and the rule
 *         broken); SHARDREC_ECORRUPT when the text is not well-formed JSON or lacks a field
 *         (message gives the byte offset); SHARDREC_EUNSUPPORTED when the plan is valid but
 *         beyond this build's limits (a dynamic shard of more slots than a shard numbers; the
 *         message names the table, the shard and the limit); SHARDREC_ENOMEM when memory runs
 *         out. Nothing is set on failure.
 * Thread-safety: safe to call concurrently. The caller owns *out.
 */
SHARDREC_API shardrec_status_t shardrec_plan_from_json(shardrec_plan_t** out, const char* text,
                                                       size_t len);

/**
 * Writes the plan as JSON text. export(import(export(p))) is byte-identical to export(p).
 * @param plan     [in] The plan; must not be NULL.
 * @param text_out [out] Receives a NUL-terminated buffer; free it with shardrec_free().
 * @param len_out  [out] Receives the text length in bytes (without the terminator); may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_to_json(const shardrec_plan_t* plan, char** text_out,
                                                     size_t* len_out);

/**
 * Human-readable planner statistics: per rank (shards by type, memory used vs capacity,
 * estimated cost) and per table (type, shards, ranks, cost, storage). For a plan read from JSON
 * the estimates assume a host topology with default capacities.
 * @param plan     [in] The plan; must not be NULL.
 * @param text_out [out] Receives a NUL-terminated buffer; free it with shardrec_free().
 * @param len_out  [out] Receives the text length in bytes; may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_stats(const shardrec_plan_t* plan, char** text_out,
                                                   size_t* len_out);

/**
 * Stable 64-bit hash of everything in the plan (configs and placement); equal plans have equal
 * hashes on every platform, so ranks can check they agree.
 * @param plan [in] The plan; must not be NULL.
 * @param out  [out] Receives the hash; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_hash(const shardrec_plan_t* plan, uint64_t* out);

/**
 * Size of the sharding group the plan was made for.
 * @param plan [in] Must not be NULL.  @param out [out] Receives world_size; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_world_size(const shardrec_plan_t* plan, int32_t* out);

/**
 * Ranks per node used by node-local sharding types (TWRW, TWCW, grid).
 * @param plan [in] Must not be NULL.  @param out [out] Receives the value; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_ranks_per_node(const shardrec_plan_t* plan,
                                                            int32_t* out);

/**
 * Number of tables (table indices are 0..n-1 in configuration order).
 * @param plan [in] Must not be NULL.  @param out [out] Receives the count; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_num_tables(const shardrec_plan_t* plan, size_t* out);

/**
 * Number of features (KJT keys, in configuration order).
 * @param plan [in] Must not be NULL.  @param out [out] Receives the count; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_num_features(const shardrec_plan_t* plan, size_t* out);

/**
 * Name of a feature.
 * @param plan     [in] Must not be NULL.
 * @param feature  Feature index, < shardrec_plan_num_features().
 * @param name_out [out] Receives a NUL-terminated string owned by the plan (valid until the plan
 *                 is destroyed); must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments or an index out of range. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_feature_name(const shardrec_plan_t* plan,
                                                          size_t feature, const char** name_out);

/**
 * Name of a table.
 * @param plan     [in] Must not be NULL.
 * @param table    Table index, < shardrec_plan_num_tables().
 * @param name_out [out] Receives a NUL-terminated string owned by the plan (valid until the plan
 *                 is destroyed); must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments or an index out of range. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_table_name(const shardrec_plan_t* plan, size_t table,
                                                        const char** name_out);

/**
 * Index of the table called @p name.
 * @param plan      [in] Must not be NULL.
 * @param name      [in] NUL-terminated table name; must not be NULL.
 * @param index_out [out] Receives the table index; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments; SHARDREC_ENOTFOUND when no table has
 *         that name. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_find_table(const shardrec_plan_t* plan,
                                                        const char* name, size_t* index_out);

/**
 * Number of rows of a table.
 * @param plan [in] Must not be NULL.  @param table Table index.
 * @param out  [out] Receives the row count; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments or an index out of range. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_table_rows(const shardrec_plan_t* plan, size_t table,
                                                        int64_t* out);

/**
 * Embedding dimension of a table.
 * @param plan [in] Must not be NULL.  @param table Table index.
 * @param out  [out] Receives the dim; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments or an index out of range. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_table_dim(const shardrec_plan_t* plan, size_t table,
                                                       int32_t* out);

/**
 * How a table is sharded.
 * @param plan           [in] Must not be NULL.
 * @param table          Table index.
 * @param type_out       [out] Receives a SHARDREC_SHARDING_* value; may be NULL.
 * @param num_shards_out [out] Receives the number of shards (data-parallel: world_size, one per
 *                       rank; row-wise layouts keep empty shards); may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL plan or an index out of range. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_table_sharding(const shardrec_plan_t* plan,
                                                            size_t table, int32_t* type_out,
                                                            size_t* num_shards_out);

/**
 * One shard of a table. Shards of column-split types come in column order (grid: for each
 * column block, the row blocks in order); row-split types in row order.
 * @param plan  [in] Must not be NULL.
 * @param table Table index.
 * @param shard Shard index, < the count from shardrec_plan_table_sharding().
 * @param out   [out] Receives the shard; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments or an index out of range. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_plan_shard(const shardrec_plan_t* plan, size_t table,
                                                   size_t shard, shardrec_shard_t* out);

/* ---------------------------------------------------------------------------------------- */

/** Options of shardrec_topology_calibrate(). */
typedef struct shardrec_calibrate_options {
  uint32_t version;           /**< SHARDREC_CALIBRATE_OPTIONS_VERSION. */
  int32_t ranks_share_memory; /**< Nonzero when the ranks are threads of one process (a group
                                   from shardrec_comm_create_local_group). Their collectives
                                   take the same route as those of processes (shared memory,
                                   else loopback TCP), and each also waits on the hand-off
                                   between the rank threads (a thread that finds its peers
                                   descheduled waits for them), so the hand-off latency is
                                   added to the collective latency. 0 (default): ranks are
                                   processes; no hand-off. */
  double time_budget;         /**< Soft limit in seconds; 0 means 0.25. Each figure is measured
                                   once, then up to twice more while its share of the budget
                                   lasts (median of the rounds). Must be >= 0. */
  int32_t threads_per_rank;   /**< The num_threads the collections will run with: the gather is
                                   measured on this many threads at once (their aggregate
                                   bandwidth). 0 means 1; at most 256. */
  int32_t ranks_per_machine;  /**< Ranks that run at once on this machine when that differs from
                                   the topology's ranks_per_node (e.g. a 2D mesh: several
                                   sharding groups on one machine); 0 means ranks_per_node (0
                                   there meaning world_size). At most 65536. */
} shardrec_calibrate_options_t;

#define SHARDREC_CALIBRATE_OPTIONS_VERSION 1u
#define SHARDREC_CALIBRATE_OPTIONS_INIT \
  { SHARDREC_CALIBRATE_OPTIONS_VERSION, 0, 0.0, 0, 0 }

/**
 * Fills @p options with defaults for struct version @p version.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t
shardrec_calibrate_options_init(shardrec_calibrate_options_t* options, uint32_t version);

/** What shardrec_topology_calibrate() measured on this machine. */
typedef struct shardrec_calibration {
  uint32_t version;          /**< SHARDREC_CALIBRATION_VERSION (set by the caller). */
  double gather_bandwidth;   /**< Bytes/s per rank of rows read by a pooled lookup (bags of 20
                                  random 256-byte rows of a 64 MiB table on huge pages, evicted
                                  from the caches before each round as a table far beyond the
                                  last-level cache would be), with ranks per machine x
                                  threads_per_rank threads gathering at once (at most one per
                                  CPU the process may use; each rank credited its share). */
  double stream_bandwidth;   /**< Bytes/s copied by a 32 MiB memcpy on one thread. */
  double loopback_bandwidth; /**< Bytes/s of 16 MiB over a 127.0.0.1 TCP connection: what
                                  Gloo between the ranks of one host moves where the
                                  shared-memory transport is unavailable. */
  double loopback_latency;   /**< Seconds: half a 1-byte round trip over that connection. */
  double handoff_latency;    /**< Seconds: one synchronisation point (mutex and condition
                                  variable) of max(ranks per machine, 2) threads that each do
                                  0.2 ms of work between two of them: the mean round beyond
                                  the work, waits for descheduled peers included. */
  double elapsed;            /**< Seconds the calibration took. */
  double oversubscription;   /**< Ranks per machine over the CPUs this process may use, at
                                  least 1: the factor applied to the default per_id_cost. */
  /* Version 2: the shared-memory transport of the ranks of one host (docs/transport.md). */
  double shm_bandwidth; /**< Bytes/s each rank sends in an all-to-all of 4 MiB per rank
                             between the two rank threads of a local group on the
                             shared-memory transport (the same segment, copies and
                             synchronisation as ranks that are processes); 0 when this
                             process cannot use the transport (SHARDREC_SHM=0, or /dev/shm
                             cannot hold the segment). */
  double shm_latency;   /**< Seconds of an all-reduce of one int64 in that group whose ranks
                             arrive apart, as a step's ranks do after their own work: from
                             the later rank's arrival to the return of the rank that waited
                             for it past the transport's spin, asleep (its wake included, as
                             a loopback round trip's blocking receive includes one); 0 when
                             the transport is unavailable. */
  int32_t shm_used;     /**< 1 when the topology's intra_node_bandwidth is shm_bandwidth
                             (and, on one host, its collective_latency is built on
                             shm_latency); 0 when they are the loopback figures: the
                             transport is unavailable or the topology runs more ranks per
                             node than it serves (16). */
} shardrec_calibration_t;

#define SHARDREC_CALIBRATION_VERSION 2u
#define SHARDREC_CALIBRATION_INIT \
  { SHARDREC_CALIBRATION_VERSION, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0 }

/**
 * Fills @p calibration with zeros for struct version @p version (1 or 2; version 1 has no
 * shared-memory figures).
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unsupported version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_calibration_init(shardrec_calibration_t* calibration,
                                                         uint32_t version);

/**
 * Measures this machine and writes the figures into @p topology, so that the planner's
 * estimated step time (shardrec_plan_stats) is in the units of the clock on this machine.
 *
 * Measures, in about 0.2-0.8 s (the soft limit is options->time_budget): the random-row gather
 * bandwidth of a pooled lookup, with every rank of the machine (options ranks_per_machine, else
 * the topology's ranks_per_node, 0 meaning world_size) gathering at once on threads_per_rank
 * threads, credited per rank; the streaming copy bandwidth; the shared-memory transport the
 * ranks of one host use (docs/transport.md: a local group of two rank threads, its all-to-all
 * bandwidth and small all-reduce latency); a loopback TCP connection's bandwidth and latency
 * (Gloo's route where shared memory is unavailable); and a barrier of the machine's ranks as
 * threads. Writes memory_bandwidth (the per-rank gather); intra_node_bandwidth: the
 * shared-memory bandwidth when this process can use the transport and ranks_per_node (0 meaning
 * world_size) is at most 16, else the loopback bandwidth (calibration->shm_used says which);
 * collective_latency: the shared-memory latency in that case when the whole group is on one host
 * (ranks_per_node == world_size), else the loopback latency (a group across hosts runs its
 * collectives on Gloo), plus with ranks_share_memory the barrier; and on host topologies whose
 * per_id_cost is 0 the 15 ns default times the oversubscription of the cores by the machine's
 * ranks (a nonzero per_id_cost is the caller's and stays). inter_node_bandwidth (a NIC needs a
 * peer) and every other field are left as they are. The figures vary with the machine's load; a
 * multi-rank job should calibrate on one rank and broadcast the topology, since ranks that plan
 * with different figures may choose different plans.
 *
 * @param topology    [in,out] Must not be NULL; version >= 2 (version 1 has no
 *                    collective_latency); world_size and ranks_per_node already set. Written
 *                    only on success.
 * @param options     [in] NULL for the defaults.
 * @param calibration [in,out] Receives the raw figures when not NULL; its version must be set
 *                    (shardrec_calibration_init).
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL topology, bad struct versions, an invalid
 *         world_size / ranks_per_node / per_id_cost, a negative budget or threads_per_rank out
 *         of range (nothing written); SHARDREC_EIO when a loopback socket fails or the
 *         shared-memory probe's local group cannot be created; SHARDREC_ENOMEM when the 64 MiB
 *         table cannot be allocated.
 * Thread-safety: safe to call concurrently on different topologies (each call uses its own
 * buffers, threads, sockets and segment), though concurrent calls disturb each other's figures.
 * Blocks the caller for the whole measurement.
 */
SHARDREC_API shardrec_status_t shardrec_topology_calibrate(
    shardrec_topology_t* topology, const shardrec_calibrate_options_t* options,
    shardrec_calibration_t* calibration);

/**
 * Measures the network between the hosts of @p comm and writes it into
 * @p topology->inter_node_bandwidth, which shardrec_topology_calibrate() leaves alone (a NIC
 * needs a peer). Collective over @p comm: every rank must call it, with the same @p time_budget.
 * Every rank sends the same number of bytes to each rank on another host (hosts told apart as
 * shardrec_comm_local_rank() does: kernel boot id and network namespace) in timed all-to-alls,
 * all ranks at once, growing the size from 64 KiB per peer until a round takes a quarter of the
 * budget or the size reaches 16 MiB; a round's time is its slowest rank's. The figure is the
 * lowest rank's bytes sent across hosts per second: each rank's share of its host's link under
 * the contention of an embedding all-to-all, in the units the planner takes ("bytes/s between
 * nodes, per rank"). Every rank gets the same value. When every rank is on one host nothing
 * crosses: *bandwidth_out is 0 and inter_node_bandwidth is left as it is.
 * It then times one collective round of the whole world at once (32 all-to-alls of 8 bytes per
 * peer after a warm-up, in 4 groups: the slowest rank's median group mean) and writes it into
 * @p topology->collective_latency (struct version >= 2, world of more than one rank, on one host
 * too): a step's rounds cost that when the ranks share cores or wait on the network, more than
 * shardrec_topology_calibrate() sees between two idle threads. Call it after
 * shardrec_topology_calibrate(), which overwrites collective_latency.
 * @param topology      [in,out] Must not be NULL; a supported version. Only
 *                      inter_node_bandwidth (on success across hosts) and collective_latency
 *                      (as above) are written, and only on success.
 * @param comm          [in] A host communicator; not NULL.
 * @param time_budget   Soft limit in seconds; 0 means 0.5. Must be >= 0 and at most 3600.
 * @param bandwidth_out [out] Receives the figure (bytes/s; 0 on one host); may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL topology or comm, a bad version or budget
 *         (every rank fails together: the arguments are agreed first); SHARDREC_EUNSUPPORTED
 *         for a device communicator; the errors of the collectives (SHARDREC_ETIMEOUT,
 *         SHARDREC_EREMOTE). Nothing is written on failure. Blocks for about the budget; not
 *         thread-safe on one communicator (as every collective).
 */
SHARDREC_API shardrec_status_t shardrec_topology_calibrate_network(shardrec_topology_t* topology,
                                                                   shardrec_comm_t* comm,
                                                                   double time_budget,
                                                                   double* bandwidth_out);

/**
 * Measures the local disk that tiered tables' stores will use (docs/disk-tier.md, "Planning")
 * and writes it into @p topology: disk_read_iops (random 4 KiB reads per second, from 8 threads
 * of synchronous reads, so about queue depth 8, divided among the machine's ranks:
 * ranks_per_node, 0 meaning world_size), disk_read_bandwidth (bytes/s of 1 MiB sequential
 * reads, divided the same way) and, when it is 0, disk_capacity (the space the file system gives
 * this user, divided the same way). It writes a scratch file of @p file_bytes (0 means 256 MiB;
 * rounded to whole MiB, at least 1 MiB) in @p dir, fsyncs it, reads it with O_DIRECT where the
 * file system allows it (else through the page cache, which then answers faster than the disk:
 * use a file larger than the machine's free memory there), and removes it.
 * @param topology    [in,out] Must not be NULL; struct version >= 3. Written only on success.
 * @param dir         [in] A directory on the disk to measure (where the tiers will live); must
 *                    not be NULL.
 * @param file_bytes  Size of the scratch file; 0 means 256 MiB.
 * @param time_budget Seconds for the reads; 0 means 1. Must be finite, >= 0 and at most 3600.
 * @param iops_out    [out] Receives the machine's random reads per second (all ranks); may be NULL.
 * @param direct_out  [out] Receives 1 when the reads bypassed the page cache, else 0; may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL topology or dir, a version below 3, a bad budget
 *         or ranks_per_node; SHARDREC_ENOTFOUND when @p dir is not a directory; SHARDREC_EIO when
 *         the file cannot be written or read (a full disk: the message names the file).
 * Thread-safety: any thread; concurrent calls on one disk disturb each other's figures. Blocks
 * for the write plus about the budget.
 */
SHARDREC_API shardrec_status_t shardrec_topology_calibrate_disk(
    shardrec_topology_t* topology, const char* dir, uint64_t file_bytes, double time_budget,
    double* iops_out, int32_t* direct_out);

/**
 * Fills @p topology's world_size and ranks_per_node from @p comm: the communicator's size and
 * its local size (shardrec_comm_local_size, the ranks on this rank's host). This is the default
 * way to describe a launched job to the planner, which runs without a communicator: every rank
 * calls it, then plans with the same topology and so computes the same plan.
 *
 * Collective over @p comm: every rank must call it. One all-reduce checks that every host runs
 * the same number of ranks, since the planner's ranks_per_node is one number; if they differ,
 * every rank returns SHARDREC_EINVAL naming the smallest and largest local size. A rank refusing
 * its own topology (NULL, an uninitialised or unknown version) still takes part in that
 * all-reduce, so every rank fails at once with SHARDREC_EINVAL (the others naming that rank) and
 * no topology changes; only a NULL @p comm fails its rank alone.
 *
 * @param topology [in,out] Must not be NULL and already initialised (shardrec_topology_init or
 *                 SHARDREC_TOPOLOGY_INIT; any version). Only world_size and ranks_per_node are
 *                 written, and only on success; every other field is left as it is.
 * @param comm     [in] Must not be NULL; a host communicator. Not retained.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL argument, an uninitialised or unknown topology
 *         version (on every rank, as above), or hosts with different local sizes (on every
 *         rank); SHARDREC_EUNSUPPORTED for a device communicator (one not created from a
 *         launcher's environment has no local size; set ranks_per_node by hand);
 *         SHARDREC_ETIMEOUT, SHARDREC_EREMOTE or SHARDREC_EABORTED when the all-reduce fails
 *         (the communicator is then unusable, as after any failed collective). On any error
 *         *topology is unchanged.
 * Thread-safety: the communicator's rule (one thread at a time per communicator); the topology
 * must not be read or written concurrently. Blocks until every rank has joined the all-reduce
 * or the communicator's timeout passes.
 */
SHARDREC_API shardrec_status_t shardrec_topology_from_comm(shardrec_topology_t* topology,
                                                           shardrec_comm_t* comm);

/**
 * Releases a plan. NULL is a no-op. Collections created from the plan keep their own reference
 * and stay valid. Must not race with other calls on the same handle.
 */
SHARDREC_API void shardrec_plan_destroy(shardrec_plan_t* plan);

SHARDREC_END_DECL

#endif /* SHARDREC_PLAN_H_ */
