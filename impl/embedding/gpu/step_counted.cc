// Aggregated shards whose unique-row counts stay on the device (step.h: "counted"):
// their statistics, the column shards' exchange and sum of them, and their updates.
#include <algorithm>
#include <cstring>
#include <vector>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/step.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

int64_t DeviceStep::CountedRowsMax(const RoutedBatch& rb, size_t i) const {
  return std::min<int64_t>(rb.shards[i].num_ids, layout_->local[i].rows);
}

Status DeviceStep::QueueCountedUpdate(const RoutedBatch& rb, size_t i,
                                      const optim::OptimizerConfig& config, int64_t step,
                                      const int64_t* count, bool apply) {
  const LocalShard& ls = layout_->local[i];
  const int K = layout_->tables[ls.table].num_row_stats;
  kernels::CountedRows rows;
  rows.rows = bwd_.uniq_rows[i]->as<int64_t>();
  rows.grads = bwd_.uniq_grads[i]->as<float>();
  rows.count = count;
  rows.max_rows = CountedRowsMax(rb, i);
  optim::ShardParams params = params_->Params(static_cast<int32_t>(i));
  const int32_t full_dim = layout_->plan->tables[ls.table].dim;
  // The shard holds its rows' whole statistics (no sibling): phase 1's are the full ones.
  float* stats = K > 0 ? bwd_.stats[i]->as<float>() : nullptr;
  if (K > 0)
    SR_RETURN_IF_ERROR(
        dk::RowPhaseCounted(ctx_, config, step, full_dim, params, rows, stats, nullptr, 1));
  if (!apply) return Status::Ok();
  return dk::RowPhaseCounted(ctx_, config, step, full_dim, params, rows, nullptr, stats, 2);
}

Status DeviceStep::QueueStatsIntoSendBlock(const core::CudaRuntime& rt, SparseUpdater& updater,
                                           const std::vector<size_t>& shards) {
  size_t at = 0;
  for (size_t i : shards) {
    const size_t k = updater.partial_stats(i).size();
    if (k > 0)
      SR_RETURN_IF_ERROR(rt.MemcpyAsync(device_, bwd_.stat_send.as<float>() + at,
                                        bwd_.stats[i]->data(), sizeof(float) * k,
                                        core::CopyKind::kDeviceToDevice, stream_));
    at += k;
  }
  return Status::Ok();
}

Status DeviceStep::QueueCountedExchange(SparseUpdater& updater, const RoutedBatch& rb,
                                        const DeviceExchange* x,
                                        const std::vector<size_t>& send_counts,
                                        const std::vector<size_t>& recv_counts,
                                        const std::vector<size_t>& send_shards, size_t send_total,
                                        const std::vector<optim::OptimizerConfig>& configs,
                                        int64_t step) {
  const Layout& l = *layout_;
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  launched_ = true;
  // Each shard's partial statistics into the send block (the plan's order and sizes).
  SR_RETURN_IF_ERROR(QueueStatsIntoSendBlock(*rt, updater, send_shards));
  // Between device blocks over the communicator; alone, every message is this rank's own, in
  // the same order on both sides: one copy.
  if (x != nullptr) {
    comm::CallOptions o;
    o.stream = stream_;
    SR_RETURN_IF_ERROR(x->comm->AllToAllV(bwd_.stat_send.data(), send_counts, bwd_.stat_recv.data(),
                                          recv_counts, DType::kFloat32, o));
  } else if (send_total > 0) {
    SR_RETURN_IF_ERROR(rt->MemcpyAsync(device_, bwd_.stat_recv.data(), bwd_.stat_send.data(),
                                       sizeof(float) * send_total, core::CopyKind::kDeviceToDevice,
                                       stream_));
  }
  // Each column shard's full statistics, its siblings' added in column order (FullRowStats'
  // order), then its update.
  for (size_t i = 0; i < l.local.size(); ++i) {
    const LocalShard& ls = l.local[i];
    const TableLayout& tl = l.tables[ls.table];
    const int K = tl.num_row_stats;
    if (!bwd_.counted[i] || K == 0 || rb.shards[i].num_ids == 0) continue;
    const RowBlock& block = tl.blocks[FindRowBlock(tl, ls.row_offset)];
    if (block.shards.size() <= 1) continue;
    std::vector<const float*> sources;
    for (int32_t sib : block.shards) {
      if (sib == ls.shard) {
        sources.push_back(bwd_.stats[i]->as<float>());
        continue;
      }
      const float* src = nullptr;
      for (size_t j = 0; j < l.stat_messages.size() && src == nullptr; ++j) {
        const StatMessage& m = l.stat_messages[j];
        if (m.table == ls.table && m.from_shard == sib && m.to_shard == ls.shard)
          src = bwd_.stat_recv.as<float>() + updater.stat_recv_at(j);
      }
      if (src == nullptr) return Status::Internal("missing row statistics of a column shard");
      sources.push_back(src);
    }
    float* full = bwd_.full_stats.as<float>() + bwd_.full_at[i];
    const int64_t* count = bwd_.dev_counts.as<int64_t>() + i;
    const int64_t max_rows = CountedRowsMax(rb, i);
    for (size_t first = 0; first < sources.size();
         first += static_cast<size_t>(kernels::simt_body::kMaxSumSources)) {
      kernels::simt_body::SumSourcesParams p;
      p.num_sources = static_cast<int32_t>(std::min<size_t>(
          sources.size() - first, static_cast<size_t>(kernels::simt_body::kMaxSumSources)));
      for (int32_t k = 0; k < p.num_sources; ++k) p.sources[k] = sources[first + k];
      p.accumulate = first > 0 ? 1 : 0;
      p.row_floats = K;
      p.max_rows = max_rows;
      p.count = count;
      p.dst = full;
      SR_RETURN_IF_ERROR(dk::SumSources(ctx_, p));
    }
    kernels::CountedRows rows;
    rows.rows = bwd_.uniq_rows[i]->as<int64_t>();
    rows.grads = bwd_.uniq_grads[i]->as<float>();
    rows.count = count;
    rows.max_rows = max_rows;
    optim::ShardParams params = params_->Params(static_cast<int32_t>(i));
    SR_RETURN_IF_ERROR(dk::RowPhaseCounted(ctx_, configs[ls.table], step,
                                           l.plan->tables[ls.table].dim, params, rows, nullptr,
                                           full, 2));
  }
  return Status::Ok();
}

}  // namespace shardrec::embedding
