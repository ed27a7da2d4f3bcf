// Fused sparse optimizers: configuration, state layout and the two-phase update shared by the
// CPU kernels (and, later, the CUDA twins). Rows not in the batch are never touched.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "impl/core/dtype.h"
#include "impl/core/exec.h"
#include "impl/core/status.h"

namespace shardrec::optim {

// Values mirror SHARDREC_OPTIMIZER_*.
enum class OptimizerType : int32_t {
  kSgd = 0,
  kAdagrad = 1,
  kRowWiseAdagrad = 2,
  kAdam = 3,
  kPartialRowWiseAdam = 4,
  kLamb = 5,
};

// The optimizer list is owned here: every other module (planner, collection, C API) asks these
// functions instead of restating ranges, names or state layouts.
inline constexpr int32_t kNumOptimizerTypes = 6;  // values 0 .. kNumOptimizerTypes - 1
bool IsKnownOptimizerType(int32_t value);
// Stable lower-case names used in plans, stats tables and messages ("rowwise_adagrad").
const char* OptimizerName(OptimizerType type);
// Bytes of fp32 optimizer state for a shard of rows x cols (saturates at INT64_MAX).
int64_t StateBytes(OptimizerType type, int64_t rows, int64_t cols);

// Values mirror SHARDREC_WEIGHT_DECAY_*.
enum class WeightDecayMode : int32_t {
  kNone = 0,
  kL2 = 1,         // gradient += wd * w before the update rule
  kDecoupled = 2,  // AdamW-style: w -= lr * wd * w, separate from the rule
};

// The defaults below are the C API's defaults too (shardrec_optimizer_config_init); capi/src
// checks at compile time that they agree.
struct OptimizerConfig {
  OptimizerType type = OptimizerType::kSgd;
  float learning_rate = 0.01f;
  float eps = 1e-8f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float weight_decay = 0.0f;
  WeightDecayMode weight_decay_mode = WeightDecayMode::kNone;
  // fp16/bf16 and FP8 weights (FP8: fp8.h's row encoding, each value by EncodeFp8Stochastic):
  // round the fp32 result stochastically instead of to nearest even.
  // The random bits are a pure function of (seed, step, table_key, global row, global column),
  // a dynamic table's id in place of the row (ShardParams::row_ids), so results do not depend on
  // the plan or the thread count.
  bool stochastic_rounding = false;
  uint64_t seed = 0;
};

// Checks ranges (lr >= 0, eps > 0, betas in [0,1), known enums); the message names the field.
Status ValidateConfig(const OptimizerConfig& config);

// The settings of `config` that decide its updates, as words for a comparison across ranks
// (comm::Digest63): the type, the bits of each float hyperparameter, the weight-decay mode and
// stochastic rounding. Not the seed (a collection takes its own from its options).
std::vector<int64_t> ConfigWords(const OptimizerConfig& config);

// One optimizer state tensor of a shard: either one float per row (row_wise) or one float per
// element (rows x cols). Always fp32, zero-initialised.
struct StateSpec {
  const char* name;  // "momentum1" (Adagrad sum / Adam exp_avg), "momentum2" (exp_avg_sq), ...
  bool row_wise;
};
std::vector<StateSpec> StateSpecs(OptimizerType type);

// Number of per-row partial statistics that must be summed over the *whole* row (across all
// column shards of the row) between the two phases; 0 means Apply can run directly.
int NumRowStats(OptimizerType type);

// A local shard's parameters. weights: rows x cols, row stride `stride` elements, of `dtype`
// (fp32 required; fp16/bf16 storage with fp32 math where supported; FP8: rows of `stride` bytes,
// each the row's scale then its codes, core/fp8.h, host kernels only). states: one pointer per
// StateSpec, in StateSpecs order: row-wise states hold `rows` floats `row_state_stride` floats
// apart, element-wise states rows x cols floats with row stride `cols`.
struct ShardParams {
  void* weights = nullptr;
  DType dtype = DType::kFloat32;
  int64_t rows = 0;
  int32_t cols = 0;
  int64_t stride = 0;
  std::vector<float*> states;
  // Where this shard sits in its table (keys the stochastic-rounding bits only, with row_ids
  // below).
  uint64_t table_key = 0;
  int64_t row_offset = 0;
  int32_t col_offset = 0;
  // Distance in floats between the row-wise state values of consecutive rows: 1 for a dense
  // array (last member, so positional initialisers of the fields above stay valid); a layout that
  // keeps each row's state in its weight row's own cache lines (fp32 weights, the state in a column
  // past `cols`) passes `stride`. Host kernels only: the device plugin ABI has no such field and
  // rejects any other value than 1.
  int64_t row_state_stride = 1;
  // A dynamic table's rows are slots, which an id holds only until it is evicted and which a
  // merge or a load renumbers: its rounding bits are keyed by the id a row holds, so they follow
  // the id whatever slot it sits in. Local row r < num_row_ids holds id row_ids[r *
  // row_ids_stride]; the other rows (all of a fixed table, whose row_ids is null, and a dynamic
  // shard's zero row, whose values are never kept) are keyed by row_offset + r. Host kernels
  // only, like row_state_stride: the device plugin ABI refuses row ids.
  const int64_t* row_ids = nullptr;
  int64_t row_ids_stride = 1;
  int64_t num_row_ids = 0;
};

// The row a shard's local row `row` keys its stochastic-rounding bits by (ShardParams::row_ids).
inline int64_t RoundingRow(const ShardParams& shard, int64_t row) {
  return row < shard.num_row_ids ? shard.row_ids[row * shard.row_ids_stride]
                                 : shard.row_offset + row;
}

// Phase-1 statistics per row, in order: row-wise Adagrad and partial row-wise Adam: sum of g'^2
// (g' = g + wd * w in L2 mode); LAMB: sum of w^2, sum of r^2 (r = the Adam direction plus the
// decoupled decay term, after advancing m and v). Summing them over the column shards of a row
// and passing full_dim = the table's dim makes a column-sharded table update exactly like the
// unsharded one. Update rules: impl/optim/update_rules.h.

// Checks a shard against the config: supported weight dtype (fp32, fp16, bf16), cols > 0,
// stride >= cols, one non-null state pointer per StateSpec. The message names the field.
Status ValidateShard(const OptimizerConfig& config, const ShardParams& shard);

// The rows to update: `rows[u]` is a local row index (sorted, unique) and `grads` holds
// rows.size() x cols aggregated gradients (already scaled; duplicates already summed).
struct RowUpdate {
  std::span<const int64_t> rows;
  const float* grads = nullptr;
};

// Phase 1 (only when NumRowStats(type) > 0): writes rows.size() x NumRowStats partial statistics
// computed over this shard's columns. May advance element-wise moment states of these rows
// (LAMB, partial row-wise Adam); Apply must then follow with the summed statistics. Rows are
// independent, so the result is bit-identical for every thread count of `ctx` (a host context;
// the CUDA twins run the same rules from update_rules.h).
void PartialRowStats(const ExecContext& ctx, const OptimizerConfig& config, int64_t step,
                     ShardParams& shard, const RowUpdate& update, float* partial_stats);

// Phase 2: applies the update to every row in `update`. `full_dim` is the table's full
// embedding dim (for row means); `full_stats` holds the phase-1 statistics summed over every
// column shard of the row (nullptr when NumRowStats == 0). `step` is the 1-based count of
// optimizer steps taken by this collection (Adam/LAMB bias correction).
void Apply(const ExecContext& ctx, const OptimizerConfig& config, int64_t step, int32_t full_dim,
           ShardParams& shard, const RowUpdate& update, const float* full_stats);

}  // namespace shardrec::optim
