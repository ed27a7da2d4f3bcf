// The optimizer update rules, written once as small inline functions over one element (and a few
// per-row scalars), so the CPU kernels and the CUDA kernels apply exactly the same arithmetic.
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

SHARDREC_HD float DecayedGrad(float g, float w, const RuleScalars& s) { return g + s.l2 * w; }

// SGD: w <- w - lr * (g' + dwd * w).
SHARDREC_HD float SgdUpdate(float w, float g, const RuleScalars& s) {
  float gd = DecayedGrad(g, w, s);
  return w - s.lr * (gd + s.dwd * w);
}

// Adagrad (element-wise sum of squares): m += g'^2; w <- w - lr * (g' / (sqrt(m) + eps) + dwd * w).
SHARDREC_HD float AdagradUpdate(float w, float g, float* m, const RuleScalars& s) {
  float gd = DecayedGrad(g, w, s);
  float mm = *m + gd * gd;
  *m = mm;
  return w - s.lr * (gd / (sqrtf(mm) + s.eps) + s.dwd * w);
}

// Row-wise Adagrad. Phase 1 sums g'^2 over the shard's columns; the row state then advances by
// the mean over the full row, and every element takes w <- corr * w - mult * g (FBGEMM's form:
// L2 decay enters through corr, the step uses the un-decayed g).
SHARDREC_HD float RowWiseAdagradSquare(float w, float g, const RuleScalars& s) {
  float gd = DecayedGrad(g, w, s);
  return gd * gd;
}
SHARDREC_HD float RowWiseAdagradState(float m, float full_sum_sq, int32_t full_dim) {
  return m + full_sum_sq / static_cast<float>(full_dim);
}
SHARDREC_HD float RowWiseAdagradMult(float m, const RuleScalars& s) {
  return s.lr / (sqrtf(m) + s.eps);
}
SHARDREC_HD float RowWiseAdagradCorr(float mult, const RuleScalars& s) {
  return 1.0f - mult * s.l2 - s.lr * s.dwd;
}
SHARDREC_HD float RowWiseAdagradUpdate(float w, float g, float mult, float corr) {
  return corr * w - mult * g;
}

// Adam moments and the bias-corrected direction m^ / (sqrt(v^) + eps).
SHARDREC_HD float AdamFirstMoment(float m, float g, const RuleScalars& s) {
  return s.beta1 * m + (1.0f - s.beta1) * g;
}
SHARDREC_HD float AdamSecondMoment(float v, float g, const RuleScalars& s) {
  return s.beta2 * v + (1.0f - s.beta2) * g * g;
}
SHARDREC_HD float AdamDirection(float m, float v, const RuleScalars& s) {
  return (m / s.bc1) / (sqrtf(v / s.bc2) + s.eps);
}

// Adam: w <- w - lr * (m^ / (sqrt(v^) + eps) + dwd * w).
SHARDREC_HD float AdamUpdate(float w, float g, float* m, float* v, const RuleScalars& s) {
  float gd = DecayedGrad(g, w, s);
  float mm = AdamFirstMoment(*m, gd, s);
  float vv = AdamSecondMoment(*v, gd, s);
  *m = mm;
  *v = vv;
  return w - s.lr * (AdamDirection(mm, vv, s) + s.dwd * w);
}

// Partial row-wise Adam: v is one value per row, advanced by the mean of g'^2 over the full row
// (phase-1 statistic: RowWiseAdagradSquare summed); m stays element-wise.
SHARDREC_HD float PartialRowWiseAdamState(float v, float full_sum_sq, int32_t full_dim,
                                          const RuleScalars& s) {
  return s.beta2 * v + (1.0f - s.beta2) * (full_sum_sq / static_cast<float>(full_dim));
}
SHARDREC_HD float PartialRowWiseAdamUpdate(float w, float g, float* m, float v_row,
                                           const RuleScalars& s) {
  float gd = DecayedGrad(g, w, s);
  float mm = AdamFirstMoment(*m, gd, s);
  *m = mm;
  return w - s.lr * (AdamDirection(mm, v_row, s) + s.dwd * w);
}

// LAMB. Phase 1 advances m and v (as Adam) and returns r = m^ / (sqrt(v^) + eps) + dwd * w, whose
// squares and those of w are summed over the row; phase 2 recomputes r from the advanced
// moments and takes w <- w - lr * ratio * r with ratio = |w| / |r| (1 when either norm is 0).
SHARDREC_HD float LambAdvance(float w, float g, float* m, float* v, const RuleScalars& s) {
  float gd = DecayedGrad(g, w, s);
  float mm = AdamFirstMoment(*m, gd, s);
  float vv = AdamSecondMoment(*v, gd, s);
  *m = mm;
  *v = vv;
  return AdamDirection(mm, vv, s) + s.dwd * w;
}
SHARDREC_HD float LambDirection(float w, float m, float v, const RuleScalars& s) {
  return AdamDirection(m, v, s) + s.dwd * w;
}
SHARDREC_HD float LambRatio(float full_w_sq, float full_r_sq) {
  if (!(full_w_sq > 0.0f) || !(full_r_sq > 0.0f)) return 1.0f;
  return sqrtf(full_w_sq) / sqrtf(full_r_sq);
}
SHARDREC_HD float LambUpdate(float w, float r, float ratio, const RuleScalars& s) {
  return w - s.lr * ratio * r;
}

}  // namespace shardrec::optim
