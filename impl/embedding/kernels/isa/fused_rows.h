// Internal: the host's fused backward over one task's unique rows (kernels.h FusedBackward),
// compiled once per instruction set (fused_rows_baseline.cc, fused_rows_avx2.cc,
// fused_rows_avx512.cc) and chosen at run time like the lookups' bag sums.
//
// Per unique row: its gradient is summed over its ids in position order (first term assigned,
// then added), the optimizer's row statistics are summed in the shared lane order
// (impl/core/simt.h: column quad q to lane q % 32, each lane in column order from +0, the lanes
// through CombineLanes), and every element takes the rule of impl/optim/update_rules.h. Vector
// lanes are independent and nothing is contracted into an FMA, so every level gives the bits of
// AggregateGrads + optim::PartialRowStats + optim::Apply (tests run every level the host has).
//
// Plain data only, as isa/bag_sum.h: these files are built with different target flags.
#pragma once

#include <cstdint>

#include "impl/embedding/kernels/isa/bag_sum.h"
#include "impl/optim/update_rules.h"

namespace shardrec::embedding::kernels::isa {

// What a call does with each unique row (isa/fused_rows_body.h):
//   kFused      sum its gradient, then both optimizer phases (the fused backward);
//   kAggregate  sum its gradient into grads_out and, with `stats`, take the optimizer's phase 1
//               (its row statistics over this shard's columns into stats; LAMB advances m and v)
//               -- AggregateGrads + optim::PartialRowStats;
//   kApply      phase 2 with the row's gradient at grads + u * cols and its full statistics at
//               stats (optim::Apply), or both phases when stats is null (whole rows: cols is the
//               table's dim); unique_rows are then the caller's rows, no grouping.
enum class FusedRowsMode : int32_t { kFused = 0, kAggregate = 1, kApply = 2 };

struct FusedRowsArgs {
  FusedRowsMode mode = FusedRowsMode::kFused;
  // The grouping of one shard's ids (row_group.h): the ids of unique row unique_rows[u] are the
  // keys [segments[u], segments[u + 1]) in position order; a key's bits under index_mask index
  // grad_rows (and id_weights). num_keys bounds the gradient prefetch.
  const uint64_t* keys = nullptr;
  uint64_t index_mask = 0;
  const int64_t* segments = nullptr;
  const int64_t* unique_rows = nullptr;
  int64_t num_keys = 0;
  int64_t u_begin = 0;  // the unique rows this call updates
  int64_t u_end = 0;
  // The contribution of index i: scale (times id_weights[i] when not null) x the gradient row at
  // grad_rows[i] (kApply: row u's gradient at grads + u * cols).
  const float* grads = nullptr;
  const float* const* grad_rows = nullptr;
  const float* id_weights = nullptr;
  float scale = 1.0f;
  // Rows with more than hot_ids ids come summed by the caller (simt/segment_order.h's chunked
  // order) in hot_grads: their gradient rows one after the other, in u order.
  int64_t hot_ids = 0;
  const float* hot_grads = nullptr;
  // The shard: rows of cols elements of `type`, `stride` elements apart (FP8: rows of `stride`
  // bytes, the scale then the codes).
  void* weights = nullptr;
  WeightType type = WeightType::kFp32;
  int64_t stride = 0;
  int32_t cols = 0;
  int32_t full_dim = 0;  // the table's dim (== cols whenever the optimizer has row statistics)
  // The optimizer (an optim::OptimizerType value), its scalars for this step and its states in
  // optim::StateSpecs order: a row-wise state's values row_state_stride floats apart, an
  // element-wise state's rows cols floats apart.
  int32_t optimizer = 0;
  optim::RuleScalars rules;
  float* m1 = nullptr;
  float* m2 = nullptr;
  bool m1_row_wise = false;
  bool m2_row_wise = false;
  int64_t row_state_stride = 1;
  // 16-bit weights: each updated row, in fp32, goes to store_row(store_ctx, row, values), which
  // rounds it into the table (optim's nearest-even or stochastic rounding). FP8 rows are decoded
  // and re-encoded whole by the kernel itself (isa/fp8_rows_body.h, core/fp8.h's bits): to
  // nearest with row_bits null, else stochastically with the random bits row_bits(store_ctx,
  // row, col, n, bits) writes for columns [col, col + n) of local row `row` (n <= 256; optim's
  // RowRoundingBits, the 16-bit path's bits).
  void (*store_row)(void* store_ctx, int64_t row, const float* values) = nullptr;
  void (*row_bits)(void* store_ctx, int64_t row, int32_t col, int32_t n, uint32_t* bits) = nullptr;
  void* store_ctx = nullptr;
  // 2 x FusedRowsScratchFloats(cols) floats the caller owns (the summed gradient, a widened row).
  float* scratch = nullptr;
  int64_t rows_ahead = 16;  // unique rows whose weight row and states are prefetched
  int64_t grads_ahead = 8;  // keys whose gradient rows are prefetched
  // kAggregate: each row's summed gradient at grads_out + u * cols; kAggregate / kApply: the row
  // statistics, num_stats per row at stats + u * num_stats (null when the optimizer has none).
  float* grads_out = nullptr;
  float* stats = nullptr;
  int32_t num_stats = 0;
};

// Floats of one scratch row: cols rounded up to a whole AVX-512 register.
inline constexpr int64_t FusedRowsScratchFloats(int32_t cols) {
  return (int64_t{cols} + 15) / 16 * 16;
}

using FusedRowsFn = void (*)(const FusedRowsArgs& args);

void FusedRowsBaseline(const FusedRowsArgs& args);  // SSE2: every x86-64
void FusedRowsAvx2(const FusedRowsArgs& args);      // AVX2 + F16C
void FusedRowsAvx512(const FusedRowsArgs& args);    // AVX-512 F/BW/VL

// One FP8 row (core/fp8.h's layout, `type` kFp8E4M3 or kFp8E5M2) decoded into values[0..cols)
// (encode false) or values[0..cols) encoded into it (encode true) by a level's registers, as the
// fused backward does: the bits of core/fp8.h's DecodeFp8Row / EncodeFp8Row on every level.
using Fp8RowFn = void (*)(WeightType type, bool encode, float* values, int32_t cols, uint8_t* row);
void Fp8RowBaseline(WeightType type, bool encode, float* values, int32_t cols, uint8_t* row);
void Fp8RowAvx2(WeightType type, bool encode, float* values, int32_t cols, uint8_t* row);
void Fp8RowAvx512(WeightType type, bool encode, float* values, int32_t cols, uint8_t* row);

// values[0..cols) encoded into an FP8 row with stochastic rounding, value c with bits[c], by a
// level's registers as the fused backward does: core/fp8.h's EncodeFp8RowStochastic's bits.
using Fp8RowStochasticFn = void (*)(WeightType type, const float* values, int32_t cols,
                                    const uint32_t* bits, uint8_t* row);
void Fp8RowStochasticBaseline(WeightType type, const float* values, int32_t cols,
                              const uint32_t* bits, uint8_t* row);
void Fp8RowStochasticAvx2(WeightType type, const float* values, int32_t cols, const uint32_t* bits,
                          uint8_t* row);
void Fp8RowStochasticAvx512(WeightType type, const float* values, int32_t cols,
                            const uint32_t* bits, uint8_t* row);

}  // namespace shardrec::embedding::kernels::isa
