// The device half of a GPU collection's step (step.h): creation and sizing, the phase's
// waits, the staging of a batch's runs and the queued lookups every forward phase shares.
#include "impl/embedding/gpu/step.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/sizing.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

void DeviceStep::RunPieces(const RoutedBatch& rb, DeviceStaging::Piece* p) {
  p[0] = {rb.recv.data(), rb.recv.size()};
  p[1] = {rb.send.data() + rb.self_offset, rb.send.size() - rb.self_offset};
  p[2] = {rb.bag_offsets.data(), sizeof(int64_t) * rb.bag_offsets.size()};
}

Status DeviceStep::Init(const Layout* layout, ParamStore* params, int device,
                        const StepCapacity& capacity, bool device_input) {
  layout_ = layout;
  params_ = params;
  device_ = device;
  SR_RETURN_IF_ERROR(dk::CheckPlugin());
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  // A stream of the collection's own, so its work does not serialise with everything else on
  // the device's legacy default stream.
  SR_RETURN_IF_ERROR(rt->StreamCreate(device, &stream_));
  ctx_ = ExecContext::Cuda(device, stream_);
  staging_.Init(device, stream_);
  bwd_.count.SetDevice(device);
  staging_.SetOnDeliver([this] { CheckDeferred(); });
  size_t bytes = 0;
  SR_RETURN_IF_ERROR(dk::StatusBytes(ctx_, &bytes));
  SR_RETURN_IF_ERROR(status_.Reserve(device, bytes, "the lookup status block"));
  deferred_status_.assign(bytes, 0);
  const size_t n = layout->local.size();
  SR_RETURN_IF_ERROR(bwd_.Init(n));
  // Zero bytes are the block's clear state; ReadStatus clears it again after every read.
  if (bytes > 0) SR_RETURN_IF_ERROR(rt->MemsetAsync(device, status_.data(), 0, bytes, stream_));
  SR_RETURN_IF_ERROR(rt->StreamWait(device, stream_, core::kDeviceWaitMs));
  fwd_.Init(*layout);
  runs_.assign(n, {});
  num_ids_.assign(n, {});
  return capacity.known() ? Presize(capacity, device_input) : Status::Ok();
}

Status DeviceStep::Presize(const StepCapacity& capacity, bool device_input) {
  const Layout& l = *layout_;
  const size_t n = l.local.size();
  SparseUpdater probe;  // which shards take the fused backward (a property of the layout)
  probe.Init(layout_, params_);
  std::vector<bool> fused(n, false);
  // (Asked of sharded shards only: data-parallel tables have no row blocks.)
  for (size_t i = 0; i < n; ++i)
    fused[i] = !l.tables[l.local[i].table].data_parallel && probe.FusedEligible(i);
  StepSizes z;
  SR_RETURN_IF_ERROR(ComputeStepSizes(l, capacity, fused, device_input, &z));
  const auto n_ranks = static_cast<size_t>(l.world);
  size_t unpack_temp = 0;
  if (device_input && z.unpack_cells > 0)
    SR_RETURN_IF_ERROR(
        dk::RouteTempBytes(ctx_, static_cast<int64_t>(z.unpack_cells) + 1, &unpack_temp));
  size_t workspace = 0;
  for (size_t i = 0; i < n; ++i) {
    const LocalShard& ls = l.local[i];
    if (l.tables[ls.table].data_parallel) continue;
    size_t need = 0;
    SR_RETURN_IF_ERROR(dk::BackwardWorkspaceBytes(ctx_, z.shard_ids, ls.cols,
                                                  l.tables[ls.table].num_row_stats, &need));
    workspace = std::max(workspace, need);
  }
  size_t total = z.runs_bytes + z.io_bytes + workspace + z.full_stats_bytes + z.dp_ids_bytes +
                 z.dp_out_bytes + z.out_bytes + 2 * z.slot_bytes + z.unpack_scan_bytes +
                 unpack_temp + (n_ranks + 1) * z.summary_bytes + z.io_bytes + z.pack_bytes +
                 z.stat_send_bytes + z.stat_recv_bytes + (n_ranks > 1 ? 2 * z.io_bytes : 0);
  for (size_t i = 0; i < n; ++i) total += z.rows_bytes[i] + z.grads_bytes[i] + z.stats_bytes[i];
  const auto fail = [&](const Status& s) {
    if (s.code() != Code::kOutOfMemory) return s;
    return Status::OutOfMemory(
        "the per-step buffers of a GPU collection sized from its capacity hints (max_batch_size ",
        capacity.max_batch_size, ", max_ids_per_batch ", capacity.max_ids_per_batch, "): ", total,
        " bytes on cuda:", device_, " and ", 2 * z.staging_bytes,
        " bytes of pinned host memory; lower the hints or leave them 0 (grow on demand): ",
        s.message());
  };
  const auto reserve = [&](core::DeviceBuffer& b, size_t bytes, const char* what) {
    return fail(b.Reserve(device_, bytes, what, stream_));
  };
  SR_RETURN_IF_ERROR(reserve(runs_buf_, z.runs_bytes, "the batch's ids and gradients"));
  SR_RETURN_IF_ERROR(reserve(fwd_.io, z.io_bytes, "the return message"));
  SR_RETURN_IF_ERROR(reserve(bwd_.workspace, workspace, "the backward workspace"));
  SR_RETURN_IF_ERROR(reserve(bwd_.full_stats, z.full_stats_bytes, "row statistics"));
  SR_RETURN_IF_ERROR(reserve(fwd_.dp_ids, z.dp_ids_bytes, "the data-parallel ids"));
  SR_RETURN_IF_ERROR(reserve(fwd_.dp_out, z.dp_out_bytes, "data-parallel rows"));
  SR_RETURN_IF_ERROR(reserve(fwd_.out, z.out_bytes, "the output on the device"));
  for (core::DeviceBuffer& slot : slots_)
    SR_RETURN_IF_ERROR(reserve(slot, z.slot_bytes, "a batch's ids on the device"));
  // The exchanges between device blocks (over NCCL; a gradient in device memory at any world).
  const auto W = static_cast<size_t>(l.world);
  SR_RETURN_IF_ERROR(reserve(gather_send_, z.summary_bytes + 32, "the route summary"));
  SR_RETURN_IF_ERROR(reserve(gather_recv_, W * z.summary_bytes, "the route summaries"));
  SR_RETURN_IF_ERROR(fail(verdict_.Reserve(device_, stream_)));
  SR_RETURN_IF_ERROR(reserve(unpack_bad_, sizeof(unsigned long long), "the unpack's status"));
  SR_RETURN_IF_ERROR(reserve(bwd_.dgrad_block, z.io_bytes, "the gradients on the device"));
  SR_RETURN_IF_ERROR(reserve(bwd_.pack_buf, z.pack_bytes, "the gradient pack's tables"));
  if (W > 1) {
    SR_RETURN_IF_ERROR(reserve(bwd_.a2a_send, z.io_bytes, "the gradient message on the device"));
    SR_RETURN_IF_ERROR(reserve(a2a_recv_, z.io_bytes, "the received rows on the device"));
  }
  // Column shards' statistics exchanged between device blocks (over NCCL; at world 1 a copy
  // between this rank's own shards, when their counts stay on the device).
  SR_RETURN_IF_ERROR(reserve(bwd_.stat_send, z.stat_send_bytes, "row statistics sent"));
  SR_RETURN_IF_ERROR(reserve(bwd_.stat_recv, z.stat_recv_bytes, "row statistics received"));
  SR_RETURN_IF_ERROR(reserve(unpack_scan_, z.unpack_scan_bytes, "the unpack's scans"));
  SR_RETURN_IF_ERROR(reserve(unpack_temp_, unpack_temp, "the unpack's scratch"));
  for (size_t i = 0; i < n; ++i) {
    SR_RETURN_IF_ERROR(reserve(*bwd_.uniq_rows[i], z.rows_bytes[i], "unique rows"));
    SR_RETURN_IF_ERROR(reserve(*bwd_.uniq_grads[i], z.grads_bytes[i], "aggregated gradients"));
    SR_RETURN_IF_ERROR(reserve(*bwd_.stats[i], z.stats_bytes[i], "row statistics"));
  }
  {
    SR_RETURN_IF_ERROR(reserve(bwd_.dev_counts, sizeof(int64_t) * std::max<size_t>(n, 1),
                               "the unique-row counts"));
  }
  // Stream-ordered calls leave a lookup phase and an update phase in flight when the next forward's
  // counts exchange packs behind them (DeviceStaging): room for two phases and the exchange.
  SR_RETURN_IF_ERROR(
      fail(staging_.Reserve(2 * z.staging_bytes + (n_ranks + 1) * z.summary_bytes + 256)));
  // The data-parallel lookups land here before they are scattered into the output.
  fwd_.dp_host.reserve(z.dp_out_bytes / sizeof(float));
  return Status::Ok();
}

DeviceStep::~DeviceStep() {
  const core::CudaRuntime* rt = nullptr;
  if (!core::GetCudaRuntime(&rt).ok()) return;
  // A stream-ordered call may have left work queued: it completes before the buffers it uses are
  // freed (bounded; a failed wait or destroy leaks rather than throwing from a destructor).
  if (launched_ || staging_.queued()) (void)rt->StreamWait(device_, stream_, core::kDeviceWaitMs);
  if (stream_ != nullptr) (void)rt->StreamDestroy(device_, stream_);
}

Status DeviceStep::Wait() {
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->StreamWait(device_, stream_, core::kDeviceWaitMs);
}

Status DeviceStep::EndPhase(const char* status_what) {
  if (status_what != nullptr) {
    // Waits for the stream (bounded) and then reads the status block: the phase's one sync.
    SR_RETURN_IF_ERROR(dk::ReadStatus(ctx_, status_.data(), status_what, core::kDeviceWaitMs));
  } else if (staging_.queued() || launched_) {
    SR_RETURN_IF_ERROR(Wait());
  }
  launched_ = false;
  // (The checks of earlier phases that ended without a wait run as their downloads arrive.)
  staging_.Deliver();
  return Status::Ok();
}

Status DeviceStep::ReserveRuns(const RoutedBatch& rb, const DeviceStaging::Piece* extra,
                               size_t num_extra, const char* what) {
  DeviceStaging::Piece p[3 + kMaxExtra];
  RunPieces(rb, p);
  for (size_t k = 0; k < num_extra && k < kMaxExtra; ++k) p[3 + k] = extra[k];
  return runs_buf_.Reserve(device_, DeviceStaging::PackedBytes(p, 3 + num_extra), what, stream_);
}

Status DeviceStep::ReserveRuns(const RoutedBatch& rb, size_t extra_bytes, const char* what) {
  const DeviceStaging::Piece extra{nullptr, extra_bytes};
  return ReserveRuns(rb, &extra, 1, what);
}

Status DeviceStep::UploadRuns(const RoutedBatch& rb, const void* extra, size_t extra_bytes,
                              void** extra_dev) {
  const DeviceStaging::Piece piece{extra, extra_bytes};
  uint8_t* dev = nullptr;
  SR_RETURN_IF_ERROR(UploadRuns(rb, &piece, 1, &dev));
  if (extra_dev != nullptr) *extra_dev = dev;
  return Status::Ok();
}

Status DeviceStep::UploadRuns(const RoutedBatch& rb, const DeviceStaging::Piece* extra,
                              size_t num_extra, uint8_t** extra_dev) {
  if (num_extra > kMaxExtra) return Status::Internal("UploadRuns: too many extra pieces");
  DeviceStaging::Piece p[3 + kMaxExtra];
  RunPieces(rb, p);
  for (size_t k = 0; k < num_extra; ++k) p[3 + k] = extra[k];
  size_t at[3 + kMaxExtra] = {};
  // ReserveRuns made room before the phase queued anything, so the buffer does not move here.
  SR_RETURN_IF_ERROR(staging_.Upload(runs_buf_.data(), p, 3 + num_extra, at));
  auto* dev = runs_buf_.as<uint8_t>();
  for (size_t k = 0; k < num_extra; ++k) extra_dev[k] = dev + at[3 + k];
  Status bad;
  const auto translate = [&](const auto* ptr) -> decltype(ptr) {
    if (ptr == nullptr) return ptr;
    const auto* b = reinterpret_cast<const uint8_t*>(ptr);
    for (int k = 0; k < 3; ++k) {
      const auto* h = static_cast<const uint8_t*>(p[k].host);
      if (p[k].bytes > 0 && b >= h && b < h + p[k].bytes)
        return reinterpret_cast<decltype(ptr)>(dev + at[k] + (b - h));
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

Status DeviceStep::QueueLookups(const RoutedBatch& rb, const DeviceStaging::Piece* extra,
                                size_t num_extra, uint8_t** extra_dev) {
  SR_RETURN_IF_ERROR(UploadRuns(rb, extra, num_extra, extra_dev));
  return QueueLookupJobs();
}

Status DeviceStep::QueueLookupJobs() {
  auto* io = fwd_.io.as<float>();
  fwd_.jobs.clear();
  for (size_t i = 0; i < layout_->local.size(); ++i) {
    const LocalShard& ls = layout_->local[i];
    const kernels::WeightsView w = params_->View(ls);
    for (const kernels::BagRun& run : runs_[i])
      fwd_.jobs.push_back(kernels::LookupJob{w, run, io, ls.cols});
  }
  launched_ = true;
  return dk::Lookup(ctx_, fwd_.jobs, status_.data());
}

}  // namespace shardrec::embedding
