// Executes impl/dense/lt_plan.h's plans with cuBLASLt: one cublasLt handle per device, matmul
// descriptors, layouts and the heuristic's algorithm cached per GEMM shape, and per (device,
// stream) scratch (workspace, bf16 input copies, dz, bias-gradient scratch) grown
// stream-ordered with cudaMallocAsync. When the heuristic has no algorithm for a fused epilogue
// the plan is made again without it and the lt_kernels fallbacks run (lt_plan.h's Support).
//
// Thread-safety: calls are serialised by one mutex per process (they only enqueue work), which
// also protects the descriptors whose bias / aux pointers are set per call.
#pragma once

#include <cuda_runtime_api.h>

#include "impl/core/plugin_abi.h"
#include "impl/core/status.h"

namespace shardrec::cuda_plugin::lt {

// The contracts of the table entries linear_forward / linear_backward (plugin_abi.h).
Status LinearForward(int device, const shardrec_plugin_linear_t& args, const float* w,
                     const float* b, const float* x, float* y, void* aux, int32_t* aux_written,
                     cudaStream_t stream);
Status LinearBackward(int device, const shardrec_plugin_linear_t& args, const float* w,
                      const float* x, const float* y, const float* dy, const void* input_aux,
                      float* dw, float* db, float* dx, cudaStream_t stream);

}  // namespace shardrec::cuda_plugin::lt
