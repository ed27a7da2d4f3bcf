// The device half of a GPU collection's forward and backward (device_step.h).
#include "impl/embedding/device_step.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/kernels/device_dispatch.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

namespace {

size_t Align16(size_t n) { return (n + 15) & ~size_t{15}; }

// A host range of the routed batch and where its copy starts in the device buffer.
struct Segment {
  const uint8_t* host = nullptr;
  size_t bytes = 0;
  size_t at = 0;
};

// Lays the segments out 16-byte aligned in `buf` (grown as needed) and copies each one there with
// copy(device_dst, host_src, bytes).
template <class CopyFn>
Status UploadSegments(Segment (&seg)[3], int device, DeviceBuffer& buf, const char* what,
                      const CopyFn& copy) {
  size_t total = 0;
  for (Segment& s : seg) {
    s.at = total;
    total += Align16(s.bytes);
  }
  SR_RETURN_IF_ERROR(buf.Reserve(device, total, what));
  auto* dev = buf.as<uint8_t>();
  for (const Segment& s : seg) SR_RETURN_IF_ERROR(copy(dev + s.at, s.host, s.bytes));
  return Status::Ok();
}

}  // namespace

Status DeviceStep::Init(const Layout* layout, ParamStore* params, int device) {
  layout_ = layout;
  params_ = params;
  device_ = device;
  ctx_ = ExecContext::Cuda(device, nullptr);
  SR_RETURN_IF_ERROR(dk::CheckPlugin());
  size_t bytes = 0;
  SR_RETURN_IF_ERROR(dk::StatusBytes(ctx_, &bytes));
  SR_RETURN_IF_ERROR(status_.Reserve(device, bytes, "the lookup status block"));
  SR_RETURN_IF_ERROR(count_.Reserve(sizeof(int64_t)));
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  // Zero bytes are the block's clear state; ReadStatus clears it again after every read.
  if (bytes > 0) SR_RETURN_IF_ERROR(rt->MemsetAsync(device, status_.data(), 0, bytes, nullptr));
  SR_RETURN_IF_ERROR(rt->StreamWait(device, nullptr, kDeviceWaitMs));
  const size_t n = layout->local.size();
  runs_.assign(n, {});
  num_ids_.assign(n, {});
  num_unique_.assign(n, 0);
  uniq_rows_.clear();
  uniq_grads_.clear();
  stats_.clear();
  for (size_t i = 0; i < n; ++i) {
    uniq_rows_.push_back(std::make_unique<DeviceBuffer>());
    uniq_grads_.push_back(std::make_unique<DeviceBuffer>());
    stats_.push_back(std::make_unique<DeviceBuffer>());
  }
  return Status::Ok();
}

Status DeviceStep::Wait() {
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->StreamWait(device_, nullptr, kDeviceWaitMs);
}

Status DeviceStep::Copy(void* dst, const void* src, size_t bytes, bool to_device) {
  if (bytes == 0) return Status::Ok();
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  SR_RETURN_IF_ERROR(rt->MemcpyAsync(
      device_, dst, src, bytes,
      to_device ? core::CopyKind::kHostToDevice : core::CopyKind::kDeviceToHost, nullptr));
  return rt->StreamWait(device_, nullptr, kDeviceWaitMs);
}

Status DeviceStep::UploadRuns(const RoutedBatch& rb) {
  // Every run points into one of three host ranges: the ids received from the other ranks, this
  // rank's message to itself (the end of its send buffer) and the CSR bag offsets.
  Segment seg[3];
  seg[0] = {rb.recv.data(), rb.recv.size(), 0};
  seg[1] = {rb.send.data() + rb.self_offset, rb.send.size() - rb.self_offset, 0};
  seg[2] = {reinterpret_cast<const uint8_t*>(rb.bag_offsets.data()),
            sizeof(int64_t) * rb.bag_offsets.size(), 0};
  const auto to_device = [this](void* d, const void* h, size_t n) { return Copy(d, h, n, true); };
  SR_RETURN_IF_ERROR(
      UploadSegments(seg, device_, runs_buf_, "the batch's ids on the device", to_device));
  auto* dev = runs_buf_.as<uint8_t>();
  Status bad;
  const auto translate = [&](const auto* p) -> decltype(p) {
    if (p == nullptr) return p;
    const auto* b = reinterpret_cast<const uint8_t*>(p);
    for (const Segment& s : seg) {
      if (s.bytes > 0 && b >= s.host && b < s.host + s.bytes)
        return reinterpret_cast<decltype(p)>(dev + s.at + (b - s.host));
    }
    bad = Status::Internal("a run points outside the routed batch's buffers");
    return nullptr;
  };
  for (size_t i = 0; i < rb.shards.size(); ++i) {
    runs_[i].clear();
    num_ids_[i].clear();
    for (const kernels::BagRun& run : rb.shards[i].runs) {
      num_ids_[i].push_back(run.num_ids());
      kernels::BagRun d = run;
      d.offsets = translate(run.offsets);
      d.rows = translate(run.rows);
      d.weights = translate(run.weights);
      runs_[i].push_back(d);
    }
  }
  return bad;
}

kernels::DeviceRuns DeviceStep::Runs(size_t i) const {
  return kernels::DeviceRuns{runs_[i], num_ids_[i], layout_->local[i].rows};
}

Status DeviceStep::LookupToSend(const RoutedBatch& rb, float* send) {
  SR_RETURN_IF_ERROR(UploadRuns(rb));
  const size_t bytes = sizeof(float) * rb.ret_floats_total;
  SR_RETURN_IF_ERROR(io_.Reserve(device_, bytes, "the return message on the device"));
  auto* io = io_.as<float>();
  jobs_.clear();
  for (size_t i = 0; i < layout_->local.size(); ++i) {
    const LocalShard& ls = layout_->local[i];
    const kernels::WeightsView w = params_->View(ls);
    for (const kernels::BagRun& run : runs_[i])
      jobs_.push_back(kernels::LookupJob{w, run, io, ls.cols});
  }
  if (jobs_.empty()) return Status::Ok();
  SR_RETURN_IF_ERROR(dk::Lookup(ctx_, jobs_, status_.data()));
  SR_RETURN_IF_ERROR(Copy(send, io, bytes, false));
  // Routing checked every id on the host, so a row outside its shard here is an internal error.
  return dk::ReadStatus(ctx_, status_.data(), "device lookup", kDeviceWaitMs);
}

Status DeviceStep::LookupDataParallel(const RoutedBatch& rb, float* out) {
  const Layout& l = *layout_;
  if (l.dp_pairs.empty()) return Status::Ok();
  const int64_t D = l.output_dim;
  const int64_t B = rb.batch_size;
  Segment seg[3];
  seg[0] = {reinterpret_cast<const uint8_t*>(rb.dp_offsets.data()),
            sizeof(int64_t) * rb.dp_offsets.size(), 0};
  seg[1] = {reinterpret_cast<const uint8_t*>(rb.dp_rows.data()),
            sizeof(int64_t) * rb.dp_rows.size(), 0};
  seg[2] = {reinterpret_cast<const uint8_t*>(rb.dp_weights.data()),
            sizeof(float) * rb.dp_weights.size(), 0};
  const auto to_device = [this](void* d, const void* h, size_t n) { return Copy(d, h, n, true); };
  SR_RETURN_IF_ERROR(
      UploadSegments(seg, device_, dp_ids_, "the data-parallel ids on the device", to_device));
  auto* dev = dp_ids_.as<uint8_t>();
  const auto* d_offsets = reinterpret_cast<const int64_t*>(dev + seg[0].at);
  const auto* d_rows = reinterpret_cast<const int64_t*>(dev + seg[1].at);
  const float* d_weights =
      rb.dp_weights.empty() ? nullptr : reinterpret_cast<const float*>(dev + seg[2].at);
  // Pooled: [B, D] like the output, only the data-parallel columns written. Sequence: one row of
  // the table's width per id, in dp_rows order, scattered to the output rows on the host.
  const size_t out_floats =
      l.sequence ? rb.dp_rows.size() * static_cast<size_t>(D) : static_cast<size_t>(B * D);
  if (out_floats == 0) return Status::Ok();
  SR_RETURN_IF_ERROR(dp_out_.Reserve(device_, sizeof(float) * out_floats, "data-parallel rows"));
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  SR_RETURN_IF_ERROR(
      rt->MemsetAsync(device_, dp_out_.data(), 0, sizeof(float) * out_floats, nullptr));
  jobs_.clear();
  for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
    const Pair& pair = l.pairs[l.dp_pairs[i]];
    const LocalShard& ls = l.local[l.tables[pair.table].shard_local[l.rank]];
    const size_t begin = rb.dp_offsets_begin[i];
    if (!l.sequence) {
      jobs_.push_back(kernels::LookupJob{params_->View(ls),
                                         {d_offsets + begin, B, d_rows, d_weights, pair.out_offset},
                                         dp_out_.as<float>(),
                                         D});
      continue;
    }
    const int64_t first = rb.dp_offsets[begin];
    const int64_t n = rb.dp_offsets[begin + B] - first;
    if (n == 0) continue;
    jobs_.push_back(kernels::LookupJob{
        params_->View(ls),
        {nullptr, n, d_rows + first, d_weights != nullptr ? d_weights + first : nullptr, first * D},
        dp_out_.as<float>(),
        D});
  }
  if (!jobs_.empty()) SR_RETURN_IF_ERROR(dk::Lookup(ctx_, jobs_, status_.data()));
  dp_host_.resize(out_floats);
  SR_RETURN_IF_ERROR(Copy(dp_host_.data(), dp_out_.data(), sizeof(float) * out_floats, false));
  SR_RETURN_IF_ERROR(
      dk::ReadStatus(ctx_, status_.data(), "device data-parallel lookup", kDeviceWaitMs));
  for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
    const Pair& pair = l.pairs[l.dp_pairs[i]];
    const int32_t dim = l.plan->tables[pair.table].dim;
    const size_t begin = rb.dp_offsets_begin[i];
    if (!l.sequence) {
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(out + b * D + pair.out_offset, dp_host_.data() + b * D + pair.out_offset,
                    sizeof(float) * dim);
      continue;
    }
    for (int64_t j = rb.dp_offsets[begin]; j < rb.dp_offsets[begin + B]; ++j)
      std::memcpy(out + rb.dp_pos[j] * D, dp_host_.data() + j * D, sizeof(float) * dim);
  }
  return Status::Ok();
}

Status DeviceStep::ApplyRows(int32_t local, const optim::OptimizerConfig& config, int64_t step,
                             std::span<const int64_t> rows, const float* grads) {
  const Layout& l = *layout_;
  const LocalShard& ls = l.local[local];
  const int K = l.tables[ls.table].num_row_stats;
  const size_t u = rows.size();
  if (u == 0) return Status::Ok();
  SR_RETURN_IF_ERROR(uniq_rows_[local]->Reserve(device_, sizeof(int64_t) * u, "touched rows"));
  SR_RETURN_IF_ERROR(
      uniq_grads_[local]->Reserve(device_, sizeof(float) * u * ls.cols, "row gradients"));
  SR_RETURN_IF_ERROR(Copy(uniq_rows_[local]->data(), rows.data(), sizeof(int64_t) * u, true));
  SR_RETURN_IF_ERROR(Copy(uniq_grads_[local]->data(), grads, sizeof(float) * u * ls.cols, true));
  optim::ShardParams params = params_->Params(local);
  const optim::RowUpdate up{std::span<const int64_t>(uniq_rows_[local]->as<int64_t>(), u),
                            uniq_grads_[local]->as<float>()};
  const float* stats = nullptr;
  if (K > 0) {
    SR_RETURN_IF_ERROR(stats_[local]->Reserve(device_, sizeof(float) * u * K, "row statistics"));
    // Zeroed first, as the host path's statistics are.
    const core::CudaRuntime* rt = nullptr;
    SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
    SR_RETURN_IF_ERROR(
        rt->MemsetAsync(device_, stats_[local]->data(), 0, sizeof(float) * u * K, nullptr));
    SR_RETURN_IF_ERROR(
        dk::PartialRowStats(ctx_, config, step, params, up, stats_[local]->as<float>()));
    stats = stats_[local]->as<float>();
  }
  SR_RETURN_IF_ERROR(
      dk::Apply(ctx_, config, step, l.plan->tables[ls.table].dim, params, up, stats));
  return Wait();
}

Status DeviceStep::ApplySharded(comm::Communicator& comm, SparseUpdater& updater,
                                const RoutedBatch& rb, const float* grads,
                                const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                                double* comm_seconds) {
  const Layout& l = *layout_;
  SR_RETURN_IF_ERROR(UploadRuns(rb));
  const size_t bytes = sizeof(float) * rb.ret_floats_total;
  SR_RETURN_IF_ERROR(io_.Reserve(device_, bytes, "the gradient message on the device"));
  SR_RETURN_IF_ERROR(Copy(io_.data(), grads, bytes, true));
  const float* dgrads = io_.as<float>();
  // TorchRec's gradient division, as on the host.
  const float scale = 1.0f / static_cast<float>(l.world);
  for (size_t i = 0; i < l.local.size(); ++i) {
    num_unique_[i] = 0;
    updater.partial_stats(i).clear();
    const LocalShard& ls = l.local[i];
    if (l.tables[ls.table].data_parallel || rb.shards[i].num_ids == 0) continue;
    const optim::OptimizerConfig& config = configs[ls.table];
    const int K = l.tables[ls.table].num_row_stats;
    const kernels::DeviceRuns runs = Runs(i);
    size_t need = 0;
    SR_RETURN_IF_ERROR(dk::BackwardWorkspaceBytes(ctx_, rb.shards[i].num_ids, ls.cols, K, &need));
    SR_RETURN_IF_ERROR(workspace_.Reserve(device_, need, "the backward workspace"));
    // The count reaches the pinned word when the stream gets there: wait before reading it.
    auto* count = static_cast<int64_t*>(count_.data());
    *count = 0;
    SR_RETURN_IF_ERROR(dk::GroupRows(ctx_, runs, workspace_.data(), workspace_.bytes(), count));
    SR_RETURN_IF_ERROR(Wait());
    const int64_t num_unique = *count;
    optim::ShardParams params = params_->Params(static_cast<int32_t>(i));
    const int32_t full_dim = l.plan->tables[ls.table].dim;
    if (updater.FusedEligible(i)) {
      SR_RETURN_IF_ERROR(dk::FusedBackward(ctx_, runs, dgrads, ls.cols, scale, config, step,
                                           full_dim, params, workspace_.data()));
      continue;
    }
    const auto u = static_cast<size_t>(num_unique);
    // Sized for every id, as the device kernel's contract asks; the first u rows are written.
    const auto ids = static_cast<size_t>(rb.shards[i].num_ids);
    SR_RETURN_IF_ERROR(uniq_rows_[i]->Reserve(device_, sizeof(int64_t) * ids, "unique rows"));
    SR_RETURN_IF_ERROR(
        uniq_grads_[i]->Reserve(device_, sizeof(float) * ids * ls.cols, "aggregated gradients"));
    SR_RETURN_IF_ERROR(dk::AggregateGrads(ctx_, runs, dgrads, ls.cols, ls.cols, scale,
                                          workspace_.data(), uniq_rows_[i]->as<int64_t>(),
                                          uniq_grads_[i]->as<float>()));
    num_unique_[i] = num_unique;
    if (K == 0 || u == 0) continue;
    SR_RETURN_IF_ERROR(stats_[i]->Reserve(device_, sizeof(float) * u * K, "row statistics"));
    const optim::RowUpdate up{std::span<const int64_t>(uniq_rows_[i]->as<int64_t>(), u),
                              uniq_grads_[i]->as<float>()};
    SR_RETURN_IF_ERROR(dk::PartialRowStats(ctx_, config, step, params, up, stats_[i]->as<float>()));
    std::vector<float>& host_stats = updater.partial_stats(i);
    host_stats.resize(u * K);
    SR_RETURN_IF_ERROR(Copy(host_stats.data(), stats_[i]->data(), sizeof(float) * u * K, false));
  }
  // The statistics of sibling column shards travel over the host communicator, as on the host.
  SR_RETURN_IF_ERROR(updater.ExchangeRowStats(comm, comm_seconds));
  // Sized once for every shard: an Apply may still be queued while the next shard's statistics
  // are copied in behind it on the same stream, so the block must not move in between.
  size_t max_stats = 0;
  for (size_t i = 0; i < l.local.size(); ++i)
    max_stats = std::max(max_stats, updater.partial_stats(i).size());
  SR_RETURN_IF_ERROR(full_stats_.Reserve(device_, sizeof(float) * max_stats, "row statistics"));
  for (size_t i = 0; i < l.local.size(); ++i) {
    if (num_unique_[i] == 0) continue;
    const LocalShard& ls = l.local[i];
    const auto u = static_cast<size_t>(num_unique_[i]);
    const float* full = nullptr;
    SR_RETURN_IF_ERROR(updater.FullRowStats(i, &full));
    const float* dfull = nullptr;
    if (full != nullptr) {
      const size_t n = updater.partial_stats(i).size();
      SR_RETURN_IF_ERROR(Copy(full_stats_.data(), full, sizeof(float) * n, true));
      dfull = full_stats_.as<float>();
    }
    optim::ShardParams params = params_->Params(static_cast<int32_t>(i));
    const optim::RowUpdate up{std::span<const int64_t>(uniq_rows_[i]->as<int64_t>(), u),
                              uniq_grads_[i]->as<float>()};
    SR_RETURN_IF_ERROR(
        dk::Apply(ctx_, configs[ls.table], step, l.plan->tables[ls.table].dim, params, up, dfull));
  }
  // The step's sync point: no device work is left in flight when backward returns.
  return Wait();
}

}  // namespace shardrec::embedding
