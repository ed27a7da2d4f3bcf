// The elementwise pieces around the cuBLASLt GEMMs of a linear layer (lt_plan.h's Kernel values):
// the sigmoid, the fp32 -> bf16 input copies, and the fallbacks for epilogues cuBLASLt did not
// offer. Each launches on `stream` and returns the launch error (cudaSuccess when enqueued).
// Layouts are row-major as in impl/dense/linear.h: [rows = batch, cols = out].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardrec::cuda_plugin::lt_kernels {

// y = 1 / (1 + exp(-y)), n elements, in place.
cudaError_t SigmoidForward(float* y, int64_t n, cudaStream_t stream);
// dz = dy * y * (1 - y); dz may alias dy.
cudaError_t SigmoidBackward(const float* dy, const float* y, float* dz, int64_t n,
                            cudaStream_t stream);
// y[r, c] += b[c]; with relu, then y = max(0, y).
cudaError_t BiasAdd(float* y, const float* b, int64_t rows, int64_t cols, bool relu,
                    cudaStream_t stream);
// dz = mask > 0 ? dy : 0 (mask is the ReLU layer's output); dz may alias dy.
cudaError_t ReluBackward(const float* dy, const float* mask, float* dz, int64_t n,
                         cudaStream_t stream);
// db[c] += sum over r of dz[r, c], rows summed in order (one thread per column: deterministic).
cudaError_t BiasGrad(const float* dz, int64_t rows, int64_t cols, float* db, cudaStream_t stream);
// dst += src, n elements.
cudaError_t Accumulate(float* dst, const float* src, int64_t n, cudaStream_t stream);
// dst = bf16(src), round to nearest even; dst holds n 16-bit values.
cudaError_t ToBf16(const float* src, void* dst, int64_t n, cudaStream_t stream);

}  // namespace shardrec::cuda_plugin::lt_kernels
