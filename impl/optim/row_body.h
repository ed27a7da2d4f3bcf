// The optimizer's per-row work written once for a team of lanes (impl/core/simt.h): phase 1 (the
// row statistics of one shard row, in the shared lane order) and phase 2 (the update of every
// element), over fp32, fp16 or bf16 weights. The CUDA kernels run these bodies on device teams;
// the CPU tests run them on host teams and compare with optim::PartialRowStats / Apply (apply.cc,
// the CPU twin) bit for bit. Lane l of a team of G handles the column quads l, l + G, ...
#pragma once

#include <cstdint>

#include "impl/core/dtype.h"
#include "impl/core/half.h"
#include "impl/core/host_device.h"
#include "impl/core/simt.h"
#include "impl/optim/optimizer.h"
#include "impl/optim/rounding.h"
#include "impl/optim/update_rules.h"

namespace shardrec::optim {

// Everything the row bodies need, as plain values (passed by value to device kernels).
struct RowParams {
  void* weights = nullptr;
  int32_t dtype = 0;  // DType value
  int32_t cols = 0;
  int64_t stride = 0;
  float* m1 = nullptr;  // first state (StateSpecs order), row-wise or rows x cols
  float* m2 = nullptr;
  bool m1_row_wise = false;
  bool m2_row_wise = false;
  OptimizerType type = OptimizerType::kSgd;
  RuleScalars s;
  int32_t full_dim = 0;
  bool stochastic = false;
  uint64_t seed = 0;
  int64_t step = 0;
  uint64_t table_key = 0;
  // The rounding's row is row_offset + row: ShardParams::row_ids (a dynamic table's) never come
  // here, as dynamic tables train only in the host kernels (the plugin ABI refuses them).
  int64_t row_offset = 0;
  int32_t col_offset = 0;
};

inline RowParams MakeRowParams(const OptimizerConfig& c, int64_t step, int32_t full_dim,
                               const ShardParams& shard) {
  RowParams p;
  p.weights = shard.weights;
  p.dtype = static_cast<int32_t>(shard.dtype);
  p.cols = shard.cols;
  p.stride = shard.stride;
  auto specs = StateSpecs(c.type);
  if (!specs.empty()) {
    p.m1 = shard.states[0];
    p.m1_row_wise = specs[0].row_wise;
  }
  if (specs.size() > 1) {
    p.m2 = shard.states[1];
    p.m2_row_wise = specs[1].row_wise;
  }
  p.type = c.type;
  p.s = MakeRuleScalars(c, step);
  p.full_dim = full_dim;
  p.stochastic = c.stochastic_rounding;
  p.seed = c.seed;
  p.step = step;
  p.table_key = shard.table_key;
  p.row_offset = shard.row_offset;
  p.col_offset = shard.col_offset;
  return p;
}

SHARDREC_HD float LoadWeight(const RowParams& p, int64_t row, int64_t c) {
  const int64_t at = row * p.stride + c;
  if (p.dtype == static_cast<int32_t>(DType::kFloat16))
    return HalfToFloat(static_cast<const uint16_t*>(p.weights)[at]);
  if (p.dtype == static_cast<int32_t>(DType::kBFloat16))
    return BFloat16ToFloat(static_cast<const uint16_t*>(p.weights)[at]);
  return static_cast<const float*>(p.weights)[at];
}

// Stores an updated element: fp32 as is, 16-bit to nearest even or stochastically.
SHARDREC_HD void StoreWeight(const RowParams& p, int64_t row, int64_t c, float v) {
  const int64_t at = row * p.stride + c;
  if (p.dtype == static_cast<int32_t>(DType::kFloat32)) {
    static_cast<float*>(p.weights)[at] = v;
    return;
  }
  const bool half = p.dtype == static_cast<int32_t>(DType::kFloat16);
  uint16_t out;
  if (p.stochastic) {
    const uint32_t bits =
        RoundingBits(p.seed, p.step, p.table_key, p.row_offset + row, p.col_offset + c);
    out = half ? FloatToHalfStochastic(v, bits) : FloatToBFloat16Stochastic(v, bits);
  } else {
    out = half ? FloatToHalf(v) : FloatToBFloat16(v);
  }
  static_cast<uint16_t*>(p.weights)[at] = out;
}

SHARDREC_HD float* ElementState(float* base, int64_t row, int32_t cols, int64_t c) {
  return base + row * cols + c;
}

// A row's statistics (optim::NumRowStats of them: v[0], and v[1] for LAMB), held by value: a
// pointer into a per-thread array would put the array in local memory on the device.
struct RowStats {
  float v0 = 0.0f;
  float v1 = 0.0f;
};

// Phase 1 on local row `row` with gradient g[0, cols): the row statistics of
// optim::NumRowStats, on every lane. LAMB advances m and v.
template <class Team>
SHARDREC_HD RowStats RowPhase1(Team& t, const RowParams& p, int64_t row, const float* g) {
  typename Team::template Reg<float> a0, a1;
  const int64_t quads = (static_cast<int64_t>(p.cols) + 3) / 4;
  const int g_size = t.size();
  t.ForEachLane([&](int l) {
    float s0 = 0.0f, s1 = 0.0f;
    for (int64_t q = l; q < quads; q += g_size) {
      const int64_t c_end = 4 * q + 4 < p.cols ? 4 * q + 4 : p.cols;
      for (int64_t c = 4 * q; c < c_end; ++c) {
        const float w = LoadWeight(p, row, c);
        if (p.type == OptimizerType::kLamb) {
          const float r = LambAdvance(w, g[c], ElementState(p.m1, row, p.cols, c),
                                      ElementState(p.m2, row, p.cols, c), p.s);
          s0 = s0 + w * w;
          s1 = s1 + r * r;
        } else {
          s0 = s0 + RowWiseAdagradSquare(w, g[c], p.s);
        }
      }
    }
    a0[l] = s0;
    a1[l] = s1;
  });
  RowStats stats;
  stats.v0 = t.Sum(a0);
  if (p.type == OptimizerType::kLamb) stats.v1 = t.Sum(a1);
  return stats;
}

// Phase 2: the update of every element of local row `row`; `stats` holds the statistics summed
// over the whole row (zeros, unread, when the optimizer has none). Lane 0 owns the row-wise state:
// it reads it, the team broadcasts the value, then lane 0 writes it back.
template <class Team>
SHARDREC_HD void RowPhase2(Team& t, const RowParams& p, int64_t row, const float* g,
                           RowStats stats) {
  float row_state = 0.0f;
  float* row_state_at = nullptr;
  if (p.type == OptimizerType::kRowWiseAdagrad) row_state_at = p.m1 + row;
  if (p.type == OptimizerType::kPartialRowWiseAdam) row_state_at = p.m2 + row;
  if (row_state_at != nullptr) {
    typename Team::template Reg<float> st;
    t.ForEachLane([&](int l) { st[l] = l == 0 ? *row_state_at : 0.0f; });
    const float old = t.Broadcast(st, 0);
    row_state = p.type == OptimizerType::kRowWiseAdagrad
                    ? RowWiseAdagradState(old, stats.v0, p.full_dim)
                    : PartialRowWiseAdamState(old, stats.v0, p.full_dim, p.s);
  }
  const float mult = RowWiseAdagradMult(row_state, p.s);
  const float corr = RowWiseAdagradCorr(mult, p.s);
  const float ratio = p.type == OptimizerType::kLamb ? LambRatio(stats.v0, stats.v1) : 1.0f;
  const int64_t quads = (static_cast<int64_t>(p.cols) + 3) / 4;
  const int g_size = t.size();
  t.ForEachLane([&](int l) {
    if (l == 0 && row_state_at != nullptr) *row_state_at = row_state;
    for (int64_t q = l; q < quads; q += g_size) {
      const int64_t c_end = 4 * q + 4 < p.cols ? 4 * q + 4 : p.cols;
      for (int64_t c = 4 * q; c < c_end; ++c) {
        const float w = LoadWeight(p, row, c);
        float nw = w;
        switch (p.type) {
          case OptimizerType::kSgd:
            nw = SgdUpdate(w, g[c], p.s);
            break;
          case OptimizerType::kAdagrad:
            nw = AdagradUpdate(w, g[c], ElementState(p.m1, row, p.cols, c), p.s);
            break;
          case OptimizerType::kRowWiseAdagrad:
            nw = RowWiseAdagradUpdate(w, g[c], mult, corr);
            break;
          case OptimizerType::kAdam:
            nw = AdamUpdate(w, g[c], ElementState(p.m1, row, p.cols, c),
                            ElementState(p.m2, row, p.cols, c), p.s);
            break;
          case OptimizerType::kPartialRowWiseAdam:
            nw = PartialRowWiseAdamUpdate(w, g[c], ElementState(p.m1, row, p.cols, c), row_state,
                                          p.s);
            break;
          case OptimizerType::kLamb: {
            const float* m = ElementState(p.m1, row, p.cols, c);
            const float* v = ElementState(p.m2, row, p.cols, c);
            nw = LambUpdate(w, LambDirection(w, *m, *v, p.s), ratio, p.s);
            break;
          }
        }
        StoreWeight(p, row, c, nw);
      }
    }
  });
}

// Both phases on a row whose statistics need no other column shard (the fused backward).
template <class Team>
SHARDREC_HD void RowFused(Team& t, const RowParams& p, int64_t row, const float* g) {
  const bool has_stats = p.type == OptimizerType::kLamb ||
                         p.type == OptimizerType::kRowWiseAdagrad ||
                         p.type == OptimizerType::kPartialRowWiseAdam;
  RowPhase2(t, p, row, g, has_stats ? RowPhase1(t, p, row, g) : RowStats{});
}

}  // namespace shardrec::optim
