// The two update phases over a shard's rows: per-row loops around the optimizer's rule
// (dispatch.h, chosen once per call), fp32 in place, fp16/bf16/FP8 through an fp32 row buffer
// with nearest-even or stochastic rounding.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/fp8.h"
#include "impl/core/half.h"
#include "impl/core/rng.h"
#include "impl/core/simt.h"
#include "impl/optim/dispatch.h"
#include "impl/optim/optimizer.h"
#include "impl/optim/rounding.h"
#include "impl/optim/rounding_row.h"
#include "impl/optim/store_row.h"
#include "impl/optim/update_rules.h"

namespace shardrec::optim {

namespace {

// Pointers into one row: m1/m2 address the row's element-wise states (cols floats) or its
// single row-wise value, as the rule says.
struct RowRef {
  float* w;
  const float* g;
  float* m1;
  float* m2;
};

template <class R>
RowRef MakeRowRef(const ShardParams& shard, int64_t row, float* w, const float* g) {
  RowRef r{w, g, nullptr, nullptr};
  float* st[2] = {nullptr, nullptr};
  for (int i = 0; i < R::kNumStates; ++i)
    st[i] = i == R::kRowState ? shard.states[i] + row * shard.row_state_stride
                              : shard.states[i] + row * shard.cols;
  r.m1 = st[0];
  r.m2 = st[1];
  return r;
}

// Element c's value of state `i` of a row, or null when that state is not element-wise.
template <class R, int i>
float* ElementAt(float* base, int32_t c) {
  if constexpr (kElementState<R, i>) return base + c;
  return nullptr;
}

// Row statistics are summed in the order every backend shares (impl/core/simt.h): column c goes
// to lane LaneOfColumn(c), each lane sums in column order, the 32 lanes meet in CombineLanes
// order. The CUDA kernels reduce a row across a team of lanes exactly so (impl/optim/row_body.h).
//
// The terms are taken a block of 128 columns (one quad per lane) at a time: the terms first,
// then every lane adds its quad's four terms. Each lane still adds its columns in increasing
// order, so the bits are those of adding column by column into acc[LaneOfColumn(c)]; but
// consecutive columns no longer wait on the same accumulator (that loop ran through a store and
// a reload per column and was the backward's hottest loop).
void AddBlock(const float* terms, int32_t n, float* acc) {
  const int32_t quads = n / 4;  // lanes with a whole quad in this block
  if (quads == simt::kWarpSize) {
    for (int j = 0; j < 4; ++j)
      for (int32_t l = 0; l < simt::kWarpSize; ++l) acc[l] = acc[l] + terms[4 * l + j];
  } else {
    for (int j = 0; j < 4; ++j)
      for (int32_t l = 0; l < quads; ++l) acc[l] = acc[l] + terms[4 * l + j];
    for (int32_t c = 4 * quads; c < n; ++c) acc[quads] = acc[quads] + terms[c];
  }
}

template <class R>
void RowStats(const RuleScalars& s, const RowRef& r, int32_t cols, float* out) {
  constexpr int kStats = R::kNumStats;
  if constexpr (kStats > 0) {
    constexpr int32_t kBlock = 4 * simt::kWarpSize;
    const RuleScalars rs = s;
    const float* __restrict w = r.w;
    const float* __restrict g = r.g;
    float acc[kStats][simt::kWarpSize] = {};
    float terms[kStats][kBlock];
    for (int32_t b = 0; b < cols; b += kBlock) {
      const int32_t n = std::min(kBlock, cols - b);
      for (int32_t c = 0; c < n; ++c) {
        const RowTerms<float> t = R::Terms(w[b + c], g[b + c], ElementAt<R, 0>(r.m1, b + c),
                                           ElementAt<R, 1>(r.m2, b + c), rs);
        terms[0][c] = t.t0;
        if constexpr (kStats > 1) terms[1][c] = t.t1;
      }
      for (int k = 0; k < kStats; ++k) AddBlock(terms[k], n, acc[k]);
    }
    for (int k = 0; k < kStats; ++k) out[k] = simt::CombineLanes(acc[k], simt::kWarpSize);
  }
}

template <class R>
void ApplyRow(const RuleScalars& s, int32_t full_dim, const RowRef& r, int32_t cols,
              const float* stats) {
  float* __restrict w = r.w;
  const float* __restrict g = r.g;
  float row_state = 0.0f;
  if constexpr (R::kRowState >= 0) {
    float* at = R::kRowState == 0 ? r.m1 : r.m2;
    row_state = R::RowState(*at, stats[0], full_dim, s);
    *at = row_state;
  }
  const float st0 = R::kNumStats > 0 ? stats[0] : 0.0f;
  const float st1 = R::kNumStats > 1 ? stats[1] : 0.0f;
  const RowCoefs<float> k = R::Coefs(row_state, st0, st1, s);
  for (int32_t c = 0; c < cols; ++c)
    w[c] = R::Update(w[c], g[c], ElementAt<R, 0>(r.m1, c), ElementAt<R, 1>(r.m2, c), k, s);
}

void LoadRow(const ShardParams& shard, int64_t row, float* out) {
  if (IsFp8DType(shard.dtype)) {  // stride in bytes: the row's scale, then its codes
    DecodeFp8Row(Fp8KindOf(shard.dtype),
                 static_cast<const uint8_t*>(shard.weights) + row * shard.stride, shard.cols, out);
    return;
  }
  const auto* src = static_cast<const uint16_t*>(shard.weights) + row * shard.stride;
  if (shard.dtype == DType::kFloat16) {
    for (int32_t c = 0; c < shard.cols; ++c) out[c] = HalfToFloat(src[c]);
  } else {
    for (int32_t c = 0; c < shard.cols; ++c) out[c] = BFloat16ToFloat(src[c]);
  }
}

void StoreRow(const OptimizerConfig& cfg, int64_t step, const ShardParams& shard, int64_t row,
              const float* in) {
  // Stochastic bits keyed once per row: a fixed table's global row, a dynamic table's id
  // (RoundingRow).
  const uint64_t key = cfg.stochastic_rounding ? RoundingRowKey(cfg.seed, step, shard.table_key,
                                                                RoundingRow(shard, row))
                                               : 0;
  if (IsFp8DType(shard.dtype)) {
    // The whole row re-encoded: its scale from its largest magnitude (fp8.h), each value to
    // nearest even or stochastically with the 16-bit path's bits.
    auto* dst = static_cast<uint8_t*>(shard.weights) + row * shard.stride;
    if (!cfg.stochastic_rounding) {
      EncodeFp8Row(Fp8KindOf(shard.dtype), in, shard.cols, dst);
      return;
    }
    EncodeFp8RowStochastic(Fp8KindOf(shard.dtype), in, shard.cols, dst, [&](int64_t c) {
      return RoundingColumnBits(key, static_cast<int64_t>(shard.col_offset) + c);
    });
    return;
  }
  auto* dst = static_cast<uint16_t*>(shard.weights) + row * shard.stride;
  bool half = shard.dtype == DType::kFloat16;
  if (!cfg.stochastic_rounding) {
    for (int32_t c = 0; c < shard.cols; ++c)
      dst[c] = half ? FloatToHalf(in[c]) : FloatToBFloat16(in[c]);
    return;
  }
  if (!half) {  // the bits drawn and the values rounded in the same vector registers
    RoundBf16RowStochastic(key, static_cast<int64_t>(shard.col_offset), shard.cols, in, dst);
    return;
  }
  // fp16: the bits a chunk of columns at a time, in vector registers (rounding_row.h).
  constexpr int32_t kChunk = 64;
  uint32_t bits[kChunk];
  for (int32_t c0 = 0; c0 < shard.cols; c0 += kChunk) {
    const int32_t n = std::min(kChunk, shard.cols - c0);
    RoundingRowBits(key, static_cast<int64_t>(shard.col_offset) + c0, n, bits);
    for (int32_t i = 0; i < n; ++i) dst[c0 + i] = FloatToHalfStochastic(in[c0 + i], bits[i]);
  }
}

void CheckDType(const ShardParams& shard) { SR_CHECK(IsWeightDType(shard.dtype)); }

}  // namespace

void PartialRowStats(const ExecContext& ctx, const OptimizerConfig& config, int64_t step,
                     ShardParams& shard, const RowUpdate& update, float* partial_stats) {
  SR_CHECK(ctx.is_host());
  int ns = NumRowStats(config.type);
  int64_t n = static_cast<int64_t>(update.rows.size());
  if (ns == 0 || n == 0) return;
  CheckDType(shard);
  RuleScalars s = MakeRuleScalars(config, step);
  int32_t cols = shard.cols;
  DispatchOptimizer(config.type, [&](auto rule) {
    using R = decltype(rule);
    ctx.ParallelFor(0, n, 64, [&](int64_t b, int64_t e) {
      std::vector<float> buf(shard.dtype == DType::kFloat32 ? 0 : cols);
      for (int64_t u = b; u < e; ++u) {
        int64_t row = update.rows[u];
        const float* g = update.grads + u * cols;
        float* w;
        if (shard.dtype == DType::kFloat32) {
          w = static_cast<float*>(shard.weights) + row * shard.stride;
        } else {
          LoadRow(shard, row, buf.data());
          w = buf.data();
        }
        RowStats<R>(s, MakeRowRef<R>(shard, row, w, g), cols, partial_stats + u * ns);
      }
    });
  });
}

void Apply(const ExecContext& ctx, const OptimizerConfig& config, int64_t step, int32_t full_dim,
           ShardParams& shard, const RowUpdate& update, const float* full_stats) {
  SR_CHECK(ctx.is_host());
  int ns = NumRowStats(config.type);
  int64_t n = static_cast<int64_t>(update.rows.size());
  if (n == 0) return;
  CheckDType(shard);
  SR_CHECK(ns == 0 || full_stats != nullptr);
  SR_CHECK(full_dim >= shard.cols);
  RuleScalars s = MakeRuleScalars(config, step);
  int32_t cols = shard.cols;
  DispatchOptimizer(config.type, [&](auto rule) {
    using R = decltype(rule);
    ctx.ParallelFor(0, n, 64, [&](int64_t b, int64_t e) {
      std::vector<float> buf(shard.dtype == DType::kFloat32 ? 0 : cols);
      for (int64_t u = b; u < e; ++u) {
        int64_t row = update.rows[u];
        const float* g = update.grads + u * cols;
        const float* st = ns > 0 ? full_stats + u * ns : nullptr;
        if (shard.dtype == DType::kFloat32) {
          float* w = static_cast<float*>(shard.weights) + row * shard.stride;
          ApplyRow<R>(s, full_dim, MakeRowRef<R>(shard, row, w, g), cols, st);
        } else {
          LoadRow(shard, row, buf.data());
          ApplyRow<R>(s, full_dim, MakeRowRef<R>(shard, row, buf.data(), g), cols, st);
          StoreRow(config, step, shard, row, buf.data());
        }
      }
    });
  });
}

void RowRoundingBits(const OptimizerConfig& config, int64_t step, const ShardParams& shard,
                     int64_t row, int32_t col, int32_t n, uint32_t* bits) {
  const uint64_t key = RoundingRowKey(config.seed, step, shard.table_key, RoundingRow(shard, row));
  RoundingRowBits(key, static_cast<int64_t>(shard.col_offset) + col, n, bits);
}

void StoreRoundedRow(const OptimizerConfig& config, int64_t step, const ShardParams& shard,
                     int64_t row, const float* values) {
  SR_CHECK(shard.dtype != DType::kFloat32 && IsWeightDType(shard.dtype));
  StoreRow(config, step, shard, row, values);
}

}  // namespace shardrec::optim
