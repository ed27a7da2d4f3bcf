// CUDA twins of the backward kernels (kernels.h, optim::PartialRowStats / Apply): the steps of
// simt/pipeline.h on the CUDA executor, over a workspace carved once per call from the caller's
// buffer. The per-id, per-row and per-lane work is the single-source code the CPU tests run
// against backward_cpu.cc and apply.cc.
//
// Not shared with the CPU: the workspace carving, CUB's device-wide steps, the hot-row kernel's
// barrier (exec_cuda.cuh), the copy of the unique-row count to the host.
#include <cuda_runtime.h>

#include <vector>

#include "impl/embedding/kernels/cuda/exec_cuda.cuh"
#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/embedding/kernels/simt/pipeline.h"
#include "impl/embedding/kernels/simt/row_phase_body.h"

namespace shardrec::embedding::kernels::cuda {

namespace {

using simt_body::BackwardArrays;

size_t Align(size_t n) { return (n + 255) & ~size_t{255}; }

struct Carve {
  BackwardArrays a;
  void* temp = nullptr;
  size_t temp_bytes = 0;
  size_t total = 0;
};

// The workspace layout for n ids; with `base` null only the size is computed.
Status Layout(int64_t n, int32_t cols, char* base, Carve* out) {
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base != nullptr ? base + off : nullptr;
    off = Align(off + bytes);
    return p;
  };
  const size_t un = static_cast<size_t>(n), uc = static_cast<size_t>(cols < 1 ? 1 : cols);
  BackwardArrays& a = out->a;
  a.n = n;
  a.cols = cols;
  a.status = reinterpret_cast<simt_body::DeviceStatus*>(take(sizeof(simt_body::DeviceStatus)));
  a.num_unique = reinterpret_cast<int64_t*>(take(8));
  a.keys = reinterpret_cast<uint64_t*>(take(8 * un));
  a.keys_sorted = reinterpret_cast<uint64_t*>(take(8 * un));
  a.unique = reinterpret_cast<uint64_t*>(take(8 * un));
  a.pos = reinterpret_cast<uint32_t*>(take(4 * un));
  a.pos_sorted = reinterpret_cast<uint32_t*>(take(4 * un));
  a.grad_off = reinterpret_cast<int64_t*>(take(8 * un));
  a.factor = reinterpret_cast<float*>(take(4 * un));
  a.counts = reinterpret_cast<int64_t*>(take(8 * (un + 1)));
  a.seg = reinterpret_cast<int64_t*>(take(8 * (un + 1)));
  a.hot = reinterpret_cast<int64_t*>(take(8 * (un + 1)));
  a.hot_off = reinterpret_cast<int64_t*>(take(8 * (un + 1)));
  a.partials =
      reinterpret_cast<float*>(take(4 * static_cast<size_t>(simt_body::MaxHotChunks(n)) * uc));
  a.scratch = reinterpret_cast<float*>(take(4 * static_cast<size_t>(MaxTeams(cols)) * uc));
  SR_RETURN_IF_ERROR(CubTempBytes(n, &out->temp_bytes));
  out->temp = take(out->temp_bytes);
  out->total = off;
  return Status::Ok();
}

// The run tables are kernel parameters of at most kMaxRuns runs each: any number of runs goes
// as several launches of the per-id step (simt/pipeline.h RunSlices).
Status MakeRunSlices(const DeviceRuns& dr, simt_body::RunSlices* rs, int64_t* n) {
  if (dr.num_ids.size() != dr.runs.size())
    return Status::InvalidArgument("backward: ", dr.num_ids.size(), " id counts for ",
                                   dr.runs.size(), " runs");
  for (size_t r = 0; r < dr.runs.size(); ++r) {
    const BagRun& b = dr.runs[r];
    rs->Add(simt_body::RunTable::Run{b.offsets, b.rows, b.weights, b.io_offset, b.num_bags},
            dr.num_ids[r]);
  }
  *n = rs->num_ids();
  if (*n >= (int64_t{1} << 31))
    return Status::InvalidArgument("backward: ", *n, " ids in one call, at most 2^31 - 1");
  return Status::Ok();
}

// Everything a call needs: device selected, run table, workspace carved and checked.
struct Call {
  simt_body::RunSlices rs;
  Carve carve;
  int64_t n = 0;
};

Status Prepare(const ExecContext& ctx, const DeviceRuns& dr, int32_t cols, void* workspace,
               size_t workspace_bytes, Call* c) {
  if (!ctx.is_cuda())
    return Status::Unsupported("backward: the CUDA kernel got a ", ctx.device().ToString(),
                               " context");
  SR_RETURN_IF_ERROR(MakeRunSlices(dr, &c->rs, &c->n));
  SR_RETURN_IF_ERROR(Layout(c->n, cols, static_cast<char*>(workspace), &c->carve));
  if (workspace == nullptr || workspace_bytes < c->carve.total)
    return Status::InvalidArgument("backward: workspace of ", workspace_bytes, " bytes, ",
                                   c->carve.total, " needed for ", c->n, " ids");
  return Status::Ok();
}

// Phase 1 or 2 of the update, one team per row (simt/row_phase_body.h).
struct RowPhaseOp {
  simt_body::RowPhaseParams q;
  template <class Warp>
  __device__ void operator()(Warp& w, int64_t item) const {
    simt_body::RowPhaseItem(w, q, item);
  }
};

// Over max_rows rows, or (count not null) the first *count of them, read on the device.
Status RowPhase(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                int32_t full_dim, optim::ShardParams& shard, const int64_t* rows,
                const float* grads, const int64_t* count, int64_t max_rows, float* stats,
                const float* full, int phase) {
  if (!ctx.is_cuda())
    return Status::Unsupported("optimizer: the CUDA kernel got a ", ctx.device().ToString(),
                               " context");
  SR_RETURN_IF_ERROR(optim::ValidateShard(config, shard));
  const int ns = optim::NumRowStats(config.type);
  if (max_rows <= 0 || (phase == 1 && ns == 0)) return Status::Ok();
  ScopedDevice dev(ctx.device().index);
  CudaExec ex(static_cast<cudaStream_t>(ctx.stream()), nullptr, 0);
  simt_body::RowPhaseParams q;
  q.p = optim::MakeRowParams(config, step, full_dim, shard);
  q.rows = rows;
  q.grads = grads;
  q.stats = stats;
  q.full = full;
  q.count = count;
  q.max_rows = max_rows;
  q.ns = ns;
  q.phase = phase;
  ex.Warps(simt_body::RowPhaseItems(q), RowPhaseOp{q});
  return ex.status();
}

}  // namespace

size_t BackwardWorkspaceBytes(const ExecContext& ctx, int64_t num_ids, int32_t cols,
                              int /*num_row_stats*/) {
  ScopedDevice dev(ctx.device().index);
  Carve c;
  if (!Layout(num_ids, cols, nullptr, &c).ok()) return 0;
  return c.total;
}

Status GroupRowsGated(const ExecContext& ctx, const DeviceRuns& runs, void* workspace,
                      size_t workspace_bytes, int64_t* num_unique, int64_t* num_unique_dev,
                      const int64_t* gate) {
  Call c;
  SR_RETURN_IF_ERROR(Prepare(ctx, runs, 0, workspace, workspace_bytes, &c));
  ScopedDevice dev(ctx.device().index);
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  CudaExec ex(stream, c.carve.temp, c.carve.temp_bytes);
  simt_body::GroupSteps(ex, c.rs, c.carve.a, runs.num_rows);
  simt_body::GateSteps(ex, c.carve.a, gate, num_unique_dev);
  SR_RETURN_IF_ERROR(ex.status());
  if (num_unique != nullptr)
    SR_RETURN_IF_ERROR(CudaError(
        cudaMemcpyAsync(num_unique, c.carve.a.num_unique, 8, cudaMemcpyDeviceToHost, stream),
        "unique-row count copy"));
  return Status::Ok();
}

Status GroupRows(const ExecContext& ctx, const DeviceRuns& runs, void* workspace,
                 size_t workspace_bytes, int64_t* num_unique) {
  return GroupRowsGated(ctx, runs, workspace, workspace_bytes, num_unique, nullptr, nullptr);
}

Status AggregateGrads(const ExecContext& ctx, const DeviceRuns& runs, const float* grads,
                      int64_t grad_stride, int32_t cols, float scale, void* workspace,
                      int64_t* unique_rows, float* row_grads) {
  Call c;
  SR_RETURN_IF_ERROR(Prepare(ctx, runs, cols, workspace, ~size_t{0}, &c));
  ScopedDevice dev(ctx.device().index);
  CudaExec ex(static_cast<cudaStream_t>(ctx.stream()), c.carve.temp, c.carve.temp_bytes);
  simt_body::RowSink sink;
  sink.unique_out = unique_rows;
  sink.grads_out = row_grads;
  simt_body::RowSteps(ex, c.rs, c.carve.a, grads, grad_stride, scale, sink);
  return ex.status();
}

Status FusedBackward(const ExecContext& ctx, const DeviceRuns& runs, const float* grads,
                     int64_t grad_stride, float scale, const optim::OptimizerConfig& config,
                     int64_t step, int32_t full_dim, optim::ShardParams& shard, void* workspace) {
  const int ns = optim::NumRowStats(config.type);
  if (ns != 0 && shard.cols != full_dim)
    return Status::InvalidArgument("FusedBackward: row statistics span column shards");
  SR_RETURN_IF_ERROR(optim::ValidateShard(config, shard));
  Call c;
  SR_RETURN_IF_ERROR(Prepare(ctx, runs, shard.cols, workspace, ~size_t{0}, &c));
  ScopedDevice dev(ctx.device().index);
  CudaExec ex(static_cast<cudaStream_t>(ctx.stream()), c.carve.temp, c.carve.temp_bytes);
  simt_body::RowSink sink;
  sink.fused = true;
  sink.params = optim::MakeRowParams(config, step, full_dim, shard);
  simt_body::RowSteps(ex, c.rs, c.carve.a, grads, grad_stride, scale, sink);
  return ex.status();
}

Status PartialRowStats(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                       optim::ShardParams& shard, const optim::RowUpdate& update,
                       float* partial_stats) {
  return RowPhase(ctx, config, step, shard.cols, shard, update.rows.data(), update.grads, nullptr,
                  static_cast<int64_t>(update.rows.size()), partial_stats, nullptr, 1);
}

Status Apply(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
             int32_t full_dim, optim::ShardParams& shard, const optim::RowUpdate& update,
             const float* full_stats) {
  return RowPhase(ctx, config, step, full_dim, shard, update.rows.data(), update.grads, nullptr,
                  static_cast<int64_t>(update.rows.size()), nullptr, full_stats, 2);
}

Status RowPhaseCounted(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                       int32_t full_dim, optim::ShardParams& shard, const CountedRows& rows,
                       float* partial_stats, const float* full_stats, int phase) {
  if (phase != 1 && phase != 2) return Status::InvalidArgument("row phase ", phase, " is unknown");
  if (rows.count == nullptr) return Status::InvalidArgument("counted rows without a count");
  return RowPhase(ctx, config, step, phase == 1 ? shard.cols : full_dim, shard, rows.rows,
                  rows.grads, rows.count, rows.max_rows, partial_stats, full_stats, phase);
}

}  // namespace shardrec::embedding::kernels::cuda
