// The CUDA twins of the kernels of kernels.h, declared without CUDA types: the same arguments
// through a CUDA ExecContext (device + stream), plus what a device cannot find out without a
// synchronisation (the id count of each run, the shard's row count). Compiled into
// libshardrec_cuda.so (and the GPU tests). libshardrec.so reaches them through the plugin's
// function table (the emb_* entries of impl/core/plugin_abi.h, served by
// impl/cuda_plugin/embedding_entries.cc) with dispatch.h, whose functions mirror these.
//
// Stream behaviour: every call only enqueues work on ctx.stream() and returns; buffers (device
// memory, or host memory the device can read) must stay valid until the stream reaches the work.
// Nothing allocates: the lookup needs no scratch, the backward uses the caller's workspace
// (BackwardWorkspaceBytes, sized once at creation). Errors found on the device (a row outside the
// shard) land in a status block in device memory; ReadStatus turns it into a Status at the step's
// one synchronisation point. Numerics: bit-identical to the CPU twins when built with
// SHARDREC_DETERMINISTIC_FP=ON (device code without FMA contraction), within 1e-6 relative per
// output row otherwise (tests/impl/embedding/kernels/simt_*_test.cc, run on the CPU).
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

namespace shardrec::embedding::kernels::cuda {

// Bytes of the device status block (all-zero bytes are its clear state: memset it once;
// ReadStatus clears it again).
size_t StatusBytes();

// Copies the status block to the host (synchronising ctx's stream), clears it, and returns the
// first error it holds: kInvalidArgument naming the position of the first row outside its shard,
// kCuda for a CUDA error.
Status ReadStatus(const ExecContext& ctx, void* status_block, const char* what);

// Every job of a rank in one launch (kMaxLookupJobs per launch), same results as the CPU twin.
// `status_block` (device memory, may be null) receives out-of-range rows, which are left out.
// Errors: kInvalidArgument for a weight dtype other than fp32/fp16/bf16, kCuda.
Status Lookup(const ExecContext& ctx, std::span<const LookupJob> jobs, void* status_block);

// out ([rows, stride] floats, device memory): each job's columns divided by its row's divisor
// in place, 0 where the divisor is 0 (simt/mean_body.h). Enqueued on ctx's stream.
Status DivideMeans(const ExecContext& ctx, float* out, int64_t rows, int64_t stride,
                   std::span<const MeanJob> jobs);

// One shard's device runs with the counts the host knows (device_runs.h).
using kernels::DeviceRuns;

// Workspace for `num_ids` ids (at most 2^31) of a shard with `cols` columns on ctx's device.
size_t BackwardWorkspaceBytes(const ExecContext& ctx, int64_t num_ids, int32_t cols,
                              int num_row_stats);

// GroupRows' twin: sort, run-length encoding and segments in `workspace` (device memory). When
// `num_unique` is not null the count is copied there when the stream gets to it (pinned host
// memory keeps the copy asynchronous); the following steps read it on the device.
Status GroupRows(const ExecContext& ctx, const DeviceRuns& runs, void* workspace,
                 size_t workspace_bytes, int64_t* num_unique);

// GroupRows, then, when *gate (device memory, may be null) is not 0, the grouping emptied (no
// unique row, no hot chunk: simt/pipeline.h GateSteps), so the AggregateGrads / FusedBackward
// that follow on the same workspace change nothing; the count (0 when shut) also copied to
// num_unique_dev (device memory, may be null).
Status GroupRowsGated(const ExecContext& ctx, const DeviceRuns& runs, void* workspace,
                      size_t workspace_bytes, int64_t* num_unique, int64_t* num_unique_dev,
                      const int64_t* gate);

// AggregateGrads' twin: unique_rows and row_grads (device memory) are sized for num_ids rows; the
// first num_unique are written.
Status AggregateGrads(const ExecContext& ctx, const DeviceRuns& runs, const float* grads,
                      int64_t grad_stride, int32_t cols, float scale, void* workspace,
                      int64_t* unique_rows, float* row_grads);

// FusedBackward's twin (same condition on row statistics); shard buffers in device memory.
Status FusedBackward(const ExecContext& ctx, const DeviceRuns& runs, const float* grads,
                     int64_t grad_stride, float scale, const optim::OptimizerConfig& config,
                     int64_t step, int32_t full_dim, optim::ShardParams& shard, void* workspace);

// The twins of optim::PartialRowStats and optim::Apply for column shards whose statistics travel
// between ranks (rows and grads in device memory, rows.size() known on the host).
Status PartialRowStats(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                       optim::ShardParams& shard, const optim::RowUpdate& update,
                       float* partial_stats);
Status Apply(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
             int32_t full_dim, optim::ShardParams& shard, const optim::RowUpdate& update,
             const float* full_stats);

// The device input distribution (simt/route_body.h; impl/embedding/gpu/route.h drives it):
// RouteTempBytes sizes the scratch of scans over at most max_items items; RouteCount enqueues
// the checks, counts and scans, RouteFill the writing of the messages, both with that scratch.
// Every pointer in `params` is device memory. Errors: kInvalidArgument for more than INT_MAX scan
// items, kCuda.
Status RouteTempBytes(const ExecContext& ctx, int64_t max_items, size_t* bytes);
Status RouteCount(const ExecContext& ctx, const simt_body::RouteParams& params, void* temp,
                  size_t temp_bytes);
Status RouteFill(const ExecContext& ctx, const simt_body::RouteParams& params, void* temp,
                 size_t temp_bytes);

// The owner side of the device input distribution (simt/unpack_body.h; impl/embedding/
// input.h drives it): the received bag lengths become each run's CSR offsets, checked
// against the announced counts (*params.bad). Scratch as for the route's scans (RouteTempBytes
// for num_cells + 1 items); every pointer in `params` is device memory. Errors: kInvalidArgument
// for more than INT_MAX scan items, kCuda.
Status Unpack(const ExecContext& ctx, const simt_body::UnpackParams& params, void* temp,
              size_t temp_bytes);

// A backward's sample side with the output gradient in device memory (simt/grad_body.h):
// CheckFinite finds the first non-finite element (params.result) and writes the verdict word;
// PackGradients writes the gradient message's `rows` rows (params.first_row[num_jobs]). Every
// pointer in `params` is device memory. Errors: kInvalidArgument for negative sizes, kCuda.
Status CheckFinite(const ExecContext& ctx, const simt_body::FiniteParams& params);
Status PackGradients(const ExecContext& ctx, const simt_body::PackParams& params, int64_t rows);

// The optimizer's phase 1 (PartialRowStats, `partial_stats`) or 2 (Apply, `full_stats`) over the
// first *rows.count rows of `rows` (CountedRows: the count is read on the device, the launch is
// sized by rows.max_rows), so a row list whose length only the device knows needs no host read.
// Errors: kInvalidArgument for another phase or a null count, those of PartialRowStats / Apply.
Status RowPhaseCounted(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                       int32_t full_dim, optim::ShardParams& shard, const CountedRows& rows,
                       float* partial_stats, const float* full_stats, int phase);

// The backward of data-parallel tables (simt/dp_body.h): DpWorkspaceBytes sizes the workspace
// for at most `max_ids` ids over `num_keys` table rows; DpStep enqueues phase
// simt_body::kDpAccumulate (the dense gradients from the output gradient, the host's bits) or
// kDpCompact (after the all-reduce: touched rows, scaled gradients, counts) with it. Every pointer
// in `params` is device memory. Errors: kInvalidArgument for negative sizes, more than 2^31 - 1
// ids, a workspace too small or an unknown phase, kCuda.
Status DpWorkspaceBytes(const ExecContext& ctx, int64_t max_ids, int64_t num_keys, size_t* bytes);

// A column shard's full row statistics from its own partial ones and its siblings'
// (simt/stats_body.h): per element of the first *params.count rows, from +0 (or onto dst with
// params.accumulate), the sources added in order. Every pointer is device memory. Errors:
// kInvalidArgument for more than kMaxSumSources sources, negative sizes or no count, kCuda.
Status SumSources(const ExecContext& ctx, const simt_body::SumSourcesParams& params);
Status DpStep(const ExecContext& ctx, const simt_body::DpParams& params, int32_t phase,
              void* workspace, size_t workspace_bytes);

}  // namespace shardrec::embedding::kernels::cuda
