// A simulation of 2D training for the tests: R independent unsharded reference models, one per
// sharding group, each trained on its group's batches (gradient scale 1/S), averaged element-wise
// (weights, and optimizer state unless weights-only) every `interval` steps; an FP8 table's
// averaged rows are encoded again (RoundRowToFp8), as the library's sync does.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {

template <typename... Args>
std::string StrCatName(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

struct SimResult {
  // outputs[step][global rank]: the forward output each rank must produce.
  std::vector<std::vector<std::vector<float>>> outputs;
};

class ReplicaSim {
 public:
  // `s` is the scenario of one sharding group (s.world = S); `world` the global size.
  ReplicaSim(const Scenario& s, int32_t world, int32_t layout, int32_t interval, bool weights_only);

  int32_t GroupOf(int32_t rank) const;     // sharding group of a global rank
  int32_t PlanRankOf(int32_t rank) const;  // its plan rank inside the group
  const ReferenceModel& model(int32_t group) const { return models_[group]; }

  SimResult Train(const std::vector<std::vector<RefBatch>>& batches,
                  const std::vector<std::vector<std::vector<float>>>& grads);

 private:
  void Average();

  int32_t world_, shard_size_, replicas_, layout_, interval_;
  bool weights_only_;
  size_t num_tables_;
  std::vector<RefTable> tables_;
  std::vector<ReferenceModel> models_;
};

}  // namespace shardrec::testing
