// CUDA twin of DivideMeans (output_dist.h) for a pooled output combined on the device: every MEAN
// pair's columns in one launch of MeanItem (simt/mean_body.h, the code the CPU tests run).
//
// Not shared with the CPU: the job table is a kernel parameter (kMaxMeanJobs jobs per launch),
// the launch configuration (exec_cuda.cuh).
#include <cuda_runtime.h>

#include <memory>

#include "impl/embedding/kernels/cuda/exec_cuda.cuh"
#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/embedding/kernels/simt/mean_body.h"

namespace shardrec::embedding::kernels::cuda {

namespace {

struct MeanOp {
  simt_body::MeanParams p;
  template <class Warp>
  __device__ void operator()(Warp& w, int64_t item) const {
    simt_body::MeanItem(w, p, item);
  }
};

}  // namespace

Status DivideMeans(const ExecContext& ctx, float* out, int64_t rows, int64_t stride,
                   std::span<const MeanJob> jobs) {
  if (!ctx.is_cuda())
    return Status::Unsupported("DivideMeans: the CUDA kernel got a ", ctx.device().ToString(),
                               " context");
  if (rows < 0 || stride < 0) return Status::InvalidArgument("DivideMeans: negative sizes");
  ScopedDevice dev(ctx.device().index);
  if (!dev.ok()) return Status::Cuda("cannot select ", ctx.device().ToString());
  CudaExec ex(static_cast<cudaStream_t>(ctx.stream()), nullptr, 0);
  auto op = std::make_unique<MeanOp>();
  for (size_t first = 0; first < jobs.size(); first += simt_body::kMaxMeanJobs) {
    simt_body::MeanParams& p = op->p;
    p.out = out;
    p.rows = rows;
    p.stride = stride;
    p.num_jobs = 0;
    for (size_t j = first; j < jobs.size() && j < first + simt_body::kMaxMeanJobs; ++j) {
      if (jobs[j].col < 0 || jobs[j].cols < 0 || jobs[j].col + jobs[j].cols > stride)
        return Status::InvalidArgument("DivideMeans: columns [", jobs[j].col, ", ",
                                       jobs[j].col + jobs[j].cols, ") outside rows of ", stride);
      p.jobs[p.num_jobs++] = simt_body::MeanJobDesc{jobs[j].col, jobs[j].cols, jobs[j].div};
    }
    ex.Warps(static_cast<int64_t>(p.num_jobs) * rows, *op);
  }
  return ex.status();
}

}  // namespace shardrec::embedding::kernels::cuda
