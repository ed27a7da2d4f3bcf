// Both optimizer phases for one row at a time (the fused host backward's update).
#pragma once

#include <cstdint>
#include <vector>

#include "impl/optim/optimizer.h"
#include "impl/optim/update_rules.h"

namespace shardrec::optim {

// What PartialRowStats then Apply do to one row, bit for bit, for a host shard that holds whole
// rows whenever the optimizer has row statistics (cols == full_dim: a row's statistics are then
// complete on their own): the fused
// backward updates each row right after summing its gradient, while the row is in L1, instead
// of two more passes over a block of rows. The config and the shard must outlive the updater;
// one updater per thread (it keeps a row buffer for 16-bit weights).
class WholeRowUpdater {
 public:
  WholeRowUpdater(const OptimizerConfig& config, int64_t step, int32_t full_dim,
                  ShardParams& shard);
  // Updates local row `row` with its aggregated (scaled, summed) gradient of cols floats.
  void Update(int64_t row, const float* grad);

 private:
  const OptimizerConfig& config_;
  int64_t step_;
  int32_t full_dim_;
  ShardParams& shard_;
  RuleScalars scalars_;
  bool row_wise_[2] = {false, false};
  int num_states_ = 0;
  std::vector<float> buf_;  // a 16-bit row widened to fp32
};

}  // namespace shardrec::optim
