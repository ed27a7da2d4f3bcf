// Fully sharded data parallelism (ZeRO-3 / FSDP, Zhao et al. VLDB 2023): parameters are grouped
// into flat units; each rank keeps 1/W of every unit's parameters, of its gradient and of its
// optimizer state. A unit's full parameters exist only while it is in use: Gather all-gathers
// them (and may prefetch the next unit on the communication worker), Release frees them.
// ReduceGrad reduce-scatters a unit's full gradient into the local shard (asynchronously) and
// frees it; Step applies the optimizer to the local shards.
//
// The gradient average is the same rank-ordered reduce-scatter the DDP bucketer uses and the
// optimizer is element-wise, so in fp32 the result equals DDP's bit for bit.
// Thread-safety: one thread at a time; the worker is internal.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/comm/work.h"
#include "impl/core/status.h"
#include "impl/dense/optimizer.h"

namespace shardrec::ddp {

class ShardedParams {
 public:
  // Collective. `initial[u]` holds unit u's full initial values (count[u] elements) and must be
  // the same on every rank (each rank keeps its slice). Communicates on a private split of comm.
  // `local`: the caller's verdict on arguments it checked itself; a rank refusing its arguments
  // still meets its peers' agreement (comm/agree.h), so over a host communicator every rank
  // fails at once.
  static Status Create(std::shared_ptr<comm::Communicator> comm, std::vector<int64_t> counts,
                       const std::vector<const float*>& initial,
                       const optim::OptimizerConfig& optimizer, std::unique_ptr<ShardedParams>* out,
                       const Status& local = Status::Ok());
  ~ShardedParams();

  size_t num_units() const { return counts_.size(); }
  int64_t count(size_t u) const { return counts_[u]; }
  // Elements of unit u this rank holds, and the first of them within the unit: the unit is cut
  // into W blocks of ceil(count / W) elements in rank order (the last ones may be short or
  // empty).
  int64_t shard_count(size_t u) const { return shard_[u]; }
  int64_t shard_offset(size_t u) const { return offset_[u]; }

  // Full parameters of unit u, valid until Release(u) (or the next Step). Waits for a prefetch
  // of u if one is in flight. With prefetch >= 0, starts gathering that unit in the background.
  Status Gather(size_t u, int64_t prefetch, float** full);
  Status Release(size_t u);
  // The unit's full gradient buffer (zeroed when first handed out in a step); backward
  // accumulates into it.
  Status Grad(size_t u, float** full);
  // Starts averaging unit u's gradient into the local shard; the full buffer is freed after.
  Status ReduceGrad(size_t u);
  // Waits for every reduction, applies the optimizer to the local shards, clears gradients.
  // A unit whose gradient this rank never reduced is reduced here with zeros from this rank and
  // applied like every other unit (so all ranks stay identical, whichever of them missed it);
  // the step then returns InvalidUsage naming it. A communication failure applies nothing.
  Status Step();

  // The local shard of unit u (parameters), e.g. for checkpoints.
  float* shard(size_t u) { return params_[u].data(); }
  dense::DenseOptimizer& optimizer() { return *optimizer_; }
  // Bytes this rank holds now and at most so far: shards, optimizer state, gathered units and
  // gradient buffers.
  int64_t memory_bytes() const {
    std::lock_guard<std::mutex> lock(bytes_mu_);
    return bytes_;
  }
  int64_t peak_memory_bytes() const {
    std::lock_guard<std::mutex> lock(bytes_mu_);
    return peak_;
  }

 private:
  ShardedParams() = default;
  void Account(int64_t delta);
  Status WaitGather(size_t u);

  std::shared_ptr<comm::Communicator> comm_;
  std::vector<int64_t> offset_;
  std::vector<int64_t> counts_, shard_;
  std::vector<std::vector<float>> params_, grad_shard_;  // local shards
  std::vector<std::vector<float>> full_, full_grad_;     // transient full buffers
  std::vector<std::shared_ptr<comm::Work>> gather_work_, reduce_work_;
  std::vector<bool> reduced_;
  std::unique_ptr<dense::DenseOptimizer> optimizer_;
  // The worker frees a unit's full gradient once it is reduced, so the counters are shared.
  mutable std::mutex bytes_mu_;
  int64_t bytes_ = 0, peak_ = 0;
  std::unique_ptr<comm::CommWorker> worker_;  // last: joined first
};

}  // namespace shardrec::ddp
