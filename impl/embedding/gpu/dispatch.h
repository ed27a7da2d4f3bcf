// The CUDA twins of the embedding kernels (cuda/kernels_cuda.h) as libshardrec.so calls them:
// CUDA-free functions with the twins' arguments that marshal them into the plain-C structs of the
// plugin's table (plugin_structs.h) and call its emb_* entries (impl/core/plugin_abi.h). The
// contracts, stream behaviour and numerics are the twins'; the differences are the ones a
// dlopen'ed plugin brings: the size queries return a Status (the plugin may be missing), and
// ReadStatus is bounded by a timeout.
//
// Errors, besides the twins' own: kInvalidArgument for a host context; those of
// core::GetCudaPlugin when the plugin is missing or of another build; kUnsupported naming the
// plugin and the entry when it serves no embedding kernels (a dense-only test double). Thread-safe
// as the twins are (calls on one stream are ordered by it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/embedding/kernels/device_runs.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/simt/dp_body.h"
#include "impl/embedding/kernels/simt/grad_body.h"
#include "impl/embedding/kernels/simt/route_body.h"
#include "impl/embedding/kernels/simt/stats_body.h"
#include "impl/embedding/kernels/simt/unpack_body.h"
#include "impl/optim/optimizer.h"

namespace shardrec::embedding::kernels::device {

// kOk when the loaded plugin serves the embedding entries (the checks of every call below).
Status CheckPlugin();

// *bytes = size of the device status block (zero bytes are its clear state).
Status StatusBytes(const ExecContext& ctx, size_t* bytes);

// Waits at most timeout_ms (> 0) for the work queued on ctx's stream (kTimeout after that), then
// reads and clears the status block: kInvalidArgument prefixed with `what` naming the first row
// outside its shard. A null block is kOk.
Status ReadStatus(const ExecContext& ctx, void* status_block, const char* what, int64_t timeout_ms);

Status Lookup(const ExecContext& ctx, std::span<const LookupJob> jobs, void* status_block);

Status BackwardWorkspaceBytes(const ExecContext& ctx, int64_t num_ids, int32_t cols,
                              int num_row_stats, size_t* bytes);

Status GroupRows(const ExecContext& ctx, const DeviceRuns& runs, void* workspace,
                 size_t workspace_bytes, int64_t* num_unique);

Status AggregateGrads(const ExecContext& ctx, const DeviceRuns& runs, const float* grads,
                      int64_t grad_stride, int32_t cols, float scale, void* workspace,
                      int64_t* unique_rows, float* row_grads);

Status FusedBackward(const ExecContext& ctx, const DeviceRuns& runs, const float* grads,
                     int64_t grad_stride, float scale, const optim::OptimizerConfig& config,
                     int64_t step, int32_t full_dim, optim::ShardParams& shard, void* workspace);

Status PartialRowStats(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                       optim::ShardParams& shard, const optim::RowUpdate& update,
                       float* partial_stats);

Status Apply(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
             int32_t full_dim, optim::ShardParams& shard, const optim::RowUpdate& update,
             const float* full_stats);

// kernels::cuda::DivideMeans.
Status DivideMeans(const ExecContext& ctx, float* out, int64_t rows, int64_t stride,
                   std::span<const MeanJob> jobs);

// The device input distribution (kernels::cuda::RouteTempBytes / RouteCount / RouteFill).
Status RouteTempBytes(const ExecContext& ctx, int64_t max_items, size_t* bytes);
Status RouteCount(const ExecContext& ctx, const simt_body::RouteParams& params, void* temp,
                  size_t temp_bytes);
Status RouteFill(const ExecContext& ctx, const simt_body::RouteParams& params, void* temp,
                 size_t temp_bytes);

// kernels::cuda::Unpack (the owner side of an input distribution whose ids travelled between
// device buffers; scratch sized by RouteTempBytes).
Status Unpack(const ExecContext& ctx, const simt_body::UnpackParams& params, void* temp,
              size_t temp_bytes);

// A backward with the output gradient in device memory (kernels::cuda::CheckFinite /
// PackGradients), and the ordering of `waiter`'s later work after `waitee`'s queued work without
// a host wait (the plugin's stream_wait_stream).
Status CheckFinite(const ExecContext& ctx, const simt_body::FiniteParams& params);
Status PackGradients(const ExecContext& ctx, const simt_body::PackParams& params, int64_t rows);
Status StreamWaitStream(int device, Stream waiter, Stream waitee);

// The data-parallel tables' backward on the device and the optimizer over counted row lists
// (kernels::cuda::DpWorkspaceBytes / DpStep / RowPhaseCounted).
Status DpWorkspaceBytes(const ExecContext& ctx, int64_t max_ids, int64_t num_keys, size_t* bytes);
Status DpStep(const ExecContext& ctx, const simt_body::DpParams& params, int32_t phase,
              void* workspace, size_t workspace_bytes);
Status RowPhaseCounted(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                       int32_t full_dim, optim::ShardParams& shard, const CountedRows& rows,
                       float* partial_stats, const float* full_stats, int phase);

// kernels::cuda::GroupRowsGated (a backward gated on the device by its agreed verdict).
Status GroupRowsGated(const ExecContext& ctx, const DeviceRuns& runs, void* workspace,
                      size_t workspace_bytes, int64_t* num_unique, int64_t* num_unique_dev,
                      const int64_t* gate);
// kernels::cuda::SumSources.
Status SumSources(const ExecContext& ctx, const simt_body::SumSourcesParams& params);

}  // namespace shardrec::embedding::kernels::device
