/* The CUDA plugin's boundary: one versioned table of plain-C function pointers.
 *
 * libshardrec.so dlopens libshardrec_cuda.so and asks it for this table; nothing else crosses.
 * Each side carries its own copy of the C++ core (Status, containers, the allocator state), so
 * no C++ object, exception or vtable may cross: errors come back as a code (the values of
 * shardrec::Code, which mirror shardrec_status_t) plus a message copied into the caller's
 * shardrec_plugin_status_t, and NCCL communicators are opaque handles. NCCL's net and tuner
 * plugins and ONNX Runtime's execution providers draw the same line.
 *
 * Versioning. The plugin is built from the same tree as the library, so there is one version:
 * abi_version changes whenever the table changes at all (an entry added, removed, reordered or
 * changed in meaning or signature), and the loader refuses any other value, and a table whose
 * struct_size is not this build's sizeof, with a message naming both versions (or sizes) and the
 * plugin's path. A mismatch means a stale plugin from another build was picked up; no entry is
 * probed and no older table is served.
 *
 * Every function below is safe to call from any thread unless its comment says otherwise,
 * never throws, and (when it returns int32_t) returns the code it also stores in *status.
 * A NULL status pointer is tolerated (the message is dropped).
 */
#ifndef SHARDREC_IMPL_CORE_PLUGIN_ABI_H_
#define SHARDREC_IMPL_CORE_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARDREC_CUDA_PLUGIN_ABI_VERSION 3u

/* The only two symbols the plugin exports. */
#define SHARDREC_CUDA_PLUGIN_ABI_SYMBOL "shardrec_cuda_plugin_abi_version"
#define SHARDREC_CUDA_PLUGIN_TABLE_SYMBOL "shardrec_cuda_plugin_table"

/* Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES; the plugin static_asserts it). */
#define SHARDREC_PLUGIN_NCCL_ID_BYTES 128u

/* Messages longer than this are truncated (never unterminated). */
#define SHARDREC_PLUGIN_MESSAGE_BYTES 1024u

typedef struct shardrec_plugin_status {
  int32_t code; /* 0 on success, else a shardrec::Code value */
  char message[SHARDREC_PLUGIN_MESSAGE_BYTES];
} shardrec_plugin_status_t;

/* Copy directions, as cudaMemcpyKind without the CUDA header. */
enum {
  SHARDREC_PLUGIN_COPY_HOST_TO_DEVICE = 0,
  SHARDREC_PLUGIN_COPY_DEVICE_TO_HOST = 1,
  SHARDREC_PLUGIN_COPY_DEVICE_TO_DEVICE = 2,
  SHARDREC_PLUGIN_COPY_DEFAULT = 3 /* inferred from the pointers (unified addressing) */
};

/* What the plugin was built with and what it finds at run time. Versions use CUDA's encoding
 * (1000 * major + 10 * minor) and NCCL's (NCCL_VERSION_CODE: 10000 * major + 100 * minor +
 * patch); 0 where unknown (e.g. no driver). */
typedef struct shardrec_plugin_versions {
  int32_t built_cuda_runtime; /* CUDART_VERSION of the headers the plugin was compiled with */
  int32_t built_nccl;         /* NCCL_VERSION_CODE of those headers */
  int32_t cuda_driver;        /* cudaDriverGetVersion: the newest CUDA the driver supports */
  int32_t cuda_runtime;       /* cudaRuntimeGetVersion of the loaded libcudart */
  int32_t nccl;               /* ncclGetVersion of the loaded libnccl */
} shardrec_plugin_versions_t;

/* An NCCL communicator living inside the plugin. Opaque to libshardrec. */
typedef struct shardrec_plugin_nccl shardrec_plugin_nccl_t;

/* One linear layer call on the GPU (cuBLASLt; impl/dense/lt_plan.h). Shapes and enums as in
 * impl/dense/linear.h (activation) and lt_plan.h (math). */
typedef struct shardrec_plugin_linear {
  int64_t in;
  int64_t out;
  int64_t batch;
  int32_t activation;       /* this layer's shardrec::dense::Activation */
  int32_t input_activation; /* activation of the layer that produced x (backward only) */
  int32_t math;             /* shardrec::dense::lt::Math */
  int32_t flags;            /* SHARDREC_PLUGIN_LINEAR_* bits */
} shardrec_plugin_linear_t;

/* Backward: dy already carries this layer's activation derivative (an upstream DRELU). */
#define SHARDREC_PLUGIN_LINEAR_DY_IS_DZ 1
/* Backward: input_aux holds the input layer's ReLU mask as written by linear_forward. */
#define SHARDREC_PLUGIN_LINEAR_INPUT_AUX_VALID 2

/* ---- Embedding kernels (impl/embedding/kernels/cuda/kernels_cuda.h). Plain mirrors of the C++
 * types of impl/embedding/kernels/kernels.h and impl/optim/optimizer.h; marshalled by
 * impl/embedding/gpu/plugin_structs.h on both sides. Pointers marked (device) are device
 * memory of the call's device. */

/* A shard's weights (kernels::WeightsView): rows x cols of dtype (a shardrec::DType value:
 * fp32, fp16 or bf16), row stride `stride` elements. */
typedef struct shardrec_plugin_weights {
  const void* data; /* (device) */
  int64_t rows;
  int64_t stride;
  int32_t dtype;
  int32_t cols;
} shardrec_plugin_weights_t;

/* A run of bags (kernels::BagRun): bag b holds the ids rows[offsets[b] .. offsets[b+1]), or,
 * with offsets NULL, id b alone. weights: one per id, or NULL. */
typedef struct shardrec_plugin_bag_run {
  const int64_t* offsets; /* (device) num_bags + 1 entries, or NULL */
  const int64_t* rows;    /* (device) */
  const float* weights;   /* (device) or NULL */
  int64_t num_bags;
  int64_t io_offset; /* element offset of bag 0's row in the io buffer */
} shardrec_plugin_bag_run_t;

/* One job of a batched lookup (kernels::LookupJob). */
typedef struct shardrec_plugin_lookup_job {
  shardrec_plugin_weights_t weights;
  shardrec_plugin_bag_run_t run;
  float* out; /* (device) io buffer */
  int64_t out_stride;
} shardrec_plugin_lookup_job_t;

/* One shard's runs for a backward (kernels::DeviceRuns): the run descriptors and their id
 * counts are host memory read during the call; the pointers inside the runs are device memory.
 * Any number of runs: the plugin launches them in tables of at most 128 (a kernel parameter). */
typedef struct shardrec_plugin_runs {
  const shardrec_plugin_bag_run_t* runs; /* num_runs descriptors (host) */
  const int64_t* num_ids;                /* ids of each run (host) */
  int32_t num_runs;
  int64_t num_rows; /* rows of the shard */
} shardrec_plugin_runs_t;

/* optim::OptimizerConfig: type, weight_decay_mode as their enum values; stochastic_rounding
 * 0 or 1. */
typedef struct shardrec_plugin_optimizer {
  int32_t type;
  float learning_rate;
  float eps;
  float beta1;
  float beta2;
  float weight_decay;
  int32_t weight_decay_mode;
  int32_t stochastic_rounding;
  uint64_t seed;
} shardrec_plugin_optimizer_t;

/* Optimizer states a shard has at most (optim::StateSpecs). */
#define SHARDREC_PLUGIN_MAX_STATES 2

/* optim::ShardParams: weights rows x cols of dtype (row stride `stride`), num_states state
 * pointers in StateSpecs order (device; the rest NULL), and where the shard sits in its table
 * (stochastic rounding only). */
typedef struct shardrec_plugin_shard {
  void* weights; /* (device) */
  float* states[SHARDREC_PLUGIN_MAX_STATES];
  int64_t rows;
  int64_t stride;
  int64_t row_offset;
  uint64_t table_key;
  int32_t dtype;
  int32_t cols;
  int32_t col_offset;
  int32_t num_states;
} shardrec_plugin_shard_t;

/* optim::RowUpdate: num_rows sorted unique local rows and num_rows x cols gradients. */
typedef struct shardrec_plugin_row_update {
  const int64_t* rows; /* (device) */
  const float* grads;  /* (device) */
  int64_t num_rows;
} shardrec_plugin_row_update_t;

/* The routing of a KJT by destination rank (impl/embedding/kernels/simt/route_body.h's
 * RouteParams, field for field; impl/embedding/gpu/route.h describes the fields). Every
 * pointer is device memory; the plan tables, work arrays and outputs are carved by the caller. */
typedef struct shardrec_plugin_route {
  int64_t batch_size;
  int64_t num_lengths;
  int64_t num_values;
  const int32_t* lengths;
  const void* values;
  const float* weights; /* or NULL */
  int32_t ids64;
  int32_t bounds;
  int32_t check_non_finite;
  int32_t sequence;
  int32_t num_pairs;
  int32_t num_slots;
  int32_t num_real_slots;
  int32_t pad;
  const int32_t* pair_feature;
  const int64_t* pair_rows;
  const int32_t* pair_flags;
  const int32_t* pair_block_begin;
  const int64_t* block_first;
  const int32_t* block_slot_begin;
  const int32_t* block_slots;
  const int32_t* slot_dest;
  const int32_t* slot_in_dest;
  int64_t* bag_offsets;
  int64_t* wide;
  int32_t* slot_lengths;
  int64_t* id_scan;
  int64_t* ne_scan;
  float* mean_div; /* or NULL */
  int64_t* slot_ids_at;
  int64_t* slot_ne_at;
  void* status; /* the route's status block */
  uint8_t* send;
  int64_t send_bytes;
  int64_t* ret_target;
  int64_t* dp_rows;
  float* dp_weights; /* or NULL */
  int64_t* dp_pos;   /* or NULL */
  int64_t* dp_offsets;
  const int64_t* dest_base;
  const int64_t* dest_rows;
  const int64_t* dest_weights;
  const int64_t* dest_first_id;
} shardrec_plugin_route_t;

/* emb_route's phases. */
#define SHARDREC_PLUGIN_ROUTE_COUNT 0
#define SHARDREC_PLUGIN_ROUTE_FILL 1

/* One column range of emb_divide_means: columns [col, col + cols) of every row r of the
 * output are divided by div[r] (device memory), or set to 0 where div[r] is 0. */
typedef struct shardrec_plugin_mean_job {
  int64_t col;
  int32_t cols;
  int32_t reserved;
  const float* div;
} shardrec_plugin_mean_job_t;

/* One (source rank, unit) of emb_unpack (impl/embedding/kernels/simt/unpack_body.h's UnpackRun,
 * field for field): `lengths` its bag lengths in the received message, `offsets` bags + 1 CSR
 * offsets written by the call (or NULL), ids and bags the counts its source announced. */
typedef struct shardrec_plugin_unpack_run {
  const int32_t* lengths; /* (device) */
  int64_t* offsets;       /* (device) or NULL */
  int64_t ids;
  int64_t bags;
} shardrec_plugin_unpack_run_t;

/* emb_unpack's arguments (UnpackParams, field for field); every pointer is device memory. */
typedef struct shardrec_plugin_unpack {
  int64_t num_runs;
  int64_t num_cells;
  const shardrec_plugin_unpack_run_t* runs; /* num_runs */
  const int64_t* cell_begin;                /* num_runs + 1 */
  int64_t* wide;                            /* num_cells + 1 */
  int64_t* ne_scan;                         /* num_cells + 1 */
  int64_t* id_scan;                         /* num_cells + 1 */
  unsigned long long* bad; /* ~(first run that disagrees with its counts), 0 = none */
} shardrec_plugin_unpack_t;

/* emb_check_finite's arguments (simt/grad_body.h's FiniteParams, field for field): `result` is
 * a 16-byte block (~ the first non-finite index, its value), `flag` gets flag_value when there
 * is one, else 0. Device memory. */
typedef struct shardrec_plugin_finite {
  const float* x;
  int64_t n;
  int64_t flag_value;
  int64_t* flag;
  void* result;
} shardrec_plugin_finite_t;

/* One unit's rows of emb_pack_grads (PackJob, field for field; the job table is device memory). */
typedef struct shardrec_plugin_pack_job {
  const int64_t* targets;
  float* dst;
  const float* div; /* or NULL */
  int64_t count;
  int64_t col;
  int64_t cols;
} shardrec_plugin_pack_job_t;

/* emb_pack_grads's arguments (PackParams, field for field); device memory. */
typedef struct shardrec_plugin_pack {
  const float* grad;
  int64_t stride;
  int64_t num_jobs;
  const shardrec_plugin_pack_job_t* jobs;
  const int64_t* first_row; /* num_jobs + 1 */
} shardrec_plugin_pack_t;

/* One data-parallel (feature, table) pair of emb_dp_step (impl/embedding/kernels/simt/dp_body.h's
 * DpPair, field for field; the pair table is device memory). */
typedef struct shardrec_plugin_dp_pair {
  const int64_t* offsets; /* batch_size + 1 id positions (device) */
  const float* div;       /* MEAN divisors per sample (device), or NULL */
  int64_t col;            /* first output column */
  int32_t table;          /* index among the data-parallel tables */
  int32_t pad;
} shardrec_plugin_dp_pair_t;

/* One data-parallel table of emb_dp_step (DpTable, field for field; device memory): where its
 * dense gradient [rows, dim] and touched flags [rows] start in the dense block (floats). */
typedef struct shardrec_plugin_dp_table {
  int64_t grad_at;
  int64_t touch_at;
  int32_t dim;
  int32_t pad;
} shardrec_plugin_dp_table_t;

/* emb_dp_step's arguments (DpParams, field for field); every pointer is device memory. */
typedef struct shardrec_plugin_dp {
  const float* grad; /* the output gradient [rows, stride] */
  int64_t stride;
  int64_t batch_size;
  int64_t num_pairs;
  const shardrec_plugin_dp_pair_t* pairs; /* num_pairs */
  const int64_t* pair_first;              /* num_pairs + 1 */
  int64_t num_ids;
  const int64_t* rows;
  const float* weights; /* or NULL */
  const int64_t* pos;   /* sequence: output row per id; else NULL */
  int64_t num_tables;
  const shardrec_plugin_dp_table_t* tables; /* num_tables */
  const int64_t* key_first;                 /* num_tables + 1 */
  int64_t num_keys;
  float* dense; /* the all-reduce's block: gradients and touched flags */
  int64_t dense_floats;
  float scale;
  int32_t pad;
  int64_t* rows_out;
  float* grads_out;
  int64_t* counts_out; /* num_tables */
  const int64_t* gate; /* non-zero: every count 0; or NULL */
} shardrec_plugin_dp_t;

/* emb_dp_step's phases. */
#define SHARDREC_PLUGIN_DP_ACCUMULATE 0
#define SHARDREC_PLUGIN_DP_COMPACT 1

/* A row list whose length only the device knows (kernels::CountedRows): the first *count
 * (device memory, at most max_rows) of rows / grads. */
typedef struct shardrec_plugin_counted_rows {
  const int64_t* rows;
  const float* grads;
  const int64_t* count;
  int64_t max_rows;
} shardrec_plugin_counted_rows_t;

/* emb_sum_sources' arguments (impl/embedding/kernels/simt/stats_body.h's SumSourcesParams, field
 * for field; SHARDREC_PLUGIN_MAX_SUM_SOURCES sources at most); every pointer is device memory. */
#define SHARDREC_PLUGIN_MAX_SUM_SOURCES 16
typedef struct shardrec_plugin_sum_sources {
  const float* sources[SHARDREC_PLUGIN_MAX_SUM_SOURCES];
  int32_t num_sources;
  int32_t accumulate; /* 1: add onto dst, 0: from +0 */
  int64_t row_floats;
  int64_t max_rows;
  const int64_t* count; /* rows to sum, at most max_rows */
  float* dst;
} shardrec_plugin_sum_sources_t;

typedef struct shardrec_cuda_plugin_table {
  uint32_t struct_size; /* sizeof(shardrec_cuda_plugin_table_t) in the plugin's build */
  uint32_t abi_version; /* SHARDREC_CUDA_PLUGIN_ABI_VERSION of the plugin's build */

  /* Absolute path of the loaded plugin file (a static string; "" if unknown). */
  const char* (*plugin_path)(void);

  /* Fills *versions (never fails). */
  void (*versions)(shardrec_plugin_versions_t* versions);

  /* Probes the devices once per process: *count = number of usable CUDA devices. Returns
   * kNoDevice (with the CUDA error text) when the driver or a device is missing. */
  int32_t (*device_count)(int32_t* count, shardrec_plugin_status_t* status);

  /* Device memory on `device` (bytes == 0 gives NULL). Free of NULL is a no-op. */
  int32_t (*device_alloc)(int32_t device, size_t bytes, void** out,
                          shardrec_plugin_status_t* status);
  int32_t (*device_free)(int32_t device, void* ptr, shardrec_plugin_status_t* status);

  /* Pinned (page-locked) host memory, for staging. */
  int32_t (*host_alloc)(size_t bytes, void** out, shardrec_plugin_status_t* status);
  int32_t (*host_free)(void* ptr, shardrec_plugin_status_t* status);

  /* Stream-ordered copy / memset on `stream` (a cudaStream_t; NULL = legacy default stream),
   * with `device` current while enqueueing. Returns once enqueued. */
  int32_t (*memcpy_async)(int32_t device, void* dst, const void* src, size_t bytes, int32_t kind,
                          void* stream, shardrec_plugin_status_t* status);
  int32_t (*memset_async)(int32_t device, void* dst, int32_t value, size_t bytes, void* stream,
                          shardrec_plugin_status_t* status);

  /* Waits for `stream` to drain, polling, at most timeout_ms (> 0) milliseconds: kTimeout
   * after that, never an unbounded wait. */
  int32_t (*stream_wait)(int32_t device, void* stream, int64_t timeout_ms,
                         shardrec_plugin_status_t* status);

  /* NCCL. id buffers hold SHARDREC_PLUGIN_NCCL_ID_BYTES bytes. */
  int32_t (*nccl_unique_id)(uint8_t* id, size_t len, shardrec_plugin_status_t* status);

  /* Collective: rank `rank` of `world` on CUDA device `device`; bounded by timeout_ms. On
   * success *out is a new communicator released with nccl_destroy. */
  int32_t (*nccl_create)(const uint8_t* id, size_t len, int32_t world, int32_t rank, int32_t device,
                         int64_t timeout_ms, shardrec_plugin_nccl_t** out,
                         shardrec_plugin_status_t* status);

  /* Finalizes (bounded by the communicator's timeout) or aborts after an error; NULL is a
   * no-op. Not concurrently with other calls on the same communicator. */
  void (*nccl_destroy)(shardrec_plugin_nccl_t* comm);

  /* The communicator's default timeout for calls that pass timeout_ms == 0. */
  void (*nccl_set_timeout)(shardrec_plugin_nccl_t* comm, int64_t timeout_ms);

  /* Collectives, asynchronous on `stream`; the contract of shardrec::comm::Communicator
   * (counts in elements, dtype/op as shardrec::DType / comm::ReduceOp values, count arrays
   * with one entry per rank). timeout_ms == 0 means the communicator's timeout; it bounds the
   * enqueue and, through the plugin's watchdog, the completion on the device. */
  int32_t (*nccl_all_reduce)(shardrec_plugin_nccl_t* comm, const void* send, void* recv,
                             size_t count, int32_t dtype, int32_t op, void* stream,
                             int64_t timeout_ms, shardrec_plugin_status_t* status);
  int32_t (*nccl_all_to_all_v)(shardrec_plugin_nccl_t* comm, const void* send,
                               const size_t* send_counts, void* recv, const size_t* recv_counts,
                               int32_t dtype, void* stream, int64_t timeout_ms,
                               shardrec_plugin_status_t* status);
  int32_t (*nccl_all_gather_v)(shardrec_plugin_nccl_t* comm, const void* send, size_t send_count,
                               void* recv, const size_t* recv_counts, int32_t dtype, void* stream,
                               int64_t timeout_ms, shardrec_plugin_status_t* status);
  int32_t (*nccl_reduce_scatter_v)(shardrec_plugin_nccl_t* comm, const void* send, void* recv,
                                   const size_t* recv_counts, int32_t dtype, int32_t op,
                                   void* stream, int64_t timeout_ms,
                                   shardrec_plugin_status_t* status);
  int32_t (*nccl_broadcast)(shardrec_plugin_nccl_t* comm, void* buf, size_t count, int32_t dtype,
                            int32_t root, void* stream, int64_t timeout_ms,
                            shardrec_plugin_status_t* status);
  /* Blocks the host until every rank arrived and `stream` drained (bounded). */
  int32_t (*nccl_barrier)(shardrec_plugin_nccl_t* comm, void* stream, int64_t timeout_ms,
                          shardrec_plugin_status_t* status);

  /* Collective split; color < 0 leaves *out NULL. The new rank and size come back in *rank and
   * *size. */
  int32_t (*nccl_split)(shardrec_plugin_nccl_t* comm, int32_t color, int32_t key,
                        shardrec_plugin_nccl_t** out, int32_t* rank, int32_t* size,
                        shardrec_plugin_status_t* status);

  /* Aborts NCCL work and poisons the communicator; callable from any thread at any time. */
  void (*nccl_abort)(shardrec_plugin_nccl_t* comm);

  /* kOk while healthy, else the error that broke the communicator (asynchronous errors and
   * watchdog timeouts included). */
  int32_t (*nccl_async_error)(shardrec_plugin_nccl_t* comm, shardrec_plugin_status_t* status);

  /* ---- The dense entries. A test double serving the embedding side only may leave them NULL:
   * dense GPU calls then report kUnsupported naming the entry (core::HasDenseEntries). ---- */

  /* y[batch, out] = act(x[batch, in] w[out, in]^T + b[out]) on `stream` with `device`
   * current, through cuBLASLt; every pointer is device memory. `aux` (ReLU layers only, may
   * be NULL otherwise) receives the ReLU bit mask, lt::ReluAuxLayout(out, batch).bytes bytes;
   * *aux_written says whether it did (0 when cuBLASLt lacked the fused epilogue and a kernel
   * ran instead; the backward then takes ReLU' from y). Returns once enqueued. Thread-safe; calls
   * on one (device, stream) are serialised, since they share its scratch. */
  int32_t (*linear_forward)(int32_t device, const shardrec_plugin_linear_t* args, const float* w,
                            const float* b, const float* x, float* y, void* aux,
                            int32_t* aux_written, void* stream, shardrec_plugin_status_t* status);

  /* Backward of the call above given dy = dL/dy: dw += dz^T x, db += column sums of dz, and
   * (dx not NULL) dx = dz w, where dz = dy * act'(y) (dy is not modified). When
   * input_activation is ReLU the derivative of that input layer is applied to dx as well
   * (from input_aux when SHARDREC_PLUGIN_LINEAR_INPUT_AUX_VALID, else from x > 0), so dx is
   * the input layer's dz. Device pointers; enqueued on `stream`. */
  int32_t (*linear_backward)(int32_t device, const shardrec_plugin_linear_t* args, const float* w,
                             const float* x, const float* y, const float* dy, const void* input_aux,
                             float* dw, float* db, float* dx, void* stream,
                             shardrec_plugin_status_t* status);

  /* ---- The embedding kernels (kernels_cuda.h's twins, same contracts) and the entries below
   * them. A test double serving the dense side only may leave every emb_* entry NULL: embedding
   * GPU calls then report kUnsupported naming the entry (core::HasEmbeddingEntries); the loader
   * requires the runtime entries (streams, host_alloc_on) of every plugin. Entries with a
   * stream only enqueue work on it with `device` current and return (except emb_read_status);
   * buffers must stay valid until the stream reaches the work. ---- */

  /* *bytes = size of the device status block (all-zero bytes are its clear state). */
  int32_t (*emb_status_bytes)(int32_t device, size_t* bytes, shardrec_plugin_status_t* status);

  /* Waits at most timeout_ms (> 0) for the work queued on `stream` before the call (kTimeout
   * after that), then copies the status block to the host, clears it, and returns its first
   * error: kInvalidArgument naming the position of the first row outside its shard, prefixed
   * with `what` (may be NULL). A NULL block is kOk. */
  int32_t (*emb_read_status)(int32_t device, void* status_block, const char* what,
                             int64_t timeout_ms, void* stream, shardrec_plugin_status_t* status);

  /* kernels::cuda::Lookup: num_jobs jobs (host array); status_block may be NULL. */
  int32_t (*emb_lookup)(int32_t device, const shardrec_plugin_lookup_job_t* jobs, size_t num_jobs,
                        void* status_block, void* stream, shardrec_plugin_status_t* status);

  /* *bytes = the backward's workspace for num_ids ids of a shard with `cols` columns. */
  int32_t (*emb_backward_workspace_bytes)(int32_t device, int64_t num_ids, int32_t cols,
                                          int32_t num_row_stats, size_t* bytes,
                                          shardrec_plugin_status_t* status);

  /* kernels::cuda::GroupRows; num_unique (host, pinned for an asynchronous copy) may be NULL. */
  int32_t (*emb_group_rows)(int32_t device, const shardrec_plugin_runs_t* runs, void* workspace,
                            size_t workspace_bytes, int64_t* num_unique, void* stream,
                            shardrec_plugin_status_t* status);

  /* kernels::cuda::AggregateGrads (after emb_group_rows on the same runs and workspace). */
  int32_t (*emb_aggregate_grads)(int32_t device, const shardrec_plugin_runs_t* runs,
                                 const float* grads, int64_t grad_stride, int32_t cols, float scale,
                                 void* workspace, int64_t* unique_rows, float* row_grads,
                                 void* stream, shardrec_plugin_status_t* status);

  /* kernels::cuda::FusedBackward (after emb_group_rows on the same runs and workspace). */
  int32_t (*emb_fused_backward)(int32_t device, const shardrec_plugin_runs_t* runs,
                                const float* grads, int64_t grad_stride, float scale,
                                const shardrec_plugin_optimizer_t* config, int64_t step,
                                int32_t full_dim, const shardrec_plugin_shard_t* shard,
                                void* workspace, void* stream, shardrec_plugin_status_t* status);

  /* kernels::cuda::PartialRowStats / Apply (partial_stats, full_stats: device memory). */
  int32_t (*emb_partial_row_stats)(int32_t device, const shardrec_plugin_optimizer_t* config,
                                   int64_t step, const shardrec_plugin_shard_t* shard,
                                   const shardrec_plugin_row_update_t* update, float* partial_stats,
                                   void* stream, shardrec_plugin_status_t* status);
  int32_t (*emb_apply)(int32_t device, const shardrec_plugin_optimizer_t* config, int64_t step,
                       int32_t full_dim, const shardrec_plugin_shard_t* shard,
                       const shardrec_plugin_row_update_t* update, const float* full_stats,
                       void* stream, shardrec_plugin_status_t* status);

  /* ---- The device input distribution (routing a KJT by destination). ---- */

  /* *bytes = scratch for the route's scans over at most max_items items. */
  int32_t (*emb_route_temp_bytes)(int32_t device, int64_t max_items, size_t* bytes,
                                  shardrec_plugin_status_t* status);

  /* kernels::cuda::RouteCount (phase SHARDREC_PLUGIN_ROUTE_COUNT) or RouteFill
   * (SHARDREC_PLUGIN_ROUTE_FILL): enqueues the phase's steps on `stream` with `temp`
   * (temp_bytes, device memory) for the scans, and returns. */
  int32_t (*emb_route)(int32_t device, const shardrec_plugin_route_t* route, int32_t phase,
                       void* temp, size_t temp_bytes, void* stream,
                       shardrec_plugin_status_t* status);

  /* ---- Streams a caller owns (runtime entries: every plugin serves them). ---- */

  /* *stream = a new non-blocking stream on `device` (cudaStreamCreateWithFlags(
   * cudaStreamNonBlocking): no implicit order with the legacy default stream; callers order it
   * with stream_wait_stream or a host wait). Destroy it with stream_destroy. */
  int32_t (*stream_create)(int32_t device, void** stream, shardrec_plugin_status_t* status);
  /* Destroys a stream of stream_create; work still queued on it completes first (CUDA's
   * semantics). A NULL stream is kOk. */
  int32_t (*stream_destroy)(int32_t device, void* stream, shardrec_plugin_status_t* status);

  /* ---- The MEAN divide of a pooled output combined on the device. ---- */

  /* kernels::cuda::DivideMeans: out is [rows, stride] floats (device memory); num_jobs jobs
   * (host array, their div arrays in device memory). Enqueued on `stream`. */
  int32_t (*emb_divide_means)(int32_t device, float* out, int64_t rows, int64_t stride,
                              const shardrec_plugin_mean_job_t* jobs, size_t num_jobs, void* stream,
                              shardrec_plugin_status_t* status);

  /* ---- The owner side of an input distribution whose ids travelled between device buffers
   * over NCCL. ---- */

  /* kernels::cuda::Unpack: the received bag lengths of every run become its CSR offsets, checked
   * against the announced counts (*unpack->bad). `temp` (temp_bytes, device memory) is scratch
   * for scans of num_cells + 1 items (emb_route_temp_bytes). Enqueued on `stream`. */
  int32_t (*emb_unpack)(int32_t device, const shardrec_plugin_unpack_t* unpack, void* temp,
                        size_t temp_bytes, void* stream, shardrec_plugin_status_t* status);

  /* ---- A backward whose output gradient is in device memory, and ordering between two streams
   * without a host wait (stream_wait_stream is a runtime entry: every plugin serves it). ---- */

  /* Makes the work queued on `waiter` from now on wait for the work queued on `waitee` so far
   * (an event recorded on waitee, waited for on waiter); the host does not wait. */
  int32_t (*stream_wait_stream)(int32_t device, void* waiter, void* waitee,
                                shardrec_plugin_status_t* status);
  /* kernels::cuda::CheckFinite, enqueued on `stream`. */
  int32_t (*emb_check_finite)(int32_t device, const shardrec_plugin_finite_t* finite, void* stream,
                              shardrec_plugin_status_t* status);
  /* kernels::cuda::PackGradients over `rows` rows, enqueued on `stream`. */
  int32_t (*emb_pack_grads)(int32_t device, const shardrec_plugin_pack_t* pack, int64_t rows,
                            void* stream, shardrec_plugin_status_t* status);

  /* ---- Data-parallel tables trained on the device, and the optimizer over row lists whose
   * length only the device knows. ---- */

  /* *bytes = emb_dp_step's workspace for at most max_ids ids over num_keys table rows. */
  int32_t (*emb_dp_workspace_bytes)(int32_t device, int64_t max_ids, int64_t num_keys,
                                    size_t* bytes, shardrec_plugin_status_t* status);
  /* kernels::cuda::DpStep: phase SHARDREC_PLUGIN_DP_ACCUMULATE (the dense gradients from the
   * output gradient) or SHARDREC_PLUGIN_DP_COMPACT (touched rows, scaled gradients, counts), with
   * `workspace` (workspace_bytes, device memory). Enqueued on `stream`. */
  int32_t (*emb_dp_step)(int32_t device, const shardrec_plugin_dp_t* dp, int32_t phase,
                         void* workspace, size_t workspace_bytes, void* stream,
                         shardrec_plugin_status_t* status);
  /* kernels::cuda::RowPhaseCounted: phase 1 (partial_stats) or 2 (full_stats) of the optimizer
   * over the first *rows->count rows. Enqueued on `stream`. */
  int32_t (*emb_row_phase_counted)(int32_t device, const shardrec_plugin_optimizer_t* config,
                                   int64_t step, int32_t full_dim,
                                   const shardrec_plugin_shard_t* shard,
                                   const shardrec_plugin_counted_rows_t* rows, float* partial_stats,
                                   const float* full_stats, int32_t phase, void* stream,
                                   shardrec_plugin_status_t* status);

  /* ---- A backward gated on the device by its agreed verdict, so no host waits for the verdict
   * before the updates are queued. ---- */

  /* kernels::cuda::GroupRowsGated: emb_group_rows, then, when *gate (device memory, may be NULL)
   * is not 0, the grouping emptied (no unique row, no hot chunk), so the emb_fused_backward /
   * emb_aggregate_grads that follow on the same workspace change nothing; the unique-row count
   * (0 when shut) copied to num_unique_host (pinned host memory, may be NULL) and to
   * num_unique_dev (device memory, may be NULL) when the stream gets there. Enqueued on
   * `stream`. */
  int32_t (*emb_group_rows_gated)(int32_t device, const shardrec_plugin_runs_t* runs,
                                  void* workspace, size_t workspace_bytes, int64_t* num_unique_host,
                                  int64_t* num_unique_dev, const int64_t* gate, void* stream,
                                  shardrec_plugin_status_t* status);
  /* kernels::cuda::SumSources: a column shard's full row statistics from its own partial ones and
   * its siblings', over the first *sum->count rows (a count only the device knows). Enqueued on
   * `stream`. */
  int32_t (*emb_sum_sources)(int32_t device, const shardrec_plugin_sum_sources_t* sum, void* stream,
                             shardrec_plugin_status_t* status);
  /* host_alloc with `device` current for the call (restored after): the pinned block belongs to
   * that device's context, and a thread with no current device does not create one on device 0.
   * Free it with host_free. A runtime entry: every plugin serves it. */
  int32_t (*host_alloc_on)(int32_t device, size_t bytes, void** out,
                           shardrec_plugin_status_t* status);
} shardrec_cuda_plugin_table_t;

/* Exported by the plugin under the two symbol names above. The table getter returns NULL when
 * the plugin does not speak `abi_version`. */
typedef uint32_t (*shardrec_cuda_plugin_abi_version_fn)(void);
typedef const shardrec_cuda_plugin_table_t* (*shardrec_cuda_plugin_table_fn)(uint32_t abi_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHARDREC_IMPL_CORE_PLUGIN_ABI_H_ */
