// The optimizer's per-row work written once for a team of lanes (impl/core/simt.h): phase 1 (the
// row statistics of one shard row, in the shared lane order) and phase 2 (the update of every
// element), over fp32, fp16 or bf16 weights, as loops around the optimizer's rule (dispatch.h). The
// CUDA kernels run these bodies on device teams; the CPU tests run them on host teams and compare
// with optim::PartialRowStats / Apply (apply.cc, the CPU twin) bit for bit. Lane l of a team of G
// handles the column quads l, l + G, ...
#pragma once

#include <cstdint>

#include "impl/core/dtype.h"
#include "impl/core/half.h"
#include "impl/core/host_device.h"
#include "impl/core/simt.h"
#include "impl/optim/dispatch.h"
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

// Where element c of state `i` of rule R sits in row `row`, or null when that state is not
// element-wise (the rule then never reads it).
template <class R, int i>
SHARDREC_HD float* ElementStateOf(float* base, int64_t row, int32_t cols, int64_t c) {
  if constexpr (kElementState<R, i>) return ElementState(base, row, cols, c);
  return nullptr;
}

// The visitors of DispatchOptimizer are structs rather than lambdas: a device lambda's call
// operator is not forced inline, and a call that is not inlined puts its captures in local memory
// (which the CUDA build refuses). Both phases choose the rule per element inside one loop, as the
// per-optimizer switch they replace did: a loop per optimizer, inlined into the hot-row kernel
// (cuda/exec_cuda.cuh), made ptxas spill registers there on sm_80 or sm_90.

// Phase 2, once per row: where the row state sits (null when none).
struct RowStateVisit {
  const RowParams& p;
  int64_t row;
  float** at;
  template <class R>
  SHARDREC_HD void operator()(R) const {
    if constexpr (R::kRowState >= 0) *at = (R::kRowState == 0 ? p.m1 : p.m2) + row;
  }
};

// Phase 2, once per row: the row state's new value (from `old`) and the row's coefficients.
struct CoefsVisit {
  const RowParams& p;
  RowStats stats;
  float old;
  float* row_state;
  RowCoefs<float>* k;
  template <class R>
  SHARDREC_HD void operator()(R) const {
    if constexpr (R::kRowState >= 0) *row_state = R::RowState(old, stats.v0, p.full_dim, p.s);
    *k = R::Coefs(*row_state, stats.v0, stats.v1, p.s);
  }
};

// Phase 2, element c: its new weight.
struct UpdateVisit {
  const RowParams& p;
  int64_t row;
  int64_t c;
  float w;
  float g;
  const RowCoefs<float>& k;
  float* out;
  template <class R>
  SHARDREC_HD void operator()(R) const {
    *out = R::Update(w, g, ElementStateOf<R, 0>(p.m1, row, p.cols, c),
                     ElementStateOf<R, 1>(p.m2, row, p.cols, c), k, p.s);
  }
};

// Phase 1, element c: adds its terms to the lane's sums s0 (and s1 with two statistics).
struct TermsVisit {
  const RowParams& p;
  int64_t row;
  int64_t c;
  float w;
  float g;
  float* s0;
  float* s1;
  template <class R>
  SHARDREC_HD void operator()(R) const {
    const RowTerms<float> t = R::Terms(w, g, ElementStateOf<R, 0>(p.m1, row, p.cols, c),
                                       ElementStateOf<R, 1>(p.m2, row, p.cols, c), p.s);
    *s0 = *s0 + t.t0;
    if constexpr (R::kNumStats > 1) *s1 = *s1 + t.t1;
  }
};

// Phase 1 on local row `row` with gradient g[0, cols): the row statistics of
// optim::NumRowStats, on every lane (zeros when the optimizer has none). LAMB advances m and v.
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
        DispatchRuleWithStats(p.type, TermsVisit{p, row, c, LoadWeight(p, row, c), g[c], &s0, &s1});
      }
    }
    a0[l] = s0;
    a1[l] = s1;
  });
  RowStats stats;
  stats.v0 = t.Sum(a0);  // zero when the optimizer has no statistics
  if (NumRowStatsOf(p.type) > 1) stats.v1 = t.Sum(a1);
  return stats;
}

// Phase 2: the update of every element of local row `row`; `stats` holds the statistics summed
// over the whole row (zeros, unread, when the optimizer has none). Lane 0 owns the row-wise
// state: it reads it, the team broadcasts the value, then lane 0 writes the new one back.
template <class Team>
SHARDREC_HD void RowPhase2(Team& t, const RowParams& p, int64_t row, const float* g,
                           RowStats stats) {
  float* row_state_at = nullptr;
  DispatchOptimizer(p.type, RowStateVisit{p, row, &row_state_at});
  float old = 0.0f;
  if (row_state_at != nullptr) {
    typename Team::template Reg<float> st;
    t.ForEachLane([&](int l) { st[l] = l == 0 ? *row_state_at : 0.0f; });
    old = t.Broadcast(st, 0);
  }
  float row_state = old;
  RowCoefs<float> k{0.0f, 0.0f};
  DispatchOptimizer(p.type, CoefsVisit{p, stats, old, &row_state, &k});
  const int64_t quads = (static_cast<int64_t>(p.cols) + 3) / 4;
  const int g_size = t.size();
  t.ForEachLane([&](int l) {
    if (l == 0 && row_state_at != nullptr) *row_state_at = row_state;
    for (int64_t q = l; q < quads; q += g_size) {
      const int64_t c_end = 4 * q + 4 < p.cols ? 4 * q + 4 : p.cols;
      for (int64_t c = 4 * q; c < c_end; ++c) {
        float nw = 0.0f;
        DispatchOptimizer(p.type, UpdateVisit{p, row, c, LoadWeight(p, row, c), g[c], k, &nw});
        StoreWeight(p, row, c, nw);
      }
    }
  });
}

// Both phases on a row whose statistics need no other column shard (the fused backward).
template <class Team>
SHARDREC_HD void RowFused(Team& t, const RowParams& p, int64_t row, const float* g) {
  RowPhase2(t, p, row, g, NumRowStatsOf(p.type) > 0 ? RowPhase1(t, p, row, g) : RowStats{});
}

}  // namespace shardrec::optim
