// The device step's backward phases (step.h): the data-parallel tables' rows, the device
// packing of a gradient, and the sharded tables' grouping, statistics and fused updates
// (ApplySharded).
#include <algorithm>
#include <cstring>
#include <span>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/sizing.h"
#include "impl/embedding/gpu/step.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

Status DeviceStep::ApplyRows(int32_t local, const optim::OptimizerConfig& config, int64_t step,
                             std::span<const int64_t> rows, const float* grads) {
  const Layout& l = *layout_;
  const LocalShard& ls = l.local[local];
  const int K = l.tables[ls.table].num_row_stats;
  const size_t u = rows.size();
  if (u == 0) return Status::Ok();
  // Rows and gradients in one block of the shard's own buffer, so one copy each table, and the
  // tables of this phase never share device memory (their copies and updates queue back to back
  // and are waited for once, by FinishRows).
  DeviceStaging::Piece p[2] = {{rows.data(), sizeof(int64_t) * u},
                               {grads, sizeof(float) * u * ls.cols}};
  SR_RETURN_IF_ERROR(bwd_.uniq_rows[local]->Reserve(device_, DeviceStaging::PackedBytes(p, 2),
                                                    "touched rows and their gradients", stream_));
  if (K > 0)
    SR_RETURN_IF_ERROR(
        bwd_.stats[local]->Reserve(device_, sizeof(float) * u * K, "row statistics", stream_));
  if (!bwd_.rows_phase) {
    SR_RETURN_IF_ERROR(staging_.Begin());
    bwd_.rows_phase = true;
  }
  size_t at[2] = {};
  SR_RETURN_IF_ERROR(staging_.Upload(bwd_.uniq_rows[local]->data(), p, 2, at));
  auto* dev = bwd_.uniq_rows[local]->as<uint8_t>();
  optim::ShardParams params = params_->Params(local);
  const optim::RowUpdate up{
      std::span<const int64_t>(reinterpret_cast<const int64_t*>(dev + at[0]), u),
      reinterpret_cast<const float*>(dev + at[1])};
  const float* stats = nullptr;
  launched_ = true;
  if (K > 0) {
    // Zeroed first, as the host path's statistics are.
    const core::CudaRuntime* rt = nullptr;
    SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
    SR_RETURN_IF_ERROR(
        rt->MemsetAsync(device_, bwd_.stats[local]->data(), 0, sizeof(float) * u * K, stream_));
    SR_RETURN_IF_ERROR(
        dk::PartialRowStats(ctx_, config, step, params, up, bwd_.stats[local]->as<float>()));
    stats = bwd_.stats[local]->as<float>();
  }
  return dk::Apply(ctx_, config, step, l.plan->tables[ls.table].dim, params, up, stats);
}

Status DeviceStep::FinishRows() {
  if (!bwd_.rows_phase) return Status::Ok();
  bwd_.rows_phase = false;
  return EndPhase(nullptr);
}

Status DeviceStep::InitDataParallel(const StepCapacity& capacity) {
  StepSizes z;
  if (capacity.known()) {
    // (The pinned block was sized for the data-parallel upload by Presize.)
    const std::vector<bool> fused(layout_->local.size(), true);
    SR_RETURN_IF_ERROR(ComputeStepSizes(*layout_, capacity, fused, false, &z));
  }
  return dp_.Init(layout_, params_, device_, stream_, z.dp_ids, z.dp_upload_bytes);
}

// The pack's tables (return targets, MEAN divisors, jobs, their first rows) as upload pieces, the
// jobs and rows still to be filled.
void DeviceStep::PackPieces(const RoutedBatch& rb, DeviceStaging::Piece* p, size_t* jobs) const {
  const Layout& l = *layout_;
  bool means = false;
  for (const Pair& pair : l.pairs) means = means || pair.mean;
  p[0] = {rb.ret_target.data(), sizeof(int64_t) * rb.ret_target.size()};
  p[1] = {means ? rb.mean_div.data() : nullptr, means ? sizeof(float) * rb.mean_div.size() : 0};
  *jobs = 0;
  for (int32_t d = 0; d < l.world; ++d)
    for (int32_t u : l.units_to_rank[d]) *jobs += rb.ret_count[u] > 0 ? 1 : 0;
  p[2] = {nullptr, sizeof(kernels::simt_body::PackJob) * *jobs};
  p[3] = {nullptr, sizeof(int64_t) * (*jobs + 1)};
}

Status DeviceStep::ReservePack(const RoutedBatch& rb) {
  DeviceStaging::Piece p[4];
  size_t jobs = 0;
  PackPieces(rb, p, &jobs);
  return bwd_.pack_buf.Reserve(device_, DeviceStaging::PackedBytes(p, 4),
                               "the gradient pack's tables", stream_);
}

Status DeviceStep::QueuePack(const RoutedBatch& rb, const float* grad_dev, float* send,
                             float* self) {
  const Layout& l = *layout_;
  // The tables' places in bwd_.pack_buf (DeviceStaging's packing: 16-byte aligned, in order), so
  // the jobs can point at the targets and divisors that ride in the same copy.
  DeviceStaging::Piece p[4];
  size_t jobs = 0;
  PackPieces(rb, p, &jobs);
  size_t at[4] = {};
  for (size_t k = 1; k < 4; ++k) at[k] = at[k - 1] + DeviceStaging::PackedBytes(&p[k - 1], 1);
  auto* base = bwd_.pack_buf.as<uint8_t>();
  const auto* d_targets = reinterpret_cast<const int64_t*>(base + at[0]);
  const auto* d_div = reinterpret_cast<const float*>(base + at[1]);
  bwd_.BuildPackJobs(l, rb, d_targets, d_div, send, self);
  p[2].host = bwd_.PackJobs().data();
  p[3].host = bwd_.PackFirst().data();
  size_t got[4] = {};
  SR_RETURN_IF_ERROR(staging_.Upload(base, p, 4, got));
  kernels::simt_body::PackParams pp;
  pp.grad = grad_dev;
  pp.stride = l.output_dim;
  pp.num_jobs = static_cast<int64_t>(jobs);
  pp.jobs = reinterpret_cast<const kernels::simt_body::PackJob*>(base + at[2]);
  pp.first_row = reinterpret_cast<const int64_t*>(base + at[3]);
  launched_ = true;
  return dk::PackGradients(ctx_, pp, bwd_.PackFirst().back());
}

Status DeviceStep::ApplySharded(comm::Communicator& comm, SparseUpdater& updater,
                                const RoutedBatch& rb,
                                const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                                double* comm_seconds, const ShardedInputs& in) {
  if (in.dp != nullptr && !dp_.active())
    return Status::Internal("ApplySharded: data-parallel work without InitDataParallel");
  // Which shards run, and every device buffer sized before anything is queued (a buffer that
  // grows waits for the stream; the staging block's copies must not be in flight then).
  // An aggregated shard whose row statistics need no sibling's (none, or a row block of one
  // shard) is "counted": its unique-row count stays on the device (GroupRowsGated writes it
  // there) and its statistics and update read it (RowPhaseCounted), so it needs no host wait.
  // The others read their counts on the host (any_aggregated) for the statistics' exchange.
  // Column shards' statistics are summed on the device too when their exchange goes between
  // device blocks (or stays on this rank): every shard is then counted, and the exchange happens
  // in the first phase on every rank.
  ShardedPlan plan;
  SR_RETURN_IF_ERROR(SizeSharded(updater, rb, in, &plan));
  SR_RETURN_IF_ERROR(QueueGroupPhase(updater, rb, configs, step, in, plan));
  SR_RETURN_IF_ERROR(StatsPhase(comm, updater, rb, configs, step, comm_seconds, in, plan));
  return UpdatePhase(updater, configs, step, in, plan);
}

Status DeviceStep::SizeSharded(SparseUpdater& updater, const RoutedBatch& rb,
                               const ShardedInputs& in, ShardedPlan* plan) {
  const Layout& l = *layout_;
  const size_t n = l.local.size();
  const float* grads = in.grads;
  const DeviceExchange* x = in.x;
  const bool grad_on_device = in.grad_on_device;
  const DeviceDpWork* dp = in.dp;
  const bool counted_exchange = (x != nullptr || l.world == 1) && !l.stat_messages.empty();
  bool any = false;
  bool any_aggregated = false;
  size_t ws_bytes = 0;
  bwd_.counted.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    bwd_.num_unique[i] = 0;
    updater.partial_stats(i).clear();
    const LocalShard& ls = l.local[i];
    if (l.tables[ls.table].data_parallel || rb.shards[i].num_ids == 0) continue;
    any = true;
    size_t need = 0;
    const TableLayout& tl = l.tables[ls.table];
    SR_RETURN_IF_ERROR(
        dk::BackwardWorkspaceBytes(ctx_, rb.shards[i].num_ids, ls.cols, tl.num_row_stats, &need));
    ws_bytes = std::max(ws_bytes, need);
    if (updater.FusedEligible(i)) continue;
    const bool alone = tl.blocks[FindRowBlock(tl, ls.row_offset)].shards.size() == 1;
    bwd_.counted[i] = tl.num_row_stats == 0 || alone || counted_exchange ? 1 : 0;
    if (!bwd_.counted[i]) any_aggregated = true;
    // Sized for every id, as the device kernel's contract asks; the first u rows are written.
    const auto ids = static_cast<size_t>(rb.shards[i].num_ids);
    SR_RETURN_IF_ERROR(
        bwd_.uniq_rows[i]->Reserve(device_, sizeof(int64_t) * ids, "unique rows", stream_));
    SR_RETURN_IF_ERROR(bwd_.uniq_grads[i]->Reserve(device_, sizeof(float) * ids * ls.cols,
                                                   "aggregated gradients", stream_));
    if (bwd_.counted[i] && tl.num_row_stats > 0)
      SR_RETURN_IF_ERROR(
          bwd_.stats[i]->Reserve(device_, sizeof(float) * CountedRowsMax(rb, i) * tl.num_row_stats,
                                 "row statistics", stream_));
  }
  SR_RETURN_IF_ERROR(bwd_.dev_counts.Reserve(device_, sizeof(int64_t) * std::max<size_t>(n, 1),
                                             "the unique-row counts", stream_));
  // The statistics' exchange of counted column shards, sized for their most rows (siblings get
  // the same ids, so both ends agree on every message's size; the rows past a shard's count are
  // not read).
  std::vector<size_t> cx_send_counts, cx_recv_counts, cx_send_shards;
  size_t cx_send_total = 0, cx_recv_total = 0, cx_full_total = 0;
  bwd_.full_at.assign(n, 0);
  if (counted_exchange) {
    for (size_t i = 0; i < n; ++i) {
      const LocalShard& ls = l.local[i];
      const TableLayout& tl = l.tables[ls.table];
      const int K = tl.num_row_stats;
      // Only column shards with siblings exchange (and sum) statistics.
      if (tl.data_parallel || K == 0 ||
          tl.blocks[FindRowBlock(tl, ls.row_offset)].shards.size() < 2)
        continue;
      const size_t rows = rb.shards[i].num_ids > 0 ? CountedRowsMax(rb, i) : 0;
      updater.partial_stats(i).resize(rows * K);
      bwd_.full_at[i] = cx_full_total;
      cx_full_total += rows * K;
    }
    updater.PlanRowStats(&cx_send_counts, &cx_recv_counts, &cx_send_shards);
    for (size_t c : cx_send_counts) cx_send_total += c;
    for (size_t c : cx_recv_counts) cx_recv_total += c;
    SR_RETURN_IF_ERROR(bwd_.stat_send.Reserve(device_, sizeof(float) * cx_send_total,
                                              "row statistics sent", stream_));
    SR_RETURN_IF_ERROR(bwd_.stat_recv.Reserve(device_, sizeof(float) * cx_recv_total,
                                              "row statistics received", stream_));
    SR_RETURN_IF_ERROR(
        bwd_.full_stats.Reserve(device_, sizeof(float) * cx_full_total, "row statistics", stream_));
  }
  const size_t bytes = sizeof(float) * rb.ret_floats_total;
  // With the device input the batch's ids are still in its slot block: only gradients go up.
  // With a device gradient nothing of the message goes up: it is packed into bwd_.dgrad_block (own
  // rows) and bwd_.a2a_send (the others').
  const DeviceStaging::Piece grad_piece{grads, bytes};
  if (grad_on_device) {
    SR_RETURN_IF_ERROR(
        bwd_.dgrad_block.Reserve(device_, bytes, "the gradients on the device", stream_));
    SR_RETURN_IF_ERROR(ReservePack(rb));
    if (any && !rb.device_input)
      SR_RETURN_IF_ERROR(ReserveRuns(rb, 0, "the batch's ids on the device"));
  } else if (any) {
    if (rb.device_input) {
      SR_RETURN_IF_ERROR(runs_buf_.Reserve(device_, DeviceStaging::PackedBytes(&grad_piece, 1),
                                           "the gradients on the device", stream_));
    } else {
      SR_RETURN_IF_ERROR(ReserveRuns(rb, bytes, "the batch's ids and gradients on the device"));
    }
  }
  if (any)
    SR_RETURN_IF_ERROR(
        bwd_.workspace.Reserve(device_, ws_bytes, "the backward workspace", stream_));
  size_t x_send = 0;
  size_t x_recv = 0;
  if (x != nullptr) {
    for (size_t c : x->send_counts) x_send += c;
    for (size_t c : x->recv_counts) x_recv += c;
    SR_RETURN_IF_ERROR(bwd_.a2a_send.Reserve(device_, sizeof(float) * x_send,
                                             "the gradient message on the device", stream_));
    // Without ids for its shards a rank receives nothing that a kernel reads; a block is still
    // the exchange's destination.
    if (!any)
      SR_RETURN_IF_ERROR(a2a_recv_.Reserve(device_, sizeof(float) * x_recv,
                                           "the received gradients on the device", stream_));
  }
  if (dp != nullptr) SR_RETURN_IF_ERROR(dp_.Reserve(rb, dp->host_grad_floats));
  if (in.verdict != nullptr) SR_RETURN_IF_ERROR(verdict_.Reserve(device_, stream_));
  plan->any = any;
  plan->any_aggregated = any_aggregated;
  plan->counted_exchange = counted_exchange;
  plan->cx_send_counts = std::move(cx_send_counts);
  plan->cx_recv_counts = std::move(cx_recv_counts);
  plan->cx_send_shards = std::move(cx_send_shards);
  plan->cx_send_total = cx_send_total;
  plan->x_send = x_send;
  return Status::Ok();
}

Status DeviceStep::QueueGroupPhase(SparseUpdater& updater, const RoutedBatch& rb,
                                   const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                                   const ShardedInputs& in, const ShardedPlan& plan) {
  const Layout& l = *layout_;
  const size_t n = l.local.size();
  const float* grads = in.grads;
  const DeviceExchange* x = in.x;
  const float* packed = in.packed;
  const float* grad_dev = in.grad_dev;
  const bool grad_on_device = in.grad_on_device;
  const DeviceDpWork* dp = in.dp;
  const bool any = plan.any;
  const bool any_aggregated = plan.any_aggregated;
  const size_t bytes = sizeof(float) * rb.ret_floats_total;
  const size_t x_send = plan.x_send;
  const DeviceStaging::Piece grad_piece{grads, bytes};
  // Phase 1: the runs and the gradient message in one copy, then every shard's grouping and its
  // fused backward or aggregation, the shards in turn on the one workspace (stream-ordered).
  SR_RETURN_IF_ERROR(staging_.Begin());
  // A gated backward's verdict first: the gradient is read behind the caller's work, and every
  // update below reads the agreed word.
  const int64_t* gate = nullptr;
  if (in.verdict != nullptr) SR_RETURN_IF_ERROR(QueueVerdict(*in.verdict, &gate));
  const float* dgrads = nullptr;
  if (grad_on_device) {
    dgrads = bwd_.dgrad_block.as<float>();
    if (any && rb.device_input) {
      PlaceRuns(rb);
    } else if (any) {
      SR_RETURN_IF_ERROR(UploadRuns(rb, static_cast<const DeviceStaging::Piece*>(nullptr), 0,
                                    static_cast<uint8_t**>(nullptr)));
    }
    SR_RETURN_IF_ERROR(QueuePack(rb, grad_dev, x != nullptr ? bwd_.a2a_send.as<float>() : nullptr,
                                 bwd_.dgrad_block.as<float>() + rb.ret_self_offset));
  } else if (any && rb.device_input) {
    uint8_t* g = nullptr;
    SR_RETURN_IF_ERROR(UploadExtras(&grad_piece, 1, &g));
    PlaceRuns(rb);
    dgrads = reinterpret_cast<const float*>(g);
  } else if (any) {
    void* g = nullptr;
    SR_RETURN_IF_ERROR(UploadRuns(rb, grads, bytes, &g));
    dgrads = static_cast<const float*>(g);
  }
  if (x != nullptr) {
    // The message goes up (or was packed on the device) and travels on the stream into the block
    // the kernels read (its travelling part; this rank's own rows came up with the runs or were
    // packed there), before any kernel.
    if (!grad_on_device)
      SR_RETURN_IF_ERROR(staging_.Upload(bwd_.a2a_send.data(), packed, sizeof(float) * x_send));
    comm::CallOptions o;
    o.stream = stream_;
    launched_ = true;
    void* dst = any ? const_cast<float*>(dgrads) : a2a_recv_.data();
    SR_RETURN_IF_ERROR(x->comm->AllToAllV(bwd_.a2a_send.data(), x->send_counts, dst, x->recv_counts,
                                          DType::kFloat32, o));
  }
  // The data-parallel tables' upload too, so every copy of the phase is queued before any update
  // (a failed copy then changes nothing).
  if (dp != nullptr)
    SR_RETURN_IF_ERROR(dp_.Upload(staging_, rb, dp->host_grad, dp->host_grad_floats));
  // TorchRec's gradient division, as on the host.
  const float scale = 1.0f / static_cast<float>(l.world);
  auto* counts = static_cast<int64_t*>(bwd_.count.data());
  for (size_t i = 0; i < n; ++i) {
    const LocalShard& ls = l.local[i];
    if (l.tables[ls.table].data_parallel || rb.shards[i].num_ids == 0) continue;
    const optim::OptimizerConfig& config = configs[ls.table];
    const kernels::DeviceRuns runs = Runs(i);
    // The count reaches the pinned word when the stream gets there: read after the wait.
    counts[i] = 0;
    launched_ = true;
    int64_t* dev_count = bwd_.counted[i] ? bwd_.dev_counts.as<int64_t>() + i : nullptr;
    if (gate != nullptr || dev_count != nullptr) {
      // A rejected step's grouping is emptied on the device: its updates change nothing. A
      // counted shard's count stays on the device.
      SR_RETURN_IF_ERROR(
          dk::GroupRowsGated(ctx_, runs, bwd_.workspace.data(), bwd_.workspace.bytes(),
                             dev_count != nullptr ? nullptr : &counts[i], dev_count, gate));
    } else {
      SR_RETURN_IF_ERROR(
          dk::GroupRows(ctx_, runs, bwd_.workspace.data(), bwd_.workspace.bytes(), &counts[i]));
    }
    if (updater.FusedEligible(i)) {
      optim::ShardParams params = params_->Params(static_cast<int32_t>(i));
      SR_RETURN_IF_ERROR(dk::FusedBackward(ctx_, runs, dgrads, ls.cols, scale, config, step,
                                           l.plan->tables[ls.table].dim, params,
                                           bwd_.workspace.data()));
      continue;
    }
    SR_RETURN_IF_ERROR(dk::AggregateGrads(ctx_, runs, dgrads, ls.cols, ls.cols, scale,
                                          bwd_.workspace.data(), bwd_.uniq_rows[i]->as<int64_t>(),
                                          bwd_.uniq_grads[i]->as<float>()));
    if (bwd_.counted[i]) {
      // A shard with siblings' statistics to add waits for the exchange below for its update.
      const TableLayout& tl = l.tables[ls.table];
      const bool siblings =
          tl.num_row_stats > 0 && tl.blocks[FindRowBlock(tl, ls.row_offset)].shards.size() > 1;
      SR_RETURN_IF_ERROR(QueueCountedUpdate(rb, i, config, step, dev_count, !siblings));
    }
  }
  // The data-parallel tables behind the sharded ones, in the same phase (dp.h): their
  // all-reduce follows the gradient exchange on every rank.
  if (dp != nullptr) {
    launched_ = true;
    SR_RETURN_IF_ERROR(dp_.Queue(grad_dev, dp->comm, dp->comm_size, gate, configs, step));
  }
  if (plan.counted_exchange)
    SR_RETURN_IF_ERROR(QueueCountedExchange(updater, rb, x, plan.cx_send_counts,
                                            plan.cx_recv_counts, plan.cx_send_shards,
                                            plan.cx_send_total, configs, step));
  // Aggregated shards need their unique-row counts on the host: the first wait. A backward of
  // fused shards only goes straight on to its one wait at the end.
  if (any_aggregated) SR_RETURN_IF_ERROR(EndPhase(nullptr));
  return Status::Ok();
}

Status DeviceStep::StatsPhase(comm::Communicator& comm, SparseUpdater& updater,
                              const RoutedBatch& rb,
                              const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                              double* comm_seconds, const ShardedInputs& in,
                              const ShardedPlan& plan) {
  const Layout& l = *layout_;
  const size_t n = l.local.size();
  const DeviceExchange* x = in.x;
  const bool any_aggregated = plan.any_aggregated;
  const bool counted_exchange = plan.counted_exchange;
  const auto* counts = static_cast<const int64_t*>(bwd_.count.data());
  // Phase 2: partial row statistics of the aggregated shards, downloaded for the exchange.
  bool stats_queued = false;
  for (size_t i = 0; any_aggregated && i < n; ++i) {
    const LocalShard& ls = l.local[i];
    if (l.tables[ls.table].data_parallel || rb.shards[i].num_ids == 0) continue;
    if (updater.FusedEligible(i) || bwd_.counted[i]) continue;
    bwd_.num_unique[i] = counts[i];
    const int K = l.tables[ls.table].num_row_stats;
    const auto u = static_cast<size_t>(counts[i]);
    if (K == 0 || u == 0) continue;
    SR_RETURN_IF_ERROR(
        bwd_.stats[i]->Reserve(device_, sizeof(float) * u * K, "row statistics", stream_));
  }
  // Over a device communicator the statistics travel between device blocks within this phase
  // (its one wait): every partial size is known from the counts, so the plan comes first.
  const bool stats_on_device = x != nullptr && !l.stat_messages.empty() && !counted_exchange;
  std::vector<size_t> stat_send_counts, stat_recv_counts, stat_send_shards;
  size_t stat_send_total = 0;
  size_t stat_recv_total = 0;
  if (stats_on_device) {
    for (size_t i = 0; any_aggregated && i < n; ++i) {
      const int K = l.tables[l.local[i].table].num_row_stats;
      updater.partial_stats(i).resize(static_cast<size_t>(bwd_.num_unique[i]) * K);
    }
    updater.PlanRowStats(&stat_send_counts, &stat_recv_counts, &stat_send_shards);
    for (size_t c : stat_send_counts) stat_send_total += c;
    for (size_t c : stat_recv_counts) stat_recv_total += c;
    SR_RETURN_IF_ERROR(bwd_.stat_send.Reserve(device_, sizeof(float) * stat_send_total,
                                              "row statistics sent", stream_));
    SR_RETURN_IF_ERROR(bwd_.stat_recv.Reserve(device_, sizeof(float) * stat_recv_total,
                                              "row statistics received", stream_));
  }
  for (size_t i = 0; any_aggregated && i < n; ++i) {
    const LocalShard& ls = l.local[i];
    const int K = l.tables[ls.table].num_row_stats;
    const auto u = static_cast<size_t>(bwd_.num_unique[i]);
    if (K == 0 || u == 0) continue;
    if (!stats_queued) SR_RETURN_IF_ERROR(staging_.Begin());
    stats_queued = true;
    optim::ShardParams params = params_->Params(static_cast<int32_t>(i));
    const optim::RowUpdate up{std::span<const int64_t>(bwd_.uniq_rows[i]->as<int64_t>(), u),
                              bwd_.uniq_grads[i]->as<float>()};
    launched_ = true;
    SR_RETURN_IF_ERROR(
        dk::PartialRowStats(ctx_, configs[ls.table], step, params, up, bwd_.stats[i]->as<float>()));
    std::vector<float>& host_stats = updater.partial_stats(i);
    host_stats.resize(u * K);
    SR_RETURN_IF_ERROR(
        staging_.Download(host_stats.data(), bwd_.stats[i]->data(), sizeof(float) * u * K));
  }
  if (stats_on_device) {
    // Packed on the device behind the kernels that wrote them, all-to-all'd, the received ones
    // downloaded with the own ones. A rank without statistics of its own sends and receives
    // nothing (its phase has no copies) but takes part.
    const core::CudaRuntime* rt = nullptr;
    SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
    SR_RETURN_IF_ERROR(QueueStatsIntoSendBlock(*rt, updater, stat_send_shards));
    comm::CallOptions o;
    o.stream = stream_;
    launched_ = true;
    SR_RETURN_IF_ERROR(x->comm->AllToAllV(bwd_.stat_send.data(), stat_send_counts,
                                          bwd_.stat_recv.data(), stat_recv_counts, DType::kFloat32,
                                          o));
    if (stat_recv_total > 0)
      SR_RETURN_IF_ERROR(staging_.Download(updater.stat_recv(), bwd_.stat_recv.data(),
                                           sizeof(float) * stat_recv_total));
  }
  if (stats_queued) SR_RETURN_IF_ERROR(EndPhase(nullptr));
  // The statistics of sibling column shards travel over the host communicator, as on the host.
  if (!stats_on_device && !counted_exchange)
    SR_RETURN_IF_ERROR(updater.ExchangeRowStats(comm, comm_seconds));
  return Status::Ok();
}

Status DeviceStep::UpdatePhase(SparseUpdater& updater,
                               const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                               const ShardedInputs& in, const ShardedPlan& plan) {
  const Layout& l = *layout_;
  const size_t n = l.local.size();
  const DeviceExchange* x = in.x;
  // Phase 3: the full statistics up and the updates, back to back, then the step's last wait.
  // One device block per shard's statistics (the updates are queued before any is waited for).
  size_t total_stats = 0;
  for (size_t i = 0; i < n; ++i)
    if (bwd_.num_unique[i] > 0) total_stats += updater.partial_stats(i).size();
  SR_RETURN_IF_ERROR(
      bwd_.full_stats.Reserve(device_, sizeof(float) * total_stats, "row statistics", stream_));
  if (plan.any_aggregated) SR_RETURN_IF_ERROR(staging_.Begin());
  size_t stats_at = 0;
  for (size_t i = 0; i < n; ++i) {
    if (bwd_.num_unique[i] == 0) continue;
    const LocalShard& ls = l.local[i];
    const auto u = static_cast<size_t>(bwd_.num_unique[i]);
    const float* full = nullptr;
    SR_RETURN_IF_ERROR(updater.FullRowStats(i, &full));
    const float* dfull = nullptr;
    if (full != nullptr) {
      const size_t k = updater.partial_stats(i).size();
      float* dst = bwd_.full_stats.as<float>() + stats_at;
      SR_RETURN_IF_ERROR(staging_.Upload(dst, full, sizeof(float) * k));
      stats_at += k;
      dfull = dst;
    }
    optim::ShardParams params = params_->Params(static_cast<int32_t>(i));
    const optim::RowUpdate up{std::span<const int64_t>(bwd_.uniq_rows[i]->as<int64_t>(), u),
                              bwd_.uniq_grads[i]->as<float>()};
    launched_ = true;
    SR_RETURN_IF_ERROR(
        dk::Apply(ctx_, configs[ls.table], step, l.plan->tables[ls.table].dim, params, up, dfull));
  }
  if (in.async && in.verdict != nullptr) {
    // Stream-ordered: the phase stays queued (its verdict comes down at the next wait) and the
    // caller's later work on its stream is ordered behind the reads of its gradient.
    SR_RETURN_IF_ERROR(EndPhaseDeferred(nullptr, x != nullptr ? x->comm : nullptr));
    if (in.verdict->caller != stream_)
      SR_RETURN_IF_ERROR(dk::StreamWaitStream(device_, in.verdict->caller, stream_));
    return Status::Ok();
  }
  // The step's sync point: no device work is left in flight when backward returns.
  SR_RETURN_IF_ERROR(EndPhase(nullptr));
  return x != nullptr ? x->comm->AsyncError() : Status::Ok();
}

}  // namespace shardrec::embedding
