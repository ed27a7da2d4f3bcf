// Grid-stride loops: these run once per layer per step on activations of batch x width
// elements, so they are bandwidth-bound and need nothing cleverer. No shared memory, no local
// arrays (the ptxas gate refuses spills and local memory).
#include <cuda_bf16.h>

#include "impl/cuda_plugin/lt_kernels.h"

namespace shardrec::cuda_plugin::lt_kernels {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

__global__ void SigmoidForwardKernel(float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = 1.0f / (1.0f + expf(-y[i]));
  }
}

__global__ void SigmoidBackwardKernel(const float* dy, const float* y, float* dz, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = y[i];
    dz[i] = dy[i] * (v * (1.0f - v));
  }
}

__global__ void BiasAddKernel(float* y, const float* b, int64_t rows, int64_t cols, bool relu) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = y[i] + b[i % cols];
    y[i] = relu && !(v > 0.0f) ? 0.0f : v;
  }
}

__global__ void ReluBackwardKernel(const float* dy, const float* mask, float* dz, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dz[i] = mask[i] > 0.0f ? dy[i] : 0.0f;
  }
}

__global__ void BiasGradKernel(const float* dz, int64_t rows, int64_t cols, float* db) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * blockDim.x) {
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r) sum += dz[r * cols + c];
    db[c] += sum;
  }
}

__global__ void AccumulateKernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] += src[i];
  }
}

__global__ void ToBf16Kernel(const float* src, __nv_bfloat16* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = __float2bfloat16_rn(src[i]);
  }
}

}  // namespace

cudaError_t SigmoidForward(float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  SigmoidForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(y, n);
  return cudaGetLastError();
}

cudaError_t SigmoidBackward(const float* dy, const float* y, float* dz, int64_t n,
                            cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  SigmoidBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, y, dz, n);
  return cudaGetLastError();
}

cudaError_t BiasAdd(float* y, const float* b, int64_t rows, int64_t cols, bool relu,
                    cudaStream_t stream) {
  if (rows * cols <= 0) return cudaSuccess;
  BiasAddKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(y, b, rows, cols, relu);
  return cudaGetLastError();
}

cudaError_t ReluBackward(const float* dy, const float* mask, float* dz, int64_t n,
                         cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, mask, dz, n);
  return cudaGetLastError();
}

cudaError_t BiasGrad(const float* dz, int64_t rows, int64_t cols, float* db, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  BiasGradKernel<<<Blocks(cols), kThreads, 0, stream>>>(dz, rows, cols, db);
  return cudaGetLastError();
}

cudaError_t Accumulate(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  AccumulateKernel<<<Blocks(n), kThreads, 0, stream>>>(dst, src, n);
  return cudaGetLastError();
}

cudaError_t ToBf16(const float* src, void* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ToBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(src, static_cast<__nv_bfloat16*>(dst), n);
  return cudaGetLastError();
}

}  // namespace shardrec::cuda_plugin::lt_kernels
