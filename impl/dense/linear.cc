// The bias and the activation are applied in one pass over y after the GEMM (what a cuBLASLt
// epilogue fuses on the GPU); the bias gradient sums columns in row order, so it does not depend
// on the thread count.
#include "impl/dense/linear.h"

#include <cmath>

#include "impl/core/check.h"
#include "impl/dense/gemm.h"

namespace shardrec::dense {

bool IsKnownActivation(int32_t value) { return value >= 0 && value <= 2; }

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kSigmoid:
      return "sigmoid";
  }
  return "unknown";
}

namespace {

float Apply(Activation act, float z) {
  switch (act) {
    case Activation::kRelu:
      return z > 0.0f ? z : 0.0f;
    case Activation::kSigmoid:
      return 1.0f / (1.0f + std::exp(-z));
    case Activation::kNone:
      break;
  }
  return z;
}

float Derivative(Activation act, float y) {
  switch (act) {
    case Activation::kRelu:
      return y > 0.0f ? 1.0f : 0.0f;
    case Activation::kSigmoid:
      return y * (1.0f - y);
    case Activation::kNone:
      break;
  }
  return 1.0f;
}

}  // namespace

Status LinearForward(const ExecContext& ctx, const LinearShape& s, const float* w, const float* b,
                     const float* x, int64_t batch, float* y) {
  SR_RETURN_IF_ERROR(Gemm(ctx, false, true, batch, s.out, s.in, 1.0f, x, w, 0.0f, y));
  ctx.ParallelFor(0, batch, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = y + r * s.out;
      for (int64_t j = 0; j < s.out; ++j) {
        row[j] = Apply(s.act, b != nullptr ? row[j] + b[j] : row[j]);
      }
    }
  });
  return Status::Ok();
}

Status LinearBackward(const ExecContext& ctx, const LinearShape& s, const float* w, const float* x,
                      const float* y, const float* dy, int64_t batch, float* dz, float* dw,
                      float* db, float* dx) {
  const int64_t n = batch * s.out;
  if (s.act == Activation::kNone) {
    if (dz != dy) {
      for (int64_t i = 0; i < n; ++i) dz[i] = dy[i];
    }
  } else {
    for (int64_t i = 0; i < n; ++i) dz[i] = dy[i] * Derivative(s.act, y[i]);
  }
  // dw[out, in] += dz[batch, out]^T * x[batch, in]
  SR_RETURN_IF_ERROR(Gemm(ctx, true, false, s.out, s.in, batch, 1.0f, dz, x, 1.0f, dw));
  if (db != nullptr) {
    for (int64_t r = 0; r < batch; ++r) {
      const float* row = dz + r * s.out;
      for (int64_t j = 0; j < s.out; ++j) db[j] += row[j];
    }
  }
  if (dx != nullptr) {
    // dx[batch, in] = dz[batch, out] * w[out, in]
    SR_RETURN_IF_ERROR(Gemm(ctx, false, false, batch, s.in, s.out, 1.0f, dz, w, 0.0f, dx));
  }
  return Status::Ok();
}

}  // namespace shardrec::dense
