// Device helpers of the GPU benchmarks (embedding_gpu_bench.cc): filling tables with hash-random
// values on the device (a 15 GB table would take minutes to upload), and the random-row gather
// roof BW_gather (performance-anchors.md section 7.0): each warp copies one uniformly random
// 512-byte row of a large buffer to a dense output, 16-byte loads, so bytes read + written over
// time is the rate at which this GPU can move scattered rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "tests/bench/gpu_bench_kernels.h"

namespace shardrec::bench {
namespace {

__device__ __forceinline__ uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Uniform in [-1, 1) from the hash of (seed, i).
__device__ __forceinline__ float Uniform(uint64_t seed, uint64_t i) {
  return static_cast<float>(Mix(seed * 0x9e3779b97f4a7c15ull + i) >> 40) * (2.0f / 16777216.0f) -
         1.0f;
}

__global__ void FillF32(float* p, uint64_t n, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x)
    p[i] = Uniform(seed, i);
}

__global__ void FillHalf(uint16_t* p, uint64_t n, uint64_t seed, bool bf16) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const float v = Uniform(seed, i);
    p[i] =
        bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
  }
}

__global__ void GatherRows(const float4* __restrict__ in, uint64_t rows, float4* __restrict__ out,
                           uint64_t n, uint64_t seed) {
  const uint64_t warp = (blockIdx.x * uint64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  const uint64_t warps = uint64_t{gridDim.x} * blockDim.x / 32;
  for (uint64_t i = warp; i < n; i += warps) {
    const uint64_t r = Mix(seed + i) % rows;
    out[i * 32 + lane] = in[r * 32 + lane];
  }
}

}  // namespace

cudaError_t FillRandom(void* p, uint64_t elems, int bits, bool bf16, uint64_t seed,
                       cudaStream_t stream) {
  if (bits == 32) {
    FillF32<<<4096, 256, 0, stream>>>(static_cast<float*>(p), elems, seed);
  } else {
    FillHalf<<<4096, 256, 0, stream>>>(static_cast<uint16_t*>(p), elems, seed, bf16);
  }
  return cudaGetLastError();
}

cudaError_t GatherRoof(const void* table, uint64_t rows, void* out, uint64_t n, uint64_t seed,
                       cudaStream_t stream) {
  GatherRows<<<132 * 16, 256, 0, stream>>>(static_cast<const float4*>(table), rows,
                                           static_cast<float4*>(out), n, seed);
  return cudaGetLastError();
}

}  // namespace shardrec::bench
