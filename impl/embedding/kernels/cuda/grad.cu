// CUDA twins of a backward's sample side when the output gradient is in device memory
// (simt/grad_body.h, the code the CPU tests run against CheckGradFinite and PackGradients): the
// non-finite check one thread per element, the packing one warp per returned row. Everything is
// enqueued on the context's stream; nothing synchronises and nothing allocates.
//
// Not shared with the CPU: the executors (thread_exec.cuh, exec_cuda.cuh), argument checks.
#include <cuda_runtime.h>

#include <cstdint>

#include "impl/embedding/kernels/cuda/exec_cuda.cuh"
#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/embedding/kernels/cuda/thread_exec.cuh"
#include "impl/embedding/kernels/simt/grad_body.h"

namespace shardrec::embedding::kernels::cuda {

namespace {

struct PackOp {
  simt_body::PackParams p;
  template <class Warp>
  __device__ void operator()(Warp& w, int64_t item) const {
    simt_body::PackItem(w, p, item);
  }
};

}  // namespace

Status CheckFinite(const ExecContext& ctx, const simt_body::FiniteParams& p) {
  if (p.n < 0) return Status::InvalidArgument("CheckFinite: negative size");
  ScopedDevice dev(ctx.device().index);
  if (!dev.ok()) return Status::Cuda("cannot select ", ctx.device().ToString());
  ThreadExec ex(static_cast<cudaStream_t>(ctx.stream()), nullptr, 0);
  simt_body::FiniteSteps(ex, p);
  return ex.status();
}

Status PackGradients(const ExecContext& ctx, const simt_body::PackParams& p, int64_t rows) {
  if (p.num_jobs < 0 || rows < 0 || p.stride < 0)
    return Status::InvalidArgument("PackGradients: negative sizes");
  if (rows == 0) return Status::Ok();
  ScopedDevice dev(ctx.device().index);
  if (!dev.ok()) return Status::Cuda("cannot select ", ctx.device().ToString());
  CudaExec ex(static_cast<cudaStream_t>(ctx.stream()), nullptr, 0);
  ex.Warps(rows, PackOp{p});
  return ex.status();
}

}  // namespace shardrec::embedding::kernels::cuda
