// Optimizer configuration checks; names, state layouts and row statistics come from the rule
// table (dispatch.h).
#include "impl/optim/optimizer.h"

#include <cmath>
#include <cstring>

#include "impl/optim/dispatch.h"

namespace shardrec::optim {

namespace {

static_assert(static_cast<int32_t>(OptimizerType::kLamb) == kNumOptimizerTypes - 1,
              "kNumOptimizerTypes must cover every OptimizerType");

bool KnownDecayMode(WeightDecayMode m) {
  auto v = static_cast<int32_t>(m);
  return v >= static_cast<int32_t>(WeightDecayMode::kNone) &&
         v <= static_cast<int32_t>(WeightDecayMode::kDecoupled);
}

constexpr const char* kStateNames[] = {"momentum1", "momentum2"};

}  // namespace

bool IsKnownOptimizerType(int32_t value) { return value >= 0 && value < kNumOptimizerTypes; }

const char* OptimizerName(OptimizerType type) {
  const char* name = "unknown";
  DispatchOptimizer(type, [&](auto rule) { name = decltype(rule)::kName; });
  return name;
}

int64_t StateBytes(OptimizerType type, int64_t rows, int64_t cols) {
  int64_t per_row = 0;
  for (const StateSpec& s : StateSpecs(type)) per_row += s.row_wise ? 1 : cols;
  int64_t floats = 0, bytes = 0;
  if (__builtin_mul_overflow(rows, per_row, &floats) ||
      __builtin_mul_overflow(floats, int64_t{4}, &bytes))
    return INT64_MAX;
  return bytes;
}

std::vector<int64_t> ConfigWords(const OptimizerConfig& c) {
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return static_cast<int64_t>(u);
  };
  return {static_cast<int64_t>(c.type),
          bits(c.learning_rate),
          bits(c.eps),
          bits(c.beta1),
          bits(c.beta2),
          bits(c.weight_decay),
          static_cast<int64_t>(c.weight_decay_mode),
          c.stochastic_rounding ? 1 : 0};
}

Status ValidateConfig(const OptimizerConfig& c) {
  if (!IsKnownOptimizerType(static_cast<int32_t>(c.type)))
    return Status::InvalidArgument("optimizer type: unknown value ", static_cast<int32_t>(c.type));
  if (!KnownDecayMode(c.weight_decay_mode))
    return Status::InvalidArgument("optimizer weight_decay_mode: unknown value ",
                                   static_cast<int32_t>(c.weight_decay_mode));
  if (!std::isfinite(c.learning_rate) || c.learning_rate < 0.0f)
    return Status::InvalidArgument("optimizer learning_rate must be finite and >= 0, got ",
                                   c.learning_rate);
  if (!std::isfinite(c.eps) || c.eps <= 0.0f)
    return Status::InvalidArgument("optimizer eps must be finite and > 0, got ", c.eps);
  if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f))
    return Status::InvalidArgument("optimizer beta1 must be in [0, 1), got ", c.beta1);
  if (!(c.beta2 >= 0.0f && c.beta2 < 1.0f))
    return Status::InvalidArgument("optimizer beta2 must be in [0, 1), got ", c.beta2);
  if (!std::isfinite(c.weight_decay) || c.weight_decay < 0.0f)
    return Status::InvalidArgument("optimizer weight_decay must be finite and >= 0, got ",
                                   c.weight_decay);
  return Status::Ok();
}

std::vector<StateSpec> StateSpecs(OptimizerType type) {
  std::vector<StateSpec> specs;
  DispatchOptimizer(type, [&](auto rule) {
    using R = decltype(rule);
    static_assert(R::kNumStates <= 2 && R::kRowState < R::kNumStates);
    for (int i = 0; i < R::kNumStates; ++i) specs.push_back({kStateNames[i], i == R::kRowState});
  });
  return specs;
}

int NumRowStats(OptimizerType type) {
  int n = 0;
  DispatchOptimizer(type, [&](auto rule) { n = decltype(rule)::kNumStats; });
  return n;
}

Status ValidateShard(const OptimizerConfig& config, const ShardParams& shard) {
  if (!IsWeightDType(shard.dtype))
    return Status::Unsupported("optimizer weights dtype ", DTypeName(shard.dtype),
                               ": only float32, float16, bfloat16 and FP8 are supported");
  if (shard.rows < 0)
    return Status::InvalidArgument("optimizer shard rows must be >= 0, got ", shard.rows);
  if (shard.cols <= 0)
    return Status::InvalidArgument("optimizer shard cols must be > 0, got ", shard.cols);
  // An FP8 row's stride is in bytes and holds its 4-byte scale too.
  const int64_t least = IsFp8DType(shard.dtype) ? Fp8RowBytes(shard.cols) : shard.cols;
  if (shard.stride < least)
    return Status::InvalidArgument("optimizer shard stride ", shard.stride, " is smaller than ",
                                   least, " (cols ", shard.cols, ")");
  if (shard.rows > 0 && shard.weights == nullptr)
    return Status::InvalidArgument("optimizer shard weights is null");
  if (shard.row_state_stride < 1)
    return Status::InvalidArgument("optimizer shard row_state_stride must be >= 1, got ",
                                   shard.row_state_stride);
  auto specs = StateSpecs(config.type);
  if (shard.states.size() != specs.size())
    return Status::InvalidArgument("optimizer shard has ", shard.states.size(), " state tensors, ",
                                   specs.size(), " expected");
  for (size_t i = 0; i < specs.size(); ++i)
    if (shard.rows > 0 && shard.states[i] == nullptr)
      return Status::InvalidArgument("optimizer state ", specs[i].name, " is null");
  return Status::Ok();
}

}  // namespace shardrec::optim
