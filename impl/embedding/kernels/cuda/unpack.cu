// CUDA twin of the device input distribution's unpacking (impl/embedding/gpu/input.h): the
// steps of simt/unpack_body.h (the code the CPU tests run against UnpackInput) on the device, one
// thread per item, with CUB's exclusive scan in the caller's scratch (sized by RouteTempBytes, the
// same scan). Everything is enqueued on the context's stream; nothing synchronises and nothing
// allocates.
//
// Not shared with the CPU: the executor (thread_exec.cuh), the scan-size check.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/embedding/kernels/cuda/thread_exec.cuh"
#include "impl/embedding/kernels/simt/unpack_body.h"

namespace shardrec::embedding::kernels::cuda {

Status Unpack(const ExecContext& ctx, const simt_body::UnpackParams& p, void* temp,
              size_t temp_bytes) {
  if (p.num_runs < 0 || p.num_cells < 0) return Status::InvalidArgument("unpack: negative sizes");
  // CUB counts items in int.
  if (p.num_cells + 1 > INT_MAX)
    return Status::InvalidArgument("unpack: ", p.num_cells + 1, " scan items, at most ", INT_MAX);
  ThreadExec ex(static_cast<cudaStream_t>(ctx.stream()), temp, temp_bytes);
  simt_body::UnpackSteps(ex, p);
  return ex.status();
}

}  // namespace shardrec::embedding::kernels::cuda
