#include "impl/dense/optimizer.h"

#include "impl/optim/update_rules.h"

namespace shardrec::dense {

using optim::OptimizerType;

Status DenseOptimizer::Create(const optim::OptimizerConfig& config,
                              std::unique_ptr<DenseOptimizer>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  Status s = optim::ValidateConfig(config);
  if (!s.ok()) return s;
  if (config.type != OptimizerType::kSgd && config.type != OptimizerType::kAdagrad &&
      config.type != OptimizerType::kAdam) {
    return Status::InvalidArgument("dense optimizer ", optim::OptimizerName(config.type),
                                   " is not supported (use SGD, ADAGRAD or ADAM; AdamW is ADAM "
                                   "with decoupled weight decay)");
  }
  std::unique_ptr<DenseOptimizer> o(new DenseOptimizer());
  o->config_ = config;
  *out = std::move(o);
  return Status::Ok();
}

size_t DenseOptimizer::num_states() const {
  switch (config_.type) {
    case OptimizerType::kAdagrad:
      return 1;
    case OptimizerType::kAdam:
      return 2;
    default:
      return 0;
  }
}

std::span<float> DenseOptimizer::state(size_t tensor, size_t which) {
  auto& v = which == 0 ? m1_ : m2_;
  if (tensor >= v.size() || which >= num_states()) return {};
  return {v[tensor].data(), v[tensor].size()};
}

Status DenseOptimizer::Step(std::span<const DenseTensor> tensors) {
  if (steps_ >= kMaxSteps) {
    return Status::InvalidUsage("dense optimizer: the step count is at its maximum, ", kMaxSteps,
                                " (2^53); set_steps lower to go on");
  }
  if (!counts_.empty()) {
    if (counts_.size() != tensors.size()) {
      return Status::InvalidArgument("dense optimizer step over ", tensors.size(),
                                     " tensors; it was set up for ", counts_.size());
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].count != counts_[i]) {
        return Status::InvalidArgument("dense optimizer: tensor ", i, " (", tensors[i].name,
                                       ") has ", tensors[i].count, " elements; it had ",
                                       counts_[i]);
      }
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].count < 0 ||
        (tensors[i].count > 0 && (tensors[i].param == nullptr || tensors[i].grad == nullptr))) {
      return Status::InvalidArgument("dense optimizer: tensor ", i, " (", tensors[i].name,
                                     ") has no storage");
    }
  }
  if (counts_.empty()) {
    const size_t states = num_states();
    for (const auto& t : tensors) {
      counts_.push_back(t.count);
      m1_.emplace_back(states >= 1 ? t.count : 0, 0.0f);
      m2_.emplace_back(states >= 2 ? t.count : 0, 0.0f);
    }
  }
  ++steps_;
  const optim::RuleScalars s = optim::MakeRuleScalars(config_, steps_);
  for (size_t i = 0; i < tensors.size(); ++i) {
    float* w = tensors[i].param;
    const float* g = tensors[i].grad;
    const int64_t n = tensors[i].count;
    switch (config_.type) {
      case OptimizerType::kSgd:
        for (int64_t k = 0; k < n; ++k) w[k] = optim::SgdUpdate(w[k], g[k], s);
        break;
      case OptimizerType::kAdagrad:
        for (int64_t k = 0; k < n; ++k) w[k] = optim::AdagradUpdate(w[k], g[k], &m1_[i][k], s);
        break;
      case OptimizerType::kAdam:
        for (int64_t k = 0; k < n; ++k) {
          w[k] = optim::AdamUpdate(w[k], g[k], &m1_[i][k], &m2_[i][k], s);
        }
        break;
      default:
        break;
    }
  }
  return Status::Ok();
}

}  // namespace shardrec::dense
