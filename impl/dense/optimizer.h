// Optimizers for dense parameters: SGD, Adagrad and Adam (AdamW is Adam with decoupled weight
// decay), applying the same per-element update rules as the fused embedding optimizers
// (impl/optim/update_rules.h), so a dense and a sparse parameter with the same config move the
// same way.
//
// State is kept per tensor index, sized on the first step; the sharded variant steps on the
// local shard of each unit (element-wise rules, so sharding does not change the result).
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "impl/core/status.h"
#include "impl/dense/tensor.h"
#include "impl/optim/optimizer.h"

namespace shardrec::dense {

class DenseOptimizer {
 public:
  // Row-wise optimizers and LAMB have no dense meaning here and are refused.
  static Status Create(const optim::OptimizerConfig& config, std::unique_ptr<DenseOptimizer>* out);

  // One step over `tensors` (param -= f(grad)); the list must have the same length and counts
  // at every step (checked before anything changes).
  Status Step(std::span<const DenseTensor> tensors);

  const optim::OptimizerConfig& config() const { return config_; }
  void set_learning_rate(float lr) { config_.learning_rate = lr; }
  // The step count stays in [0, kMaxSteps], as the embedding collections' (ParamStore): a step
  // at kMaxSteps is refused (the next count would not be exact in Adam's double bias correction,
  // and at INT64_MAX it would wrap), and so are larger counts from a caller.
  static constexpr int64_t kMaxSteps = int64_t{1} << 53;
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  // State buffers of tensor i ("momentum1", "momentum2" as the embedding optimizers name them);
  // empty before the first step and for SGD.
  size_t num_states() const;
  std::span<float> state(size_t tensor, size_t which);
  // Number of tensors the optimizer steps over; 0 before the first step.
  size_t num_tensors() const { return counts_.size(); }

 private:
  DenseOptimizer() = default;

  optim::OptimizerConfig config_;
  int64_t steps_ = 0;
  std::vector<int64_t> counts_;
  std::vector<std::vector<float>> m1_, m2_;
};

}  // namespace shardrec::dense
