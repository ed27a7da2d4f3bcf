// Device helpers of the GPU benchmarks (gpu_bench_kernels.cu). Both only enqueue on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace shardrec::bench {

// Fills `elems` values of fp32 (bits 32), fp16 or bf16 (bits 16) with uniform values in [-1, 1)
// derived from (seed, index).
cudaError_t FillRandom(void* p, uint64_t elems, int bits, bool bf16, uint64_t seed,
                       cudaStream_t stream);

// Copies n uniformly random 512-byte rows of `table` (rows x 512 bytes, 16-byte aligned) to
// `out` (n x 512 bytes), one warp per row; the rows follow from `seed`.
cudaError_t GatherRoof(const void* table, uint64_t rows, void* out, uint64_t n, uint64_t seed,
                       cudaStream_t stream);

}  // namespace shardrec::bench
