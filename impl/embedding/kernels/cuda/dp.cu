// CUDA twin of the data-parallel tables' backward (simt/dp_body.h, the code the CPU tests run
// against SparseUpdater::ApplyDataParallel's loop): the accumulation of every table's dense
// gradient and, after its all-reduce, the compaction of the touched rows, on the pipeline's
// executor (exec_cuda.cuh: warps, CUB's sort, run-length encoding and scans) over a workspace
// carved once per call from the caller's buffer. Everything is enqueued on the context's stream;
// nothing synchronises and nothing allocates.
//
// Not shared with the CPU: the workspace's CUB part (its size query), argument checks.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "impl/embedding/kernels/cuda/exec_cuda.cuh"
#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/embedding/kernels/simt/dp_body.h"

namespace shardrec::embedding::kernels::cuda {

namespace {

Status Carve(int64_t max_ids, int64_t num_keys, void* base, simt_body::DpScratch* s, void** temp,
             size_t* temp_bytes, size_t* total) {
  if (max_ids < 0 || num_keys < 0) return Status::InvalidArgument("data-parallel: negative sizes");
  // CUB counts items in int, and a position travels as 32 bits.
  if (max_ids >= INT_MAX || num_keys >= INT_MAX)
    return Status::InvalidArgument("data-parallel: ", max_ids, " ids over ", num_keys,
                                   " rows, at most ", INT_MAX - 1, " each");
  SR_RETURN_IF_ERROR(CubTempBytes(max_ids > num_keys ? max_ids : num_keys, temp_bytes));
  *total = simt_body::CarveDp(static_cast<uint8_t*>(base), max_ids, num_keys, *temp_bytes, s, temp);
  return Status::Ok();
}

}  // namespace

Status DpWorkspaceBytes(const ExecContext& ctx, int64_t max_ids, int64_t num_keys, size_t* bytes) {
  ScopedDevice dev(ctx.device().index);
  if (!dev.ok()) return Status::Cuda("cannot select ", ctx.device().ToString());
  simt_body::DpScratch s;
  void* temp = nullptr;
  size_t temp_bytes = 0;
  return Carve(max_ids, num_keys, nullptr, &s, &temp, &temp_bytes, bytes);
}

Status DpStep(const ExecContext& ctx, const simt_body::DpParams& p, int32_t phase, void* workspace,
              size_t workspace_bytes) {
  if (!ctx.is_cuda())
    return Status::Unsupported("data-parallel: the CUDA kernel got a ", ctx.device().ToString(),
                               " context");
  if (p.num_ids < 0 || p.num_tables < 0 || p.num_pairs < 0 || p.dense_floats < 0)
    return Status::InvalidArgument("data-parallel: negative sizes");
  if (phase != simt_body::kDpAccumulate && phase != simt_body::kDpCompact)
    return Status::InvalidArgument("data-parallel phase ", phase, " is unknown");
  ScopedDevice dev(ctx.device().index);
  if (!dev.ok()) return Status::Cuda("cannot select ", ctx.device().ToString());
  const int64_t num_keys = p.num_keys;
  simt_body::DpScratch s;
  void* temp = nullptr;
  size_t temp_bytes = 0, total = 0;
  SR_RETURN_IF_ERROR(Carve(p.num_ids, num_keys, workspace, &s, &temp, &temp_bytes, &total));
  if (workspace == nullptr || workspace_bytes < total)
    return Status::InvalidArgument("data-parallel: workspace of ", workspace_bytes, " bytes, ",
                                   total, " needed for ", p.num_ids, " ids over ", num_keys,
                                   " rows");
  CudaExec ex(static_cast<cudaStream_t>(ctx.stream()), temp, temp_bytes);
  if (phase == simt_body::kDpAccumulate) {
    simt_body::DpAccumulateSteps(ex, p, s);
  } else {
    simt_body::DpCompactSteps(ex, p, s);
  }
  return ex.status();
}

}  // namespace shardrec::embedding::kernels::cuda
