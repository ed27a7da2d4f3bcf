// The fake plugin's embedding entries after the device check: every device-side pointer an
// entry receives is checked against the fake's live device blocks (with the extent the kernel
// would touch), then the arguments are unmarshalled (plugin_structs.h) and the HOST kernel runs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/plugin_abi.h"
#include "impl/core/status.h"
#include "impl/embedding/kernels/simt/device_status.h"
#include "impl/optim/optimizer.h"
#include "tests/support/fake_plugins/fake_device_memory.h"

namespace shardrec::fake {

// Rows outside their shard are reported into `block` (the device twin's rule: the position in
// the job's id array, smallest first) and left out.
Status RunLookup(const DeviceMemory& mem, const shardrec_plugin_lookup_job_t* jobs, size_t num_jobs,
                 embedding::kernels::simt_body::DeviceStatus* block);

Status RunGroupRows(const DeviceMemory& mem, const shardrec_plugin_runs_t* runs, void* ws,
                    size_t ws_bytes, int64_t* num_unique);

// emb_group_rows_gated: RunGroupRows, then a gate (a live device word) that is not 0 empties the
// host twin's grouping (its unique-row count becomes 0, so the aggregation or fused update that
// follows on the workspace changes nothing); the count also goes to num_unique_dev (a live device
// word) when given.
Status RunGroupRowsGated(const DeviceMemory& mem, const shardrec_plugin_runs_t* runs, void* ws,
                         size_t ws_bytes, int64_t* num_unique, int64_t* num_unique_dev,
                         const int64_t* gate);

Status RunAggregateGrads(const DeviceMemory& mem, const shardrec_plugin_runs_t* runs,
                         const float* grads, int64_t grad_stride, int32_t cols, float scale,
                         void* ws, int64_t* unique_rows, float* row_grads);

Status RunFusedBackward(const DeviceMemory& mem, const shardrec_plugin_runs_t* runs,
                        const float* grads, int64_t grad_stride, float scale,
                        const shardrec_plugin_optimizer_t* config, int64_t step, int32_t full_dim,
                        const shardrec_plugin_shard_t* shard, void* ws);

// phase 1: optim::PartialRowStats into `partial`; phase 2: optim::Apply with `full`.
Status RunRowPhase(const DeviceMemory& mem, const shardrec_plugin_optimizer_t* config, int64_t step,
                   int32_t full_dim, const shardrec_plugin_shard_t* shard,
                   const shardrec_plugin_row_update_t* update, float* partial, const float* full,
                   int phase);

// emb_route: every array of `route` checked against the live blocks with the extent the phase
// touches (the data-dependent ones from the counts the count phase gathered, which the fake can
// read), then the phase's steps on the host executor (the route body the device runs).
Status RunRoute(const DeviceMemory& mem, const shardrec_plugin_route_t* route, int32_t phase,
                void* temp, size_t temp_bytes);

// emb_unpack: the run table, every run's lengths and offsets, the cell table and the scan arrays
// checked against the live blocks, then the unpack steps on the host executor (the body the
// device runs).
Status RunUnpack(const DeviceMemory& mem, const shardrec_plugin_unpack_t* unpack, void* temp,
                 size_t temp_bytes);

// The optimizer config and shard of an entry, unmarshalled and checked (weights and every state
// array inside live blocks).
Status CheckShardArgs(const DeviceMemory& mem, const shardrec_plugin_optimizer_t* config,
                      const shardrec_plugin_shard_t* shard, optim::OptimizerConfig* c,
                      optim::ShardParams* s);

// emb_dp_workspace_bytes / emb_dp_step (fake_dp_checks.cc): the workspace the host executor's
// carving takes; every array of `dp` checked against the live blocks with the extent the phase
// touches (the data-dependent ones, ids' rows and output rows, read from the fake's memory),
// then the phase's steps (simt/dp_body.h) on the host executor.
Status RunDpWorkspaceBytes(int64_t max_ids, int64_t num_keys, size_t* bytes);
Status RunDpStep(const DeviceMemory& mem, const shardrec_plugin_dp_t* dp, int32_t phase, void* ws,
                 size_t ws_bytes);

// emb_row_phase_counted: the count read from the fake's memory (it must lie in a live block), the
// rows and gradients checked up to max_rows, the first count rows inside the shard, then the
// single-source row phase (simt/row_phase_body.h) on host warps.
Status RunRowPhaseCounted(const DeviceMemory& mem, const shardrec_plugin_optimizer_t* config,
                          int64_t step, int32_t full_dim, const shardrec_plugin_shard_t* shard,
                          const shardrec_plugin_counted_rows_t* rows, float* partial,
                          const float* full, int32_t phase);

}  // namespace shardrec::fake
