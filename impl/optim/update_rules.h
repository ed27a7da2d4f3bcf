// The optimizer update rules, written once as small inline functions over one element (and a few
// per-row scalars), so the CPU kernels and the CUDA kernels apply exactly the same arithmetic.
//
// Each rule is a template over its value type F: float for the scalar CPU code and the CUDA
// kernels, or a vector of floats (the host's SIMD kernels, kernels/isa/fused_rows_body.h), whose
// lanes then each take exactly the scalar rule's IEEE operations. F needs + - * / with F and with
// float on either side, and RuleSqrt(F) (found by argument-dependent lookup for a vector type).
// A kernel compiled for a wider instruction set instantiates these with its own internal types
// only, so no copy built for AVX can stand in for the baseline float one at link time.
#pragma once

#include <cmath>
#include <cstdint>

#include "impl/core/host_device.h"
#include "impl/optim/optimizer.h"

namespace shardrec::optim {

// Step-dependent scalars of one update, computed once per call on the host. Weight decay is
// folded into two coefficients so the element loops carry no mode branches:
//   l2  = wd when the mode is L2 (g' = g + l2 * w), else 0;
//   dwd = wd when the mode is decoupled (the step subtracts lr * dwd * w), else 0.
struct RuleScalars {
  float lr = 0, eps = 0, beta1 = 0, beta2 = 0;
  float l2 = 0, dwd = 0;
  float bc1 = 1, bc2 = 1;  // 1 - beta^step (bias corrections)
};

inline RuleScalars MakeRuleScalars(const OptimizerConfig& c, int64_t step) {
  RuleScalars s;
  s.lr = c.learning_rate;
  s.eps = c.eps;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.l2 = c.weight_decay_mode == WeightDecayMode::kL2 ? c.weight_decay : 0.0f;
  s.dwd = c.weight_decay_mode == WeightDecayMode::kDecoupled ? c.weight_decay : 0.0f;
  double t = static_cast<double>(step < 1 ? 1 : step);
  s.bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta1), t));
  s.bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta2), t));
  return s;
}

SHARDREC_HD float RuleSqrt(float x) { return sqrtf(x); }

template <class F>
SHARDREC_HD F DecayedGrad(F g, F w, const RuleScalars& s) {
  return g + s.l2 * w;
}

// SGD: w <- w - lr * (g' + dwd * w).
template <class F>
SHARDREC_HD F SgdUpdate(F w, F g, const RuleScalars& s) {
  F gd = DecayedGrad(g, w, s);
  return w - s.lr * (gd + s.dwd * w);
}

// Adagrad (element-wise sum of squares): m += g'^2; w <- w - lr * (g' / (sqrt(m) + eps) + dwd * w).
template <class F>
SHARDREC_HD F AdagradUpdate(F w, F g, F* m, const RuleScalars& s) {
  F gd = DecayedGrad(g, w, s);
  F mm = *m + gd * gd;
  *m = mm;
  return w - s.lr * (gd / (RuleSqrt(mm) + s.eps) + s.dwd * w);
}

// Row-wise Adagrad. Phase 1 sums g'^2 over the shard's columns; the row state then advances by
// the mean over the full row, and every element takes w <- corr * w - mult * g (FBGEMM's form:
// L2 decay enters through corr, the step uses the un-decayed g).
template <class F>
SHARDREC_HD F RowWiseAdagradSquare(F w, F g, const RuleScalars& s) {
  F gd = DecayedGrad(g, w, s);
  return gd * gd;
}
template <class F>
SHARDREC_HD F RowWiseAdagradState(F m, F full_sum_sq, int32_t full_dim) {
  return m + full_sum_sq / static_cast<float>(full_dim);
}
template <class F>
SHARDREC_HD F RowWiseAdagradMult(F m, const RuleScalars& s) {
  return s.lr / (RuleSqrt(m) + s.eps);
}
template <class F>
SHARDREC_HD F RowWiseAdagradCorr(F mult, const RuleScalars& s) {
  return 1.0f - mult * s.l2 - s.lr * s.dwd;
}
template <class F>
SHARDREC_HD F RowWiseAdagradUpdate(F w, F g, F mult, F corr) {
  return corr * w - mult * g;
}

// Adam moments and the bias-corrected direction m^ / (sqrt(v^) + eps).
template <class F>
SHARDREC_HD F AdamFirstMoment(F m, F g, const RuleScalars& s) {
  return s.beta1 * m + (1.0f - s.beta1) * g;
}
template <class F>
SHARDREC_HD F AdamSecondMoment(F v, F g, const RuleScalars& s) {
  return s.beta2 * v + (1.0f - s.beta2) * g * g;
}
template <class F>
SHARDREC_HD F AdamDirection(F m, F v, const RuleScalars& s) {
  return (m / s.bc1) / (RuleSqrt(v / s.bc2) + s.eps);
}

// Adam: w <- w - lr * (m^ / (sqrt(v^) + eps) + dwd * w).
template <class F>
SHARDREC_HD F AdamUpdate(F w, F g, F* m, F* v, const RuleScalars& s) {
  F gd = DecayedGrad(g, w, s);
  F mm = AdamFirstMoment(*m, gd, s);
  F vv = AdamSecondMoment(*v, gd, s);
  *m = mm;
  *v = vv;
  return w - s.lr * (AdamDirection(mm, vv, s) + s.dwd * w);
}

// Partial row-wise Adam: v is one value per row, advanced by the mean of g'^2 over the full row
// (phase-1 statistic: RowWiseAdagradSquare summed); m stays element-wise.
template <class F>
SHARDREC_HD F PartialRowWiseAdamState(F v, F full_sum_sq, int32_t full_dim, const RuleScalars& s) {
  return s.beta2 * v + (1.0f - s.beta2) * (full_sum_sq / static_cast<float>(full_dim));
}
template <class F>
SHARDREC_HD F PartialRowWiseAdamUpdate(F w, F g, F* m, F v_row, const RuleScalars& s) {
  F gd = DecayedGrad(g, w, s);
  F mm = AdamFirstMoment(*m, gd, s);
  *m = mm;
  return w - s.lr * (AdamDirection(mm, v_row, s) + s.dwd * w);
}

// LAMB. Phase 1 advances m and v (as Adam) and returns r = m^ / (sqrt(v^) + eps) + dwd * w, whose
// squares and those of w are summed over the row; phase 2 recomputes r from the advanced
// moments and takes w <- w - lr * ratio * r with ratio = |w| / |r| (1 when either norm is 0).
template <class F>
SHARDREC_HD F LambAdvance(F w, F g, F* m, F* v, const RuleScalars& s) {
  F gd = DecayedGrad(g, w, s);
  F mm = AdamFirstMoment(*m, gd, s);
  F vv = AdamSecondMoment(*v, gd, s);
  *m = mm;
  *v = vv;
  return AdamDirection(mm, vv, s) + s.dwd * w;
}
template <class F>
SHARDREC_HD F LambDirection(F w, F m, F v, const RuleScalars& s) {
  return AdamDirection(m, v, s) + s.dwd * w;
}
// A per-row scalar: F is float, or a scalar type of a SIMD kernel (with F(float) and F > float).
template <class F>
SHARDREC_HD F LambRatio(F full_w_sq, F full_r_sq) {
  if (!(full_w_sq > 0.0f) || !(full_r_sq > 0.0f)) return F(1.0f);
  return RuleSqrt(full_w_sq) / RuleSqrt(full_r_sq);
}
template <class F>
SHARDREC_HD F LambUpdate(F w, F r, F ratio, const RuleScalars& s) {
  return w - s.lr * ratio * r;
}

}  // namespace shardrec::optim
