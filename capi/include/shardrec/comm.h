/**
 * @file shardrec/comm.h
 * @brief Communicators: how ranks meet (unique id, host store callbacks, or threads of one
 *        process), sub-groups, failure handling, and the small collective set dense-side code
 *        needs (all-reduce, broadcast, all-gather, barrier).
 *
 * Backends: Gloo over TCP for host memory (the CPU engine), NCCL for CUDA devices (loaded from
 * the CUDA plugin on first use). SHARDREC_BACKEND_AUTO picks Gloo for host devices and NCCL for
 * CUDA devices; SHARDREC_BACKEND_GLOO with a CUDA device stages GPU buffers through host memory.
 * MPI (host memory, through the optional plugin libshardrec_mpi.so) is chosen by creating the
 * communicator with shardrec_comm_create_mpi(), under mpirun or from a host's own MPI communicator.
 * Under a cluster launcher (torchrun, mpirun, srun), shardrec_comm_create_from_env() creates a
 * Gloo or NCCL communicator from the launcher's variables with no unique id to ship, and
 * shardrec_comm_local_rank() / shardrec_comm_local_size() say where this rank sits on its host.
 *
 * Failures: an operation that does not complete within its timeout returns SHARDREC_ETIMEOUT; a
 * dead or failing peer SHARDREC_EREMOTE. Either poisons the communicator: every later call
 * returns SHARDREC_EUSAGE naming the original error, and only shardrec_comm_abort() and
 * shardrec_comm_destroy() remain meaningful. A communicator and every communicator split from
 * it (directly or not, including the private ones an embedding collection or a mesh splits for
 * itself) form one failure domain on this rank: the first timeout or remote failure on any of
 * them poisons all of them, so the next call on any of them returns SHARDREC_EUSAGE at once
 * instead of waiting out another timeout against the same missing peer (CPU engine; the NCCL
 * backend poisons per communicator). shardrec_comm_abort() aborts a communicator and every
 * communicator split from it, directly or not (CPU engine), but not the one it was split from:
 * calls blocked in any of them return SHARDREC_EABORTED within about a second, as later calls do.
 * Nothing hangs forever and nothing raises a signal:
 * on the first communicator creation, SIGPIPE is set to SIG_IGN process-wide if (and only if)
 * the host left it at its default disposition, because a peer's death would otherwise
 * terminate the process. A host that installed its own SIGPIPE handler keeps it.
 *
 * Thread-safety: one thread at a time per communicator; different communicators (including
 * those produced by shardrec_comm_split) may be used concurrently from different threads. An
 * operation started while another thread is inside one on the same host communicator (directly
 * or through a collection built on it) returns SHARDREC_EUSAGE without sending anything (its
 * peers then wait for it until their timeout). shardrec_comm_abort() may be called from any
 * thread at any time.
 */
#ifndef SHARDREC_COMM_H_
#define SHARDREC_COMM_H_

#include "shardrec/common.h"

SHARDREC_BEGIN_DECL

/** Size in bytes of a unique id. */
#define SHARDREC_UNIQUE_ID_BYTES 128

/** The most communicators shardrec_comm_create_local_group makes in one call. */
#define SHARDREC_LOCAL_GROUP_MAX 1024

/**
 * Rendezvous token created by rank 0 and shipped to every rank by the host program (Spark
 * broadcast, environment variable, file). Plain bytes: copy it freely. It encodes the address and
 * port of a small TCP store hosted by the process that created it, plus a random session nonce.
 *
 * Trust model: the id is a bearer secret. Whoever holds it can join the session as any rank
 * that is still free, read and write the rendezvous keys, and so take part in (or disrupt) the
 * training; ship it only over channels you trust. What it protects against: a process that
 * does not hold the id cannot use the store: a connection must present the 128-bit nonce in its
 * first frame (at most 256 bytes, within 3 s, compared in constant time) or it is closed, and
 * such connections are bounded (32 at once; 1024 authenticated), so a stranger on the port
 * costs the store a few KB for a few seconds, never a buffer of its choosing, and does not
 * delay rank 0's destroy. A rank number claimed a second time while its first holder is
 * connected refuses the whole rendezvous with SHARDREC_EUSAGE on every rank still meeting, the
 * duplicate included: every rank whose creation has not returned (a member that had already
 * returned its communicator fails at its first collective instead, SHARDREC_EREMOTE). What it
 * does not protect: nothing is encrypted or integrity-protected
 * (neither the store nor the Gloo data connections), and the nonce travels in clear on the
 * network, so anyone who can observe or tamper with the traffic can read the id and the data.
 * Run ranks on a private network (or a VPN/overlay) you trust. The store listens only on the
 * address the id advertises; set SHARDREC_STORE_BIND_ANY=1 before creating the id to listen on
 * every interface (for a NAT or container setup where the advertised address is not local).
 */
typedef struct shardrec_unique_id {
  char internal[SHARDREC_UNIQUE_ID_BYTES]; /**< Opaque; do not interpret. */
} shardrec_unique_id_t;

/** Backends (shardrec_comm_options_t.backend). */
#define SHARDREC_BACKEND_AUTO 0 /**< Gloo for host devices, NCCL for CUDA devices. */
#define SHARDREC_BACKEND_GLOO 1 /**< CPU engine; CUDA buffers are staged through host memory. */
#define SHARDREC_BACKEND_NCCL 2 /**< NCCL; needs a CUDA device and the CUDA plugin. */

/** Reduction operators. AVG is the sum divided by the number of ranks (integer division for
 *  integer types). */
#define SHARDREC_REDUCE_SUM 0
#define SHARDREC_REDUCE_AVG 1
#define SHARDREC_REDUCE_MAX 2
#define SHARDREC_REDUCE_MIN 3

/** Current version of shardrec_comm_options_t (2 added store_grace_ms). */
#define SHARDREC_COMM_OPTIONS_VERSION 2

/**
 * Communicator options. Fill with SHARDREC_COMM_OPTIONS_INIT or shardrec_comm_options_init(),
 * then set fields. Zero means "default" for every field.
 */
typedef struct shardrec_comm_options {
  uint32_t version;     /**< SHARDREC_COMM_OPTIONS_VERSION. */
  int64_t timeout_ms;   /**< Default per-operation timeout; 0 = 300000 (5 minutes). Values
                             above 10^12 (about 31.7 years; INT64_MAX as "for ever") wait
                             10^12 ms. */
  int32_t backend;      /**< SHARDREC_BACKEND_*; 0 = AUTO. */
  int32_t device_type;  /**< shardrec_device_type_t of the buffers; 0 = host. */
  int32_t device_index; /**< CUDA device index when device_type is CUDA. */
  /** Numeric IPv4/IPv6 address the CPU engine's sockets bind to; NULL or "" = the environment
   *  variable SHARDREC_SOCKET_IFADDR, else the local address that routes to rank 0's store
   *  (unique id), else 127.0.0.1. Copied during the call. */
  const char* bind_address;
  /** Version 2. How long destroying rank 0's communicator (unique id or environment
   *  rendezvous) waits for the other ranks to disconnect from the store it hosts, in ms; 0 =
   *  2000 or the timeout if shorter. A rank that died without destroying its communicator
   *  costs rank 0 this long, not a timeout. After shardrec_comm_abort() it does not wait, and a
   *  creation that fails waits only in what is left of its timeout (none when it timed out). */
  int64_t store_grace_ms;
} shardrec_comm_options_t;

/** Static initialiser for C: all defaults. */
#define SHARDREC_COMM_OPTIONS_INIT \
  { SHARDREC_COMM_OPTIONS_VERSION, 0, SHARDREC_BACKEND_AUTO, 0, 0, NULL, 0 }

/**
 * Fills @p options with defaults for the given struct version (for bindings without macros).
 * @param options [out] Options to fill; must not be NULL.
 * @param version SHARDREC_COMM_OPTIONS_VERSION (or an older version).
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unknown version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_comm_options_init(shardrec_comm_options_t* options,
                                                          uint32_t version);

/**
 * Creates a unique id on rank 0 and starts the TCP store it names. When rank 0 calls
 * shardrec_comm_create() in this process, the store lives until that rank-0 communicator (and
 * every communicator split from it) is destroyed. A rank 0 in another process (a child forked
 * after this call) connects to the store as one more client: the store then stays in this
 * process until it exits, so this process must outlive the ranks' use of the store (their
 * creation, and the destroy of rank 0).
 * The advertised address is SHARDREC_SOCKET_IFADDR when set, else the source address of the
 * default route, else 127.0.0.1; the store listens on that address only, or on every interface
 * when the environment variable SHARDREC_STORE_BIND_ANY is "1" (see the trust model above).
 * @param out [out] Receives the id; must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_EIO when no socket can be opened or the
 *         advertised address is not an address of this host. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_comm_unique_id_create(shardrec_unique_id_t* out);

/**
 * Collective: every rank of the world calls this with the same id and world size and a
 * distinct rank. Blocks until all ranks have joined or the timeout expires: connecting to the
 * store, claiming the rank and meeting the others share the one timeout. A rank number that
 * another live process already claimed with this id is refused, and so is every rank still
 * meeting on the id (SHARDREC_EUSAGE naming the rank, at once rather than at the timeout).
 * Destroying rank 0's communicator waits up to shardrec_comm_options_t.store_grace_ms (default
 * 2 s) for the other ranks to disconnect from the store (shardrec_comm_destroy), so destroy rank 0
 * last when one thread owns several ranks.
 * @param out        [out] Receives the new handle (caller owns; shardrec_comm_destroy()).
 * @param id         [in] Id from shardrec_comm_unique_id_create(); not NULL.
 * @param world_size Number of ranks, >= 1.
 * @param rank       This rank, in [0, world_size).
 * @param options    [in] Options, or NULL for defaults.
 * @return SHARDREC_OK; SHARDREC_EINVAL (argument named in the message); SHARDREC_ECORRUPT for a
 *         malformed id; SHARDREC_ETIMEOUT when ranks are missing; SHARDREC_EUSAGE when a rank
 *         was claimed twice; SHARDREC_EREMOTE when the store is gone or rejects the id;
 *         SHARDREC_ENODEVICE for an unusable GPU; SHARDREC_EUNSUPPORTED for NCCL in a CPU-only
 *         build; SHARDREC_EIO for socket errors.
 *         On failure *out is NULL. Thread-safe (different ranks may be created concurrently).
 */
SHARDREC_API shardrec_status_t shardrec_comm_create(shardrec_comm_t** out,
                                                    const shardrec_unique_id_t* id,
                                                    int32_t world_size, int32_t rank,
                                                    const shardrec_comm_options_t* options);

/** Current version of shardrec_store_callbacks_t. */
#define SHARDREC_STORE_CALLBACKS_VERSION 1

/**
 * A host-provided rendezvous store (for hosts that already have a key-value service). Each
 * function returns SHARDREC_OK, SHARDREC_ETIMEOUT when a key did not appear in time, or another
 * negative code on failure. Functions may be called from any thread that creates or splits a
 * communicator, concurrently; they must not call back into libshardrec.
 * Keys are NUL-terminated strings; values are arbitrary bytes.
 */
typedef struct shardrec_store_callbacks {
  uint32_t version; /**< SHARDREC_STORE_CALLBACKS_VERSION. */
  /** Stores @p value_len bytes under @p key (overwriting). Required. */
  int32_t (*set)(void* payload, const char* key, const void* value, size_t value_len);
  /** Waits up to @p timeout_ms for @p key, then stores its size in *value_len and copies it into
   *  @p buf when @p buf_len is large enough; when it is not, return SHARDREC_OK with only
   *  *value_len set and the library calls again with a larger buffer. Required. */
  int32_t (*get)(void* payload, const char* key, int64_t timeout_ms, void* buf, size_t buf_len,
                 size_t* value_len);
  /** Waits up to @p timeout_ms until all @p num_keys keys exist. Optional (NULL: emulated
   *  with get). */
  int32_t (*wait)(void* payload, const char* const* keys, size_t num_keys, int64_t timeout_ms);
  /** Passed unchanged to every function; must stay valid until every communicator created with
   *  these callbacks (including splits) is destroyed. */
  void* payload;
} shardrec_store_callbacks_t;

/** Static initialiser for C: no functions, NULL payload. */
#define SHARDREC_STORE_CALLBACKS_INIT \
  { SHARDREC_STORE_CALLBACKS_VERSION, NULL, NULL, NULL, NULL }

/**
 * Fills @p callbacks with NULL functions for the given struct version (for bindings).
 * @param callbacks [out] Struct to fill; not NULL.
 * @param version   SHARDREC_STORE_CALLBACKS_VERSION.
 * @return SHARDREC_OK; SHARDREC_EINVAL for NULL or an unknown version. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_store_callbacks_init(shardrec_store_callbacks_t* callbacks,
                                                             uint32_t version);

/**
 * Collective like shardrec_comm_create(), meeting through host callbacks instead of a unique
 * id. Keys are written under "shardrec/"; use a fresh store namespace for each communicator
 * created this way (splits are namespaced automatically).
 * @param out        [out] Receives the new handle; NULL on failure.
 * @param callbacks  [in] Store functions (copied); set and get must not be NULL.
 * @param world_size Number of ranks, >= 1.
 * @param rank       This rank, in [0, world_size).
 * @param options    [in] Options, or NULL for defaults.
 * @return As shardrec_comm_create(), plus SHARDREC_EREMOTE when a callback fails.
 */
SHARDREC_API shardrec_status_t shardrec_comm_create_with_store(
    shardrec_comm_t** out, const shardrec_store_callbacks_t* callbacks, int32_t world_size,
    int32_t rank, const shardrec_comm_options_t* options);

/**
 * Creates @p n communicators forming one group inside this process (one per thread that will
 * drive a rank). Used by tests and single-machine multi-threaded hosts. Host buffers use Gloo
 * over loopback. A group of more ranks than the CPUs this process may run on (its affinity
 * mask) runs all its connections on one Gloo event-loop thread instead of one per rank: with a
 * loop per rank on oversubscribed cores the loops spin while the ranks they wait for are
 * descheduled (4 rank threads on 2 cores: a small training step 16 ms, 2.9 ms with one loop).
 * With CUDA buffers and the NCCL backend (the default for CUDA), rank r runs on
 * device_index + r: NCCL allows one rank of a communicator per GPU, so the group needs n
 * devices (SHARDREC_ENODEVICE names the missing one). To put several ranks on one GPU choose
 * SHARDREC_BACKEND_GLOO: every rank then uses device_index, staged through pinned host memory.
 * @param comms_out [out] Caller array of @p n handles; filled with handle i = rank i (caller
 *                  owns each). All or nothing: on failure the array is left unchanged.
 * @param n         Group size, in [1, SHARDREC_LOCAL_GROUP_MAX]. Over Gloo every two ranks hold a
 *                  TCP connection, up to 2 n (n - 1) sockets in this process: a group past the
 *                  process's open-file limit (ulimit -n) is refused with SHARDREC_EINVAL naming
 *                  it, and creation slows as the sockets' ports fill (about 4 s for 96 ranks on
 *                  2 cores), so groups of more than a few dozen ranks are for tests.
 * @param options   [in] Options, or NULL for defaults.
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_ETIMEOUT; SHARDREC_ENODEVICE. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_comm_create_local_group(
    shardrec_comm_t** comms_out, int32_t n, const shardrec_comm_options_t* options);

/**
 * Collective over all members of @p comm: members passing the same @p color form a new
 * communicator, ranked by (@p key, old rank). It inherits the device and the timeout.
 * @param out   [out] Receives the new handle, or NULL for a negative @p color (no group). A NULL
 *              @p out refuses the split, but the rank still takes part in its first exchange
 *              (Gloo, MPI): every member returns SHARDREC_EINVAL at once (the others naming
 *              this rank), nothing is created and @p comm stays usable (over NCCL the rank fails
 *              alone).
 * @param comm  [in] Parent communicator; not NULL. Stays valid and independent.
 * @param color Group selector; negative = not a member of any new group.
 * @param key   Ordering key inside the group.
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_EUSAGE when @p comm is poisoned or in use by
 *         another thread; SHARDREC_ETIMEOUT; SHARDREC_EREMOTE. Not thread-safe on @p comm.
 */
SHARDREC_API shardrec_status_t shardrec_comm_split(shardrec_comm_t** out, shardrec_comm_t* comm,
                                                   int32_t color, int32_t key);

/**
 * This rank's index in @p comm.
 * @param out  [out] Receives the rank; not NULL.
 * @param comm [in] Communicator; not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_comm_rank(int32_t* out, const shardrec_comm_t* comm);

/**
 * Number of ranks in @p comm.
 * @param out  [out] Receives the size; not NULL.
 * @param comm [in] Communicator; not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_comm_size(int32_t* out, const shardrec_comm_t* comm);

/**
 * Sets the default per-operation timeout of @p comm (not of existing splits; new splits inherit
 * it). Embedding collections, meshes, DDP and FSDP split private communicators off @p comm when
 * created, so set it before creating them: their calls then use it throughout.
 * @param comm       [in] Communicator; not NULL.
 * @param timeout_ms New timeout, > 0; values above 10^12 wait 10^12 ms (about 31.7 years).
 * @return SHARDREC_OK; SHARDREC_EINVAL. Not thread-safe on @p comm.
 */
SHARDREC_API shardrec_status_t shardrec_comm_set_timeout(shardrec_comm_t* comm, int64_t timeout_ms);

/**
 * Tears down @p comm's connections without waiting for peers, and those of every communicator
 * split from it, directly or not (including the private ones of the embedding collections and
 * meshes built on them); the communicator it was itself split from is untouched. A call
 * blocked in any of them, a collective or an embedding call in its exchange, returns
 * SHARDREC_EABORTED within about a second (CPU engine; with NCCL, no later than its timeout),
 * and so do later calls. The long local phases look for an abort as they go: a checkpoint save
 * between the 1 MiB chunks of its file, a checkpoint load and a table import between the chunks
 * they read, a collection's creation between blocks of the rows it initialises (a 60M x 16
 * table's creation, 6 s, returned 1-10 ms after an abort; it used to finish first). Other local
 * work (a forward's lookup and update) runs to its end first.
 * A peer blocked waiting for this rank gets
 * SHARDREC_EREMOTE promptly (a peer blocked on a third rank waits for that rank or its timeout).
 * After aborting a root communicator, destroying it does not wait on peers. The handles must still
 * be destroyed. Idempotent.
 * @param comm [in] Communicator; not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL. Thread-safe: may run from any thread (a signal-free
 *         watchdog, a task-kill listener) while another thread is blocked on the domain. Not
 *         async-signal-safe (it takes locks and may allocate): a SIGTERM handler should only
 *         wake a thread (write to a pipe, sem_post) that then calls it.
 */
SHARDREC_API shardrec_status_t shardrec_comm_abort(shardrec_comm_t* comm);

/**
 * The error that poisoned @p comm (a timeout, a remote failure, or an abort), if any.
 * @param comm [in] Communicator; not NULL.
 * @return SHARDREC_OK when healthy; otherwise that error's code, with its message available
 *         from shardrec_last_error(). SHARDREC_EINVAL for NULL. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_comm_async_error(const shardrec_comm_t* comm);

/**
 * Releases the handle. Objects that use the communicator (embedding collections) keep it alive
 * until they are destroyed too. Destroying rank 0's last communicator of a unique-id (or
 * environment) rendezvous waits up to shardrec_comm_options_t.store_grace_ms (default 2 s) for
 * the other ranks to disconnect from its store (connections that never presented the nonce do
 * not count), and not at all after shardrec_comm_abort().
 * @param comm [in] Handle or NULL (no-op). Must not be in use by another thread.
 */
SHARDREC_API void shardrec_comm_destroy(shardrec_comm_t* comm);

/**
 * Collective: recv[i] = op over all ranks of send[i] for @p count elements. In place when
 * @p send == @p recv. fp16/bf16 are combined in fp32 and rounded back.
 * @param comm   [in] Communicator; not NULL.
 * @param send   [in] @p count elements of @p dtype on the communicator's device; NULL only when
 *               @p count is 0.
 * @param recv   [out] @p count elements; may equal @p send.
 * @param count  Number of elements (the same on every rank).
 * @param dtype  shardrec_dtype_t value.
 * @param op     SHARDREC_REDUCE_*.
 * @param stream CUDA stream for device buffers (NULL = default stream); ignored for host
 *               buffers. With the CPU engine the call synchronises @p stream and returns when
 *               the result is in @p recv; with NCCL it is asynchronous on @p stream.
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_EUSAGE (poisoned); SHARDREC_ETIMEOUT;
 *         SHARDREC_EREMOTE; SHARDREC_ECUDA. Not thread-safe on @p comm.
 * Agreement: over a host communicator the ranks first exchange what they are about to call
 * (the collective, @p count, @p dtype, @p op or root, and whether it refused its arguments; one
 * all-reduce of 72 bytes), so ranks
 * giving different values, or calling different raw collectives (this one, broadcast,
 * allgather, barrier), all fail with SHARDREC_EINVAL before any buffer is read or written, and
 * the communicator stays usable. A rank refusing its own arguments (NULL buffers, an unknown
 * dtype or op, a root outside the world) still takes part in that exchange: it returns its own
 * SHARDREC_EINVAL and every other rank SHARDREC_EINVAL naming it, at once. A NULL @p comm fails
 * alone (there is nothing to exchange over), and over a device (NCCL) communicator nothing is
 * agreed: there a refusing rank fails alone.
 */
SHARDREC_API shardrec_status_t shardrec_comm_allreduce(shardrec_comm_t* comm, const void* send,
                                                       void* recv, size_t count, int32_t dtype,
                                                       int32_t op, void* stream);

/**
 * Collective: copies @p count elements of @p buf on rank @p root to @p buf on every rank.
 * @param comm   [in] Communicator; not NULL.
 * @param buf    [in,out] @p count elements; NULL only when @p count is 0.
 * @param count  Number of elements (the same on every rank).
 * @param dtype  shardrec_dtype_t value.
 * @param root   Source rank, in [0, size), the same on every rank.
 * @param stream As in shardrec_comm_allreduce().
 * @return As shardrec_comm_allreduce(), with its agreement.
 */
SHARDREC_API shardrec_status_t shardrec_comm_broadcast(shardrec_comm_t* comm, void* buf,
                                                       size_t count, int32_t dtype, int32_t root,
                                                       void* stream);

/**
 * Collective: every rank contributes @p count elements; @p recv receives size x @p count
 * elements, rank r's block at offset r x @p count. Not in place.
 * @param comm   [in] Communicator; not NULL.
 * @param send   [in] @p count elements; NULL only when @p count is 0.
 * @param recv   [out] size x @p count elements; must not overlap @p send.
 * @param count  Elements per rank (the same on every rank).
 * @param dtype  shardrec_dtype_t value.
 * @param stream As in shardrec_comm_allreduce().
 * @return As shardrec_comm_allreduce(), with its agreement.
 */
SHARDREC_API shardrec_status_t shardrec_comm_allgather(shardrec_comm_t* comm, const void* send,
                                                       void* recv, size_t count, int32_t dtype,
                                                       void* stream);

/**
 * Collective: returns once every rank has entered the barrier.
 * @param comm [in] Communicator; not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL (also when another rank called a different raw
 *         collective: the agreement of shardrec_comm_allreduce()); SHARDREC_EUSAGE;
 *         SHARDREC_ETIMEOUT; SHARDREC_EREMOTE.
 */
SHARDREC_API shardrec_status_t shardrec_comm_barrier(shardrec_comm_t* comm);

/* ---- MPI backend ---------------------------------------------------------------------- */

/** Backend value of communicators created by shardrec_comm_create_mpi(). Other create calls
 *  refuse it in shardrec_comm_options_t.backend with SHARDREC_EINVAL. */
#define SHARDREC_BACKEND_MPI 3

/**
 * Collective over an MPI communicator: every member of it calls this. The new handle runs
 * every collective on a duplicate of that communicator (MPI_Comm_idup), so libshardrec's traffic
 * never mixes with the host's, through the MPI plugin libshardrec_mpi.so, which is loaded on
 * the first call (SHARDREC_MPI_PLUGIN may name its file). libshardrec.so itself does not
 * depend on MPI, and this header does not include mpi.h: the communicator is passed as its
 * Fortran handle.
 *
 * Initialisation: when the host has not initialised MPI, the plugin calls MPI_Init_thread
 * (asking for MPI_THREAD_MULTIPLE) and MPI_Finalize at process exit (skipped when operations
 * were left in flight by a timeout or an abort, since finalizing would then wait for the stalled
 * peer), both on a thread of its own. MPI_Finalize waits for every process of the job to reach
 * its own: after an abort that left nothing in flight, a process exiting while its peers run
 * on stays in MPI_Finalize until they finish; a host that must leave at once calls MPI_Abort
 * (which ends the job) or _exit. MPI_Init_thread waits for every process of the job; this call
 * waits for it at most timeout_ms and then returns SHARDREC_ETIMEOUT (MPI is not usable yet), and a
 * later call waits for the same initialisation again (tests/capi/mpi/mpi_late_member_test.c).
 * A host that initialised MPI itself must have asked for MPI_THREAD_SERIALIZED or
 * MPI_THREAD_MULTIPLE: libshardrec calls MPI from its communication worker thread (pipelined
 * input distribution, DDP buckets) and serialises its own calls; with SERIALIZED the host must
 * not call MPI while a libshardrec call is running. Destroy every MPI communicator before the
 * host calls MPI_Finalize.
 *
 * Splits: shardrec_comm_split() of an MPI communicator is bounded by the timeout and by
 * shardrec_comm_abort() like every call, and threads may split different communicators at once
 * (collections, meshes, DDP and FSDP instances split the communicator they are given). A split
 * in which every member passes the same color and keys in rank order (the private copies those
 * make) is an MPI_Comm_idup; any other is an MPI_Comm_split, which MPI offers only as a
 * blocking call and libshardrec runs on a thread of its own. Under MPI_THREAD_MULTIPLE the other
 * threads' calls go on meanwhile. Under MPI_THREAD_SERIALIZED MPI allows no other call until it
 * returns, so two threads of each process making such splits of two communicators at the same
 * time (two meshes) can wait for each other for ever: make those from one thread, or initialise
 * MPI with MPI_THREAD_MULTIPLE.
 *
 * Timeouts: MPI has no per-operation timeout, so every operation is nonblocking MPI polled
 * against its deadline. On expiry the call returns SHARDREC_ETIMEOUT naming the operation and
 * rank; the communicator (and every one split from the same root) is poisoned as on other
 * backends, and the MPI requests stay outstanding: MPI may still write the receive buffers of
 * that call, so keep them alive, or end the job (MPI_Abort), which is what an MPI job normally
 * does next. shardrec_comm_abort() only stops this process's wait; it does not end the job,
 * and it cannot withdraw what this rank already started: a collective it had entered may still
 * complete on its peers with this rank's part (MPI cannot cancel a collective), while peers
 * waiting for a later call of this rank reach their timeout.
 *
 * Threads: calls from several threads are safe, but ranks pair up by order. MPI matches the
 * duplicates of one MPI communicator (MPI_Comm_idup) in the order each process makes them, so
 * two threads of a process creating from the same MPI communicator at the same time may pair
 * with each other's counterparts on another process: both new communicators work, and their
 * collectives combine the wrong threads' data, silently when those calls agree in kind and
 * size (otherwise SHARDREC_EREMOTE, see "Mismatched calls"). No check can tell the two
 * duplicates apart. Create from one MPI communicator in one thread, in the same order on every
 * rank, or give each thread an MPI communicator of its own (MPI_Comm_dup, made in the same
 * order on every rank) and create from that. Splits pair up the same way, which
 * shardrec_comm_split() already rules out by allowing one thread at a time per communicator.
 *
 * Launch: a process started without an MPI launcher is an MPI singleton, a world of itself. When
 * MPI's world has 1 process but WORLD_SIZE (torchrun), OMPI_COMM_WORLD_SIZE, PMI_SIZE or
 * SLURM_NTASKS (read in that order) says the job has more, this call returns SHARDREC_EINVAL
 * naming both instead of giving every process a communicator of its own: start the job with
 * mpirun / mpiexec (or srun with MPI support), use shardrec_comm_create_from_env() under
 * torchrun, or unset the variable for a process meant to run alone. A larger MPI world is
 * never refused for such a variable.
 *
 * Mismatched calls: the raw collectives of this header agree on their signatures first (see
 * shardrec_comm_allreduce()), so ranks calling them with different counts or kinds get
 * SHARDREC_EINVAL and nothing moves. Behind that, for the library's own collectives, every
 * message names the collective it belongs to, and every receive checks that and the size of
 * what arrives; a large all-reduce between ranks of one host, whose data moves by reading the
 * peers' memory instead of messages, compares every rank's size first (nothing is read when they
 * differ). Ranks whose messages still differ get SHARDREC_EREMOTE at once, naming the peer,
 * both collectives and both sizes, on every rank that receives a message of the mismatched call;
 * none returns wrong data as a success, and MPI's error handlers are not involved. A rank that
 * receives nothing from the mismatched peers in that call may return SHARDREC_OK (a broadcast's
 * root); ranks that disagree on a broadcast's root may only fail at their next call. A failed
 * call's receive buffers hold unspecified data, and the communicator is poisoned as after any
 * error.
 *
 * Host memory only (SHARDREC_EUNSUPPORTED for a CUDA device_type).
 *
 * @param out              [out] Receives the new handle (caller owns; shardrec_comm_destroy()).
 * @param mpi_comm_fortran MPI_Comm_c2f() of the communicator to use, or 0 for MPI_COMM_WORLD
 *                         (also the only value allowed when MPI is not initialised yet). It must
 *                         be a valid handle of a live communicator: MPI cannot check one, and
 *                         given anything else (a freed or made-up value) MPI's own error handler
 *                         usually ends the job (Open MPI: MPI_ERRORS_ARE_FATAL in MPI_Comm_idup).
 * @param options          [in] Options, or NULL: timeout_ms bounds creation and is the
 *                         default per-operation timeout; backend must be AUTO or MPI;
 *                         device_type host; bind_address is ignored.
 * @return SHARDREC_OK; SHARDREC_EINVAL (bad options, MPI_COMM_NULL's handle, or a handle other
 *         than 0 before MPI is initialised; an MPI world of 1 process where
 *         the launcher's variables say the job has more, see "Launch"); SHARDREC_EUNSUPPORTED
 *         (no MPI plugin: libshardrec built without MPI, or the plugin not installed; a CUDA
 *         device); SHARDREC_EUSAGE (MPI initialised below MPI_THREAD_SERIALIZED, or already
 *         finalized); SHARDREC_ETIMEOUT (a member never called this); SHARDREC_EREMOTE.
 *         On failure *out is NULL. Thread-safe, but concurrent calls on one MPI communicator
 *         pair up across processes in an order nobody fixes (see "Threads").
 */
SHARDREC_API shardrec_status_t shardrec_comm_create_mpi(shardrec_comm_t** out,
                                                        int64_t mpi_comm_fortran,
                                                        const shardrec_comm_options_t* options);

/* ---- Launching from a cluster's launcher (torchrun, mpirun, srun), local rank ---- */

/**
 * Collective: creates this process's communicator from the variables its launcher set, with no
 * unique id to ship. Reads the first convention present, in this order:
 *  - torchrun, Kubernetes PyTorchJob, DeepSpeed, TorchDistributor: RANK, WORLD_SIZE,
 *    MASTER_ADDR, MASTER_PORT (all required), LOCAL_RANK, LOCAL_WORLD_SIZE;
 *  - Open MPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
 *  - MPICH / Intel MPI (Hydra): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS;
 *  - Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
 *    SLURM_TASKS_PER_NODE, SLURM_JOB_NODELIST, SLURM_JOB_ID.
 * Conventions that disagree are not refused (torchrun started by srun or mpirun sees both, with
 * different meanings), so RANK / WORLD_SIZE left over from an earlier run override mpirun's and
 * srun's variables; errors of a torchrun-variable launch end with a note naming the MPI or Slurm
 * rank and size variables that are set too and disagree.
 * Rank 0's store address: MASTER_ADDR when set (a name or a numeric address); else, under Slurm,
 * the first host of SLURM_JOB_NODELIST (compressed lists such as "node[01-04],gpu5" are
 * expanded); else, under MPI with every rank on one host, 127.0.0.1; otherwise an error asking
 * for MASTER_ADDR (MPI launchers publish no address: export it, e.g. `mpirun -x MASTER_ADDR`).
 * Port: MASTER_PORT when set (MASTER_PORT + 1 when TORCHELASTIC_USE_AGENT_STORE is True:
 * torchrun's agent then serves torch's own store on MASTER_PORT); else 20000 + SLURM_JOB_ID % 10000
 * (Slurm, which requires one of the two) or 20000 + OMPI_MCA_ess_base_jobid % 10000 (Open MPI);
 * else 29500 (MPICH / Hydra, or Open MPI without a job id). An empty variable counts as unset.
 * Rank 0 hosts the store on that port on every interface; the others connect, retrying until the
 * timeout (they may start first). A store host name that does not resolve yet (a Kubernetes
 * service, a node new to DNS) is looked up again until the timeout on every rank. Then the ranks
 * meet as with shardrec_comm_create(), and destroy follows the same rules.
 *
 * Re-creation: after destroying every handle (an abort or a failure first, or not), calling this
 * again on every rank meets on the same port with no pause needed. Rank 0's destroy stops its
 * store before returning; a rank that connects while rank 0's previous store still answers does
 * not join a store it has already left, nor one of another session's nonce (such as the
 * previous attempt's token), and tries again until the new one is up or the timeout passes.
 *
 * Trust model: when SHARDREC_RENDEZVOUS_TOKEN is set (the same secret on every rank) it becomes
 * the store's session nonce, and a connection without it is refused as with a unique id.
 * Without it the nonce is derived from public facts (convention, world size, port, and
 * TORCHELASTIC_RESTART_COUNT when set; with the token, the restart count is part of it too).
 * The master address's text is not: ranks that spell rank 0's address differently (localhost,
 * 127.0.0.1, a service name) meet. Like torch's TCP store, anyone who can reach the port can
 * join or disrupt the rendezvous, so run on a private network or set the token. Traffic is
 * never encrypted either way.
 * @param out     [out] Receives the new handle (caller owns; shardrec_comm_destroy()).
 * @param options [in] Options, or NULL for defaults.
 * @return SHARDREC_OK; SHARDREC_ENOTFOUND when no launcher variables are present;
 *         SHARDREC_EINVAL naming the convention and the variable missing or malformed;
 *         SHARDREC_EIO when rank 0 cannot listen on the port (when it is in use, the message
 *         says that another process started as rank 0, naming the variables read, or another
 *         program most likely holds it); SHARDREC_ETIMEOUT
 *         (also when the store's host name never resolved, naming it and the resolver's error,
 *         or when rank 0 still serves the store of this rank's previous communicator);
 *         SHARDREC_EREMOTE (store unreachable, or a different token, WORLD_SIZE or port: reported
 *         at the timeout, as the store met may be a previous session's going away);
 *         SHARDREC_EUSAGE when a rank number was claimed twice. On failure *out is NULL.
 *         Thread-safe.
 */
SHARDREC_API shardrec_status_t
shardrec_comm_create_from_env(shardrec_comm_t** out, const shardrec_comm_options_t* options);

/**
 * Collective, like shardrec_comm_create_from_env(), for hosts that hand rank 0's address in code
 * rather than in launcher variables (Ray Train, a custom scheduler): every rank of the world
 * calls this with the same @p addr, @p port and @p world_size and a distinct @p rank. Rank 0
 * hosts the rendezvous store on @p port on every interface; the others connect to
 * @p addr:@p port, retrying until the timeout (they may start first), and then the ranks meet
 * exactly as shardrec_comm_create_from_env() does under torchrun's variables with MASTER_ADDR =
 * @p addr, MASTER_PORT = @p port, RANK = @p rank and WORLD_SIZE = @p world_size (same
 * re-creation rules, same destroy rules, ranks may spell @p addr differently). Of the environment
 * only SHARDREC_RENDEZVOUS_TOKEN is read (the same trust model: without it, anyone who can reach
 * the port can join or disrupt the rendezvous); launcher variables (RANK, MASTER_ADDR,
 * LOCAL_RANK, ...) are ignored, so leftovers cannot override the arguments.
 * shardrec_comm_local_rank() / _local_size() are computed from the ranks' hosts (kernel boot id
 * and network namespace), as for shardrec_comm_create().
 * @param out        [out] Receives the new handle (caller owns; shardrec_comm_destroy()).
 * @param addr       [in] Rank 0's host as the caller's rank reaches it: a name or a numeric IPv4
 *                   or IPv6 address; not NULL, not empty. Rank 0 itself may pass "127.0.0.1" or
 *                   "localhost". Not kept after the call.
 * @param port       TCP port of the store, in [1, 65535].
 * @param rank       This rank, in [0, world_size).
 * @param world_size Number of ranks, >= 1.
 * @param options    [in] Options, or NULL for defaults.
 * @return SHARDREC_OK; SHARDREC_EINVAL naming the argument (NULL or empty addr, port, rank,
 *         world_size, options); then the errors of shardrec_comm_create_from_env() after it has
 *         read its variables (SHARDREC_EIO when rank 0 cannot listen on the port,
 * SHARDREC_ETIMEOUT, SHARDREC_EREMOTE, SHARDREC_EUSAGE), their messages naming an "explicit TCP
 * launch". On failure *out is NULL. Thread-safe (different ranks may be created concurrently).
 */
SHARDREC_API shardrec_status_t shardrec_comm_create_tcp(shardrec_comm_t** out, const char* addr,
                                                        int32_t port, int32_t rank,
                                                        int32_t world_size,
                                                        const shardrec_comm_options_t* options);

/**
 * This rank's position among the ranks of @p comm on the same host (0-based), and how many
 * there are (shardrec_comm_local_size), e.g. for topology.ranks_per_node or to pick a GPU.
 * From the launcher for shardrec_comm_create_from_env() when it says; for a local group, the
 * thread's index; otherwise computed once when the communicator is created (host communicators:
 * ranks with the same kernel boot id and the same network namespace share a host, so containers
 * or namespaces that merely share a host name do not; where /proc is unreadable, the host name).
 * @param out  [out] Receives the value; not NULL.
 * @param comm [in] Communicator; not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_EUNSUPPORTED for a device communicator not
 *         created from a launcher's environment. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_comm_local_rank(int32_t* out, const shardrec_comm_t* comm);

/**
 * Number of ranks of @p comm on this host, from the same source as shardrec_comm_local_rank().
 * @param out  [out] Receives the value; not NULL.
 * @param comm [in] Communicator; not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL; SHARDREC_EUNSUPPORTED for a device communicator not
 *         created from a launcher's environment. Thread-safe.
 */
SHARDREC_API shardrec_status_t shardrec_comm_local_size(int32_t* out, const shardrec_comm_t* comm);

/**
 * Pins this process to the CPUs of one NUMA node, chosen from this rank's place on its host, so
 * that ranks splitting a multi-socket host each run on their own socket's cores.
 * Node rule: local rank r of local size n (shardrec_comm_local_rank/_size) gets node
 * r * nodes / n (integer division), where nodes counts this host's NUMA nodes that have CPUs
 * (memory-only nodes are skipped), in hwloc's logical order. With more ranks than nodes several
 * ranks share a node; with more nodes than ranks the ranks are spread over them and the nodes in
 * between are left unused. On a host with one node every rank gets node 0.
 * Effect: the affinity mask of every thread of the process is replaced by that node's CPUs (as
 * hwloc sees them, i.e. within any container cpuset); threads started later inherit it, and the
 * library's thread pools size themselves from the mask. Memory policy is not changed. The binding
 * is per process: ranks that share one process (shardrec_comm_create_local_group) all bind the
 * same process, and the last call wins. Call it once, right after creating the communicator,
 * before handles that start thread pools are created. Not collective; no communication.
 * @param out  [out] Receives the node's index in the order above; may be NULL.
 * @param comm [in] Host communicator; not NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL for a NULL @p comm; SHARDREC_EUNSUPPORTED for a device
 *         communicator, or when libshardrec was built without hwloc (libhwloc-dev);
 *         SHARDREC_ERROR when hwloc cannot read the topology or set the binding. On error the
 *         affinity is unchanged and *out is not written. Thread-safe, but it changes
 *         process-wide state.
 */
SHARDREC_API shardrec_status_t shardrec_comm_bind_local_numa(int32_t* out, shardrec_comm_t* comm);

SHARDREC_END_DECL

#endif /* SHARDREC_COMM_H_ */
