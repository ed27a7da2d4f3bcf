/**
 * @file shardrec/replica.h
 * @brief 2D parallelism: a world of W ranks cut into R replica groups x S-way sharding groups,
 *        the plan made once for S ranks and reused by every sharding group, and `sync`, which
 *        averages every local shard's weights and optimizer state across its replica group.
 *
 * Layouts (W = 8, S = 4, R = 2, two nodes of four ranks):
 *
 *     default (SHARDREC_MESH_LAYOUT_DEFAULT)      inter-host (SHARDREC_MESH_LAYOUT_INTER_HOST)
 *     sharding groups [0,2,4,6] [1,3,5,7]          sharding groups [0,1,2,3] [4,5,6,7]
 *     replica groups  [0,1] [2,3] [4,5] [6,7]      replica groups  [0,4] [1,5] [2,6] [3,7]
 *
 * The default keeps every replica group on consecutive ranks (inside a node), so the weight
 * all-reduce of sync uses intra-node bandwidth while the all-to-alls of the sharded forward and
 * backward cross nodes; the inter-host layout does the opposite. Plan rank p of sharding group g
 * is global rank p*R + g (default) or g*S + p (inter-host), so all members of a replica group
 * hold exactly the same shards and sync is element-wise.
 *
 * Exactness: with SGD without weight decay and a sync after every step, 2D training equals one
 * model trained on the global batch (each sharding group scales embedding gradients by 1/S, the
 * replica average adds 1/R). Weight decay (L2 or decoupled) breaks the equality: a row decays
 * only on the replicas whose batch contains it, so after the average it has decayed by the
 * fraction of replicas that saw it, where the global model decays it fully once (the two agree
 * only for rows present in every replica's batch or in none). With stateful optimizers (Adagrad,
 * Adam, ...) or a sync interval N > 1, 2D training is model averaging of R replicas that each train
 * on their own part of the batch: close to, but not the same as, global training. Data-parallel
 * tables and the dense side must reduce over the GLOBAL group (the mesh does this by default for
 * collections it creates); reducing them over the sharding group only would let the replicas drift
 * apart.
 *
 * GPU collections (SHARDREC_DEVICE_CUDA) train on a mesh of host (Gloo) communicators as on a
 * 1D one: a sync copies their weight and optimizer-state arenas into one pinned host staging
 * area the mesh keeps and reuses from sync to sync, averages them there over the replica group
 * exactly as a host collection's (the same collectives, the same bits), and copies the averages
 * back, each copy waited for with the collection's device wait bound. The replicas of a shard
 * must all be of one kind (the same device_type on every rank of a replica group; else
 * shardrec_mesh_embedding_create fails with SHARDREC_EUNSUPPORTED on every rank). On a mesh over
 * a CUDA (NCCL) world (on the collections' device) a sync instead all-reduces a GPU collection's
 * fp32 weight and state arenas in place on the device, on its legacy default stream, with one
 * bounded wait and no host copy; its 16-bit arenas are averaged in fp32 through the host as
 * above, and the step counter (host memory) travels staged. A custom sync hook
 * (shardrec_mesh_set_sync_hook) is refused there (SHARDREC_EUNSUPPORTED at the sync); a host
 * collection cannot be created on such a mesh (SHARDREC_EUNSUPPORTED).
 */
#ifndef SHARDREC_REPLICA_H_
#define SHARDREC_REPLICA_H_

#include "shardrec/common.h"
#include "shardrec/embedding.h"
#include "shardrec/plan.h"

SHARDREC_BEGIN_DECL

/** Mesh layouts (shardrec_mesh_options_t.layout). */
#define SHARDREC_MESH_LAYOUT_DEFAULT 0    /**< Replica groups on consecutive ranks. */
#define SHARDREC_MESH_LAYOUT_INTER_HOST 1 /**< Sharding groups on consecutive ranks. */

/** What a sync averages (shardrec_mesh_sync mode, shardrec_mesh_options_t.sync_mode). */
#define SHARDREC_SYNC_DEFAULT 0           /**< The mesh's configured mode (weights + state). */
#define SHARDREC_SYNC_WEIGHTS_AND_STATE 1 /**< Weights, every optimizer state and the step. */
#define SHARDREC_SYNC_WEIGHTS_ONLY 2      /**< Weights only; optimizer state stays per replica. */

#define SHARDREC_MESH_OPTIONS_VERSION 1u

/** Options of shardrec_mesh_create. Zero fields take the documented default. */
typedef struct shardrec_mesh_options {
  uint32_t version;            /**< SHARDREC_MESH_OPTIONS_VERSION. */
  int32_t sharding_group_size; /**< S; must divide the world size. 0 means the world size (1D). */
  int32_t layout;              /**< SHARDREC_MESH_LAYOUT_*; 0 is the default layout. */
  int32_t ranks_per_node;      /**< Only for shardrec_mesh_describe; 0 means unknown. */
  int32_t sync_interval;       /**< shardrec_mesh_step syncs every N steps; 0 means 1. */
  int32_t sync_mode;           /**< SHARDREC_SYNC_*; 0 means weights and state. */
} shardrec_mesh_options_t;

#define SHARDREC_MESH_OPTIONS_INIT \
  { SHARDREC_MESH_OPTIONS_VERSION, 0, 0, 0, 0, 0 }

/**
 * Fills @p options with defaults.
 * @param options [out] Not NULL.
 * @param version SHARDREC_MESH_OPTIONS_VERSION.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unknown version.
 */
SHARDREC_API shardrec_status_t shardrec_mesh_options_init(shardrec_mesh_options_t* options,
                                                          uint32_t version);

/**
 * Builds this rank's view of the 2D mesh by splitting @p world twice (sharding group, replica
 * group). Collective over @p world: every rank calls it with the same options (over a host world
 * S, the layout, sync_interval and sync_mode are compared: ranks that differ all get
 * SHARDREC_EINVAL, "the same mesh options"; ranks_per_node, used only for describing the mesh,
 * may differ).
 * @param out     [out] The new mesh; the caller owns it (shardrec_mesh_destroy). Not NULL.
 * @param world   The global communicator, borrowed; the mesh keeps it alive. Not NULL.
 * @param options May be NULL for a 1D mesh (S = W).
 * @return SHARDREC_OK; SHARDREC_EINVAL (S does not divide W, unknown layout or mode, negative
 *         interval); SHARDREC_ETIMEOUT / SHARDREC_EREMOTE from the splits. A rank refusing
 *         its own arguments (a NULL @p out, bad options) still meets its peers' agreement over a
 *         host world: every rank fails at once, the peers with SHARDREC_EINVAL naming the
 *         lowest refusing rank. A NULL @p world fails on its rank alone.
 * Thread-safety: a mesh is used by one thread at a time.
 */
SHARDREC_API shardrec_status_t shardrec_mesh_create(shardrec_mesh_t** out, shardrec_comm_t* world,
                                                    const shardrec_mesh_options_t* options);

/** Destroys a mesh; NULL is a no-op. Communicators handed out stay valid. */
SHARDREC_API void shardrec_mesh_destroy(shardrec_mesh_t* mesh);

/**
 * This rank's coordinates in the mesh. Any output pointer may be NULL.
 * @param sharding_group [out] Index of the sharding group (0..R-1).
 * @param shard_rank     [out] Position in it, the plan rank (0..S-1).
 * @param replica_group  [out] Index of the replica group (0..S-1; equals the shard rank).
 * @param replica_rank   [out] Position in the replica group (0..R-1).
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL mesh.
 */
SHARDREC_API shardrec_status_t shardrec_mesh_coords(const shardrec_mesh_t* mesh,
                                                    int32_t* sharding_group, int32_t* shard_rank,
                                                    int32_t* replica_group, int32_t* replica_rank);

/**
 * A new handle on this rank's sharding-group communicator (ranks 0..S-1 are plan ranks), e.g.
 * for a collection created with shardrec_embedding_create directly.
 * @param out [out] Owned by the caller (shardrec_comm_destroy); shares the communicator.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments.
 */
SHARDREC_API shardrec_status_t shardrec_mesh_sharding_comm(shardrec_comm_t** out,
                                                           const shardrec_mesh_t* mesh);

/**
 * A new handle on this rank's replica-group communicator (R ranks: the replicas of this rank's
 * shard), as shardrec_mesh_sharding_comm for the sharding group.
 * @param out [out] Owned by the caller (shardrec_comm_destroy); shares the communicator.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments.
 */
SHARDREC_API shardrec_status_t shardrec_mesh_replica_comm(shardrec_comm_t** out,
                                                          const shardrec_mesh_t* mesh);

/**
 * Describes the mesh: which ranks form which sharding and replica groups and, when
 * ranks_per_node was given, which node each rank is on and whether replica groups stay inside
 * nodes. Local (no communication).
 * @param text_out [out] NUL-terminated text; release with shardrec_free.
 * @param len_out  [out] Its length without the terminator; may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL arguments.
 */
SHARDREC_API shardrec_status_t shardrec_mesh_describe(const shardrec_mesh_t* mesh, char** text_out,
                                                      size_t* len_out);

/**
 * Creates this rank's part of a collection sharded over its sharding group and replicated over
 * its replica group. Collective over the whole world. The plan must be made for S ranks (the
 * sharding group size), identical on every rank. Unless options->dp_comm is set, data-parallel
 * tables average their gradients over the GLOBAL group (so every replica stays identical), and
 * a step refused in one sharding group fails every group where they would otherwise wait for it:
 * a backward rejected on any rank (a NaN gradient) when the plan has data-parallel tables, and a
 * forward refused on any rank when it has data-parallel dynamic tables (docs/dynamic-tables.md,
 * "Data-parallel tables"). Not yet a forward refused in one group of a plan whose data-parallel
 * tables are all fixed: it fails that group only, the others' forwards succeed, and a loop that
 * skips the backward after a failed forward pairs their backward with the refusing group's next
 * one (the groups then train a step apart until a collective times out).
 * Afterwards a checksum of the initial weights is compared across each replica group: replicas
 * that do not start identical (different seeds, different plans) fail loudly on every rank.
 * @param out [out] Owned by the caller (shardrec_embedding_destroy).
 * @param mesh Borrowed. @param plan Borrowed. @param optimizer Not NULL.
 * @param options May be NULL (defaults).
 * @return SHARDREC_OK; SHARDREC_EINVAL (plan world size != S, bad configs, replicas differ, or a
 *         refusal on another rank: a rank's refusal, a NULL @p plan included, fails every rank
 *         of the mesh together over host communicators);
 *         what shardrec_embedding_create returns for the options (a GPU collection: its
 *         errors, SHARDREC_EINVAL on a mesh whose world is an NCCL communicator of another
 *         device; SHARDREC_ECUDA when its initial weights cannot be read back for the check;
 *         a host collection: SHARDREC_EUNSUPPORTED on a mesh over NCCL);
 *         SHARDREC_EUNSUPPORTED when a replica group mixes host and GPU collections;
 *         SHARDREC_ETIMEOUT / SHARDREC_EREMOTE from the collectives.
 */
SHARDREC_API shardrec_status_t shardrec_mesh_embedding_create(
    shardrec_embedding_t** out, shardrec_mesh_t* mesh, const shardrec_plan_t* plan,
    const shardrec_optimizer_config_t* optimizer, const shardrec_embedding_options_t* options);

/**
 * Averages the collection's local shard weights (and, unless weights-only, every optimizer
 * state; the step counter takes the maximum) across this rank's replica group, coalesced into
 * one collective per dtype rather than one per table. Collective over the replica group (every
 * rank of the world calls it at the same point). No-op when R = 1.
 *
 * Dynamic tables (docs/dynamic-tables.md, "2D merge") merge by key instead: the replicas
 * all-gather their live rows (ids, weights, optimizer states, metadata; after the first merge
 * only those of the ids some replica changed since the last one, the others being alike on every
 * replica, with the same result bit for bit), take the union of the
 * ids, average each id's weights and states over the replicas that hold it (last seen and count:
 * the maximum), drop the ids the table's eviction order (ties by id) picks when the union exceeds
 * a shard's capacity, and rebuild every shard in ascending id order, so afterwards every replica
 * holds the same keys in the same slots with the same values. A replica group whose dynamic
 * shards differ (another plan) fails with SHARDREC_EINVAL on every replica, and a failed gather
 * with its error, before anything changes. A sync hook does not take part in the merge.
 * Over a host replica group the replicas compare the mode they asked for (the mesh's default
 * resolved) in the sync's argument agreement: different modes fail every replica with
 * SHARDREC_EINVAL ("different sync modes"), nothing changed.
 *
 * Overlap with the next batch: the sync may be called while the collection's next input
 * distribution is in flight (shardrec_embedding_input_dist_start called, input_dist_wait not
 * yet), so the next batch's id exchange runs during the sync:
 *   backward(b); input_dist_start(b + 1); mesh_sync (or mesh_step); input_dist_wait;
 *   forward_distributed(b + 1)
 * gives the same outputs and weights, bit for bit, as syncing before input_dist_start. The id
 * exchange runs on the collection's own communicator (split from the sharding group) and reads
 * only the routed ids; the sync runs on the replica group and touches only weights and states;
 * the lookup that reads the synced weights is forward_distributed, after the sync returns.
 * Every rank must issue the two in the same order (all start the input distribution before the
 * sync, or all after it), as for any pair of collectives on communicators that share ranks.
 * A sync hook (shardrec_mesh_set_sync_hook) runs while the id exchange is in flight too.
 *
 * A GPU collection's sync stages its arenas through the host (see the file comment): all the
 * above holds for it too; the id exchange it overlaps runs on the host.
 *
 * A replica refusing its own arguments (an unknown mode, a collection whose plan is not made
 * for the mesh's sharding group size) still takes part in one small agreement over the replica
 * group first, so every replica fails at once with SHARDREC_EINVAL (the others naming that
 * rank) and nothing changes anywhere; only a NULL mesh or collection fails its rank alone. On a
 * mesh over NCCL the agreement would be staged through the device on every sync, so there a
 * refusing replica fails alone and the others wait in the sync until their timeout.
 *
 * @param mode SHARDREC_SYNC_* (0 = the mesh's configured mode).
 * @return SHARDREC_OK; SHARDREC_EINVAL (NULL, unknown mode); SHARDREC_ETIMEOUT /
 *         SHARDREC_EREMOTE; SHARDREC_EINVAL on every replica when the replicas' dynamic shards
 *         differ. SHARDREC_EUSAGE when the mesh or collection is in use by another
 *         call (another thread). For a GPU collection: SHARDREC_ECUDA (or SHARDREC_ETIMEOUT) on
 *         the replica whose copy to the host failed and SHARDREC_EREMOTE on the others, before
 *         anything changes; a copy back that fails is SHARDREC_ECUDA on that replica, whose
 *         parameters are then partly averaged (restore them from a checkpoint).
 */
SHARDREC_API shardrec_status_t shardrec_mesh_sync(shardrec_mesh_t* mesh, shardrec_embedding_t* coll,
                                                  int32_t mode);

/**
 * Counts one training step and syncs when the count reaches a multiple of the mesh's
 * sync_interval. Call it after every backward; it may follow the next batch's
 * input_dist_start (see shardrec_mesh_sync) so the sync overlaps that batch's id exchange.
 * @param synced_out [out] 1 if this call synced, else 0; may be NULL.
 * @return As shardrec_mesh_sync.
 */
SHARDREC_API shardrec_status_t shardrec_mesh_step(shardrec_mesh_t* mesh, shardrec_embedding_t* coll,
                                                  int32_t* synced_out);

/**
 * A user collective replacing the sync all-reduce (TorchRec's custom all-reduce hook). It is
 * called once per coalesced float buffer and must leave in @p data the element-wise AVERAGE
 * over the replica group; it returns 0 on success or a negative status. Integer counters keep
 * the built-in collective.
 */
typedef int32_t (*shardrec_sync_hook_fn)(void* data, size_t count, int32_t dtype, void* payload);

/**
 * Installs (or, with @p hook NULL, removes) a sync hook.
 * @param payload Passed to every call; borrowed, must outlive the mesh or the next install.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL mesh.
 */
SHARDREC_API shardrec_status_t shardrec_mesh_set_sync_hook(shardrec_mesh_t* mesh,
                                                           shardrec_sync_hook_fn hook,
                                                           void* payload);

/**
 * Figures of the last sync on this rank.
 * @param bytes_out       [out] Bytes this rank contributed: the elements of the arena averages
 *                        plus, with dynamic tables, the rows and metadata it sent to their merge
 *                        (after the first merge, only those of the ids changed since the last);
 *                        may be NULL.
 * @param collectives_out [out] Collectives issued (the merge's included); may be NULL.
 * @param syncs_out       [out] Syncs done since the mesh was created; may be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL mesh.
 */
SHARDREC_API shardrec_status_t shardrec_mesh_sync_stats(const shardrec_mesh_t* mesh,
                                                        uint64_t* bytes_out,
                                                        int32_t* collectives_out,
                                                        int64_t* syncs_out);

SHARDREC_END_DECL

#endif /* SHARDREC_REPLICA_H_ */
