// The backward of a collection, after the output gradient has reached the shard owners: gradients
// are aggregated per unique row (scaled by 1/W), row statistics are summed across column shards,
// and the fused optimizer updates each touched row once. Data-parallel tables all-reduce a dense
// gradient instead. Owns the reusable buffers of these steps.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/comm/encoded.h"
#include "impl/core/exec.h"
#include "impl/embedding/dp_accumulate.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/output_dist.h"
#include "impl/embedding/param_store.h"
#include "impl/optim/optimizer.h"

namespace shardrec::embedding {

struct StepState;  // step_state.h
class HostReduce;  // host_reduce.h

namespace dynamic {
class DynamicTables;
}

// The optimizer applied to data-parallel tables' touched rows where their parameters live (a GPU
// collection's device): ApplyRows per table (the rows and gradients copied before it returns),
// then FinishRows once for all of them.
class RowApplier {
 public:
  virtual ~RowApplier() = default;
  virtual Status ApplyRows(int32_t local, const optim::OptimizerConfig& config, int64_t step,
                           std::span<const int64_t> rows, const float* grads) = 0;
  virtual Status FinishRows() = 0;
};

// This rank's own returned rows that its shards read where they lie in the output gradient
// (PackGradients' `in_place`), rather than from the self block the packing would copy them to:
// per unit, where its rows would start in the return message (a run's io_offset) and where they
// are read. Ascending io.
struct SelfGradRows {
  struct Run {
    int64_t io = 0;
    kernels::GradRowsAt at;
  };
  std::vector<Run> runs;

  // `runs` with grads_at set on those whose rows are listed here (a copy in *out), or `runs`
  // itself when none is.
  std::span<const kernels::BagRun> Apply(std::span<const kernels::BagRun> runs,
                                         std::vector<kernels::BagRun>* out) const;
};

class SparseUpdater {
 public:
  // `dynamic` (null: none) holds the collection's dynamic shards, whose rows are keyed for
  // stochastic rounding by the ids they hold (optim::ShardParams::row_ids).
  void Init(const Layout* layout, ParamStore* params,
            const dynamic::DynamicTables* dynamic = nullptr);

  // Both steps take each table's optimizer (configs[t] for table t).
  // Sharded tables. `grads` is the gradient message this rank received (laid out like the
  // forward return message it sent, so each run reads its gradient rows in place), except the
  // own rows `self` lists (null: none), read where it says. Row statistics travel over `comm`
  // (every rank takes part); `comm_seconds` accumulates the time spent in that collective.
  Status ApplySharded(const ExecContext& ctx, comm::Communicator& comm, const RoutedBatch& rb,
                      const float* grads, const std::vector<optim::OptimizerConfig>& configs,
                      int64_t step, double* comm_seconds, const SelfGradRows* self = nullptr);

  // Data-parallel tables: `grad` is the gradient of this rank's output; the dense table
  // gradients and touched-row masks are all-reduced over `dp_comm` (travelling as `encoding`,
  // summed in fp32) and divided by its size. A GPU collection passes its `device` rows,
  // which applies the optimizer to the touched rows on the device.
  Status ApplyDataParallel(const ExecContext& ctx, comm::Communicator& dp_comm,
                           comm::Encoding encoding, const RoutedBatch& rb, const float* grad,
                           const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                           double* comm_seconds, RowApplier* device = nullptr,
                           const PairRows* places = nullptr);

  // The pieces a GPU collection's backward (gpu/step.h) shares with the host one: whether a
  // shard takes the fused backward, the per-shard partial row statistics (host copies), their
  // exchange between column shards (every rank takes part), and the full statistics of a shard
  // summed over its row in column order (*full is null when the shard has no partial ones).
  bool FusedEligible(size_t local) const;
  // Whether local shard `local`'s optimizer needs no row statistics from sibling column shards
  // (none, or the shard holds whole rows): the host then always takes the fused backward.
  bool StatsStayInShard(size_t local) const;
  std::vector<float>& partial_stats(size_t local) { return partial_stats_[local]; }
  Status ExchangeRowStats(comm::Communicator& comm, double* comm_seconds);
  Status FullRowStats(size_t local, const float** full);
  // The exchange's plan without the packing and the collective, for a caller that moves the
  // statistics itself (a GPU collection over NCCL): floats per destination and per source rank,
  // the local shards whose partial statistics form the send message in order, and the receive
  // block (sized, its messages placed) that the caller fills before FullRowStats.
  void PlanRowStats(std::vector<size_t>* send_counts, std::vector<size_t>* recv_counts,
                    std::vector<size_t>* send_shards);
  float* stat_recv() { return stat_recv_.data(); }
  // Where stat message `m` (Layout::stat_messages) starts in the receive block PlanRowStats placed.
  size_t stat_recv_at(size_t m) const { return stat_recv_at_[m]; }

 private:
  // Groups the ids of local shard `local` in `workspace` (grown as needed) and either updates its
  // rows (the fused backward) or leaves their aggregated gradients and partial row statistics in
  // uniq_rows_ / uniq_grads_ / partial_stats_ for Update.
  Status BackwardShard(const ExecContext& ctx, size_t local, const RoutedBatch& rb,
                       const float* grads, const SelfGradRows* self,
                       const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                       std::vector<uint8_t>* workspace);
  // Applies `config` to the aggregated rows of local shard `local` (row statistics summed over
  // the whole row in column order).
  Status Update(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                size_t local);

  // The optimizer's view of local shard `local`: ParamStore::Params, with a dynamic shard's ids.
  optim::ShardParams ParamsOf(size_t local) const;

  const Layout* layout_ = nullptr;
  ParamStore* params_ = nullptr;
  const dynamic::DynamicTables* dynamic_ = nullptr;
  // Kernel scratch (grow-only): one per thread when shards run side by side, else the first
  // serves the shards in turn; free_workspaces_ (under workspace_mu_) are the ones not in use.
  std::vector<std::vector<uint8_t>> workspaces_;
  std::vector<size_t> free_workspaces_;
  std::mutex workspace_mu_;
  std::vector<size_t> shard_order_;   // the local shards with ids this step, in backward order
  std::vector<Status> shard_status_;  // per shard_order_ entry, when shards run side by side
  std::vector<std::vector<int64_t>> uniq_rows_;    // per local shard
  std::vector<std::vector<float>> uniq_grads_;     // per local shard
  std::vector<std::vector<float>> partial_stats_;  // per local shard
  std::vector<float> stat_send_;
  std::vector<float> stat_recv_;
  std::vector<size_t> stat_recv_at_;  // per stat message: offset in stat_recv_
  std::vector<float> full_stats_;
  std::vector<float> dp_grad_;
  DpBlockLayout dp_at_;           // per table (DP only): grads and touched flags in dp_grad_
  comm::EncodedScratch dp_wire_;  // 16-bit staging of an encoded all-reduce
};

// Backward, sample side: for every row that came back in forward, its slice of `grad` (divided by
// the bag's divisor for MEAN): the other ranks' rows into `send` in the layout `recv` had in
// forward, this rank's own rows straight to `self`, where its shards read their gradients.
// In parallel over rows on `ctx`. With wire.data the other ranks' rows go there encoded (and
// `send` is unused). With `places` (pooled, host only) pair p's row b of the gradient is read at
// places->Row(grad, p, b) (CombineOutput's places). With `in_place` (host shards only), the own
// rows of a unit that would copy them as they are (no MEAN divisor) and whose rows are each read
// once (its ids no more than its rows: one-id bags, sequence ids) are not copied: *in_place lists
// where they lie in `grad` (or the places' scratch), for SparseUpdater::ApplySharded to read them
// there, so `grad` and the scratch must stay unchanged until then.
void PackGradients(const ExecContext& ctx, const Layout& layout, const RoutedBatch& rb,
                   const float* grad, float* send, float* self, const WireRows& wire = {},
                   const PairRows* places = nullptr, SelfGradRows* in_place = nullptr);

// The end of a backward: the data-parallel tables' all-reduce over s.dp_comm and update (through
// `rows`, or on the host when null), then the count.
Status ApplyDataParallelTables(StepState& s, const RoutedBatch& rb, const float* grad, int64_t step,
                               RowApplier* rows);

// The host engine's backward of `rb` at `step`, once every rank agreed on it, in one call: the
// gradient's packing (the forward's return route backwards), its exchange over s.comm (encoded
// where the kernels encode it, WireInKernels), the sharded tables' fused updates and the
// data-parallel tables'. The gradient's rows are read at s.pair_rows' places when they are set.
// `reduce`, when given and active, carries an fp32 gradient exchange (host_reduce.h); null: flat.
Status ExchangeAndApplyGradients(StepState& s, const RoutedBatch& rb, const float* grad,
                                 int64_t step, HostReduce* reduce);

}  // namespace shardrec::embedding
