// The CUDA executor of the single-source steps that run one thread per item (simt/route_body.h,
// simt/unpack_body.h): StreamExec's scan and memset, and a launch of one thread per item.
//
// Not shared with the CPU: the launch configuration (256-thread blocks, at most kGridBlocks
// blocks, grid-stride loops over items) and the launch check.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "impl/embedding/kernels/cuda/exec_cuda.cuh"

namespace shardrec::embedding::kernels::cuda {

// One thread per item; the op travels as a __grid_constant__ parameter (its tables are indexed
// at run time, which would otherwise copy it into local memory).
template <class Op>
__global__ void __launch_bounds__(kBlockThreads)
    ThreadKernel(const __grid_constant__ Op op, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride)
    op(i);
}

class ThreadExec : public StreamExec {
 public:
  using StreamExec::StreamExec;

  template <class Op>
  void Threads(int64_t count, const Op& op) {
    if (!status_.ok() || count <= 0) return;
    int64_t blocks = (count + kBlockThreads - 1) / kBlockThreads;
    if (blocks > kGridBlocks) blocks = kGridBlocks;
    ThreadKernel<Op><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream_>>>(op, count);
    Check(cudaGetLastError(), "kernel launch");
  }
};

}  // namespace shardrec::embedding::kernels::cuda
