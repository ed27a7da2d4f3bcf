// Linear layer kernels with a fused activation: y = act(x * W^T + b). Stateless functions over
// caller buffers, so the MLP, the DCN cross layer and a CUDA twin share them.
#pragma once

#include <cstdint>

#include "impl/core/exec.h"
#include "impl/core/status.h"

namespace shardrec::dense {

enum class Activation : int32_t { kNone = 0, kRelu = 1, kSigmoid = 2 };

bool IsKnownActivation(int32_t value);
const char* ActivationName(Activation a);

struct LinearShape {
  int64_t in = 0;
  int64_t out = 0;
  Activation act = Activation::kNone;
};

// y[batch, out] = act(x[batch, in] * w[out, in]^T + b[out]). b may be null (no bias).
Status LinearForward(const ExecContext& ctx, const LinearShape& s, const float* w, const float* b,
                     const float* x, int64_t batch, float* y);

// Given y (the forward output) and dy = dL/dy: dz = dy * act'(y) is written to `dz` (may alias
// dy), dw += dz^T * x, db += column sums of dz (db may be null), and dx = dz * w (dx may be null:
// the first layer of a model needs no input gradient). The activation derivative is taken from
// y, so the pre-activation need not be kept: ReLU' = (y > 0), sigmoid' = y (1 - y).
Status LinearBackward(const ExecContext& ctx, const LinearShape& s, const float* w, const float* x,
                      const float* y, const float* dy, int64_t batch, float* dz, float* dw,
                      float* db, float* dx);

}  // namespace shardrec::dense
