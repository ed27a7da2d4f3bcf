// A linear layer on a CUDA device, through the plugin's cuBLASLt entries (plugin_abi.h
// linear_forward / linear_backward). CUDA-free: libshardrec reaches the GPU only through the
// plugin table. Every pointer is device memory on `device`; the calls enqueue on `stream` and
// return without waiting.
#pragma once

#include <cstdint>

#include "impl/core/device.h"
#include "impl/core/plugin_abi.h"
#include "impl/core/status.h"
#include "impl/dense/linear.h"
#include "impl/dense/lt_plan.h"

namespace shardrec::dense {

// The plugin table when it can run dense layers: kNoDevice without plugin / driver / device,
// kUnsupported for a plugin built before the dense entries.
Status DenseCudaTable(const shardrec_cuda_plugin_table_t** out);

// y = act(x w^T + b). `aux` (ReLU layers; lt::ReluAuxLayout(out, batch).bytes) receives the
// ReLU mask; *aux_written says whether it did (see plugin_abi.h).
Status DeviceLinearForward(const Device& device, Stream stream, const LinearShape& s, lt::Math math,
                           const float* w, const float* b, const float* x, int64_t batch, float* y,
                           void* aux, bool* aux_written);

// As LinearBackward in linear.h (dw, db accumulate; dx may be null) with two device-path
// additions: `input_act` == ReLU applies the input layer's derivative to dx (from input_aux
// when not null, else from x > 0), and `dy_is_dz` says dy already carries this layer's
// activation derivative.
Status DeviceLinearBackward(const Device& device, Stream stream, const LinearShape& s,
                            lt::Math math, Activation input_act, bool dy_is_dz, const float* w,
                            const float* x, const float* y, const float* dy, const void* input_aux,
                            int64_t batch, float* dw, float* db, float* dx);

}  // namespace shardrec::dense
