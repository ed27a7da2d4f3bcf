// The device half of a GPU collection's forward and backward (device_step.h).
#include "impl/embedding/device_step.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/device_sizing.h"
#include "impl/embedding/kernels/device_dispatch.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

namespace {

// The three host ranges every run points into: the ids received from the other ranks, this
// rank's message to itself (the end of its send buffer) and the CSR bag offsets.
void RunPieces(const RoutedBatch& rb, DeviceStaging::Piece* p) {
  p[0] = {rb.recv.data(), rb.recv.size()};
  p[1] = {rb.send.data() + rb.self_offset, rb.send.size() - rb.self_offset};
  p[2] = {rb.bag_offsets.data(), sizeof(int64_t) * rb.bag_offsets.size()};
}

}  // namespace

Status DeviceStep::Init(const Layout* layout, ParamStore* params, int device,
                        const StepCapacity& capacity, bool device_input) {
  layout_ = layout;
  params_ = params;
  device_ = device;
  SR_RETURN_IF_ERROR(dk::CheckPlugin());
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  // A stream of the collection's own, so its work does not serialise with everything else on
  // the device's legacy default stream; a plugin without stream entries leaves it there.
  Stream own = nullptr;
  const Status made = rt->StreamCreate(device, &own);
  if (!made.ok() && made.code() != Code::kUnsupported) return made;
  stream_ = own;
  ctx_ = ExecContext::Cuda(device, stream_);
  staging_.Init(device, stream_);
  staging_.SetOnDeliver([this] { CheckDeferred(); });
  size_t bytes = 0;
  SR_RETURN_IF_ERROR(dk::StatusBytes(ctx_, &bytes));
  SR_RETURN_IF_ERROR(status_.Reserve(device, bytes, "the lookup status block"));
  deferred_status_.assign(bytes, 0);
  const size_t n = layout->local.size();
  // One unique-row count per local shard: the backward queues every shard's grouping before its
  // one wait, and each writes its own word.
  SR_RETURN_IF_ERROR(count_.Reserve(sizeof(int64_t) * std::max<size_t>(n, 1)));
  // Zero bytes are the block's clear state; ReadStatus clears it again after every read.
  if (bytes > 0) SR_RETURN_IF_ERROR(rt->MemsetAsync(device, status_.data(), 0, bytes, stream_));
  SR_RETURN_IF_ERROR(rt->StreamWait(device, stream_, kDeviceWaitMs));
  // The combine's column groups: the units of one pair and column offset (its row blocks) add
  // into the same output columns.
  groups_.clear();
  unit_group_.assign(layout->units.size(), -1);
  for (size_t u = 0; u < layout->units.size(); ++u) {
    const Unit& unit = layout->units[u];
    const int64_t col = layout->pairs[unit.pair].out_offset + unit.col_offset;
    // Keyed by pair too: a sequence collection's pairs share their columns (rows tell them apart).
    for (size_t g = 0; g < groups_.size() && unit_group_[u] < 0; ++g)
      if (groups_[g].col == col && groups_[g].pair == unit.pair)
        unit_group_[u] = static_cast<int32_t>(g);
    if (unit_group_[u] >= 0) continue;
    unit_group_[u] = static_cast<int32_t>(groups_.size());
    groups_.push_back(CombineGroup{col, unit.cols, unit.pair});
  }
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
  const auto reserve = [&](DeviceBuffer& b, size_t bytes, const char* what) {
    return fail(b.Reserve(device_, bytes, what, stream_));
  };
  SR_RETURN_IF_ERROR(reserve(runs_buf_, z.runs_bytes, "the batch's ids and gradients"));
  SR_RETURN_IF_ERROR(reserve(io_, z.io_bytes, "the return message"));
  SR_RETURN_IF_ERROR(reserve(workspace_, workspace, "the backward workspace"));
  SR_RETURN_IF_ERROR(reserve(full_stats_, z.full_stats_bytes, "row statistics"));
  SR_RETURN_IF_ERROR(reserve(dp_ids_, z.dp_ids_bytes, "the data-parallel ids"));
  SR_RETURN_IF_ERROR(reserve(dp_out_, z.dp_out_bytes, "data-parallel rows"));
  SR_RETURN_IF_ERROR(reserve(out_, z.out_bytes, "the output on the device"));
  for (DeviceBuffer& slot : slots_)
    SR_RETURN_IF_ERROR(reserve(slot, z.slot_bytes, "a batch's ids on the device"));
  // The exchanges between device blocks (over NCCL; a gradient in device memory at any world).
  const auto W = static_cast<size_t>(l.world);
  SR_RETURN_IF_ERROR(reserve(gather_send_, z.summary_bytes + 32, "the route summary"));
  SR_RETURN_IF_ERROR(reserve(gather_recv_, W * z.summary_bytes, "the route summaries"));
  SR_RETURN_IF_ERROR(reserve(verdict_buf_, 6 * sizeof(int64_t), "the verdict"));
  SR_RETURN_IF_ERROR(reserve(unpack_bad_, sizeof(unsigned long long), "the unpack's status"));
  SR_RETURN_IF_ERROR(reserve(dgrad_block_, z.io_bytes, "the gradients on the device"));
  SR_RETURN_IF_ERROR(reserve(pack_buf_, z.pack_bytes, "the gradient pack's tables"));
  if (W > 1) {
    SR_RETURN_IF_ERROR(reserve(a2a_send_, z.io_bytes, "the gradient message on the device"));
    SR_RETURN_IF_ERROR(reserve(a2a_recv_, z.io_bytes, "the received rows on the device"));
  }
  // Column shards' statistics exchanged between device blocks (over NCCL; at world 1 a copy
  // between this rank's own shards, when their counts stay on the device).
  SR_RETURN_IF_ERROR(reserve(stat_send_, z.stat_send_bytes, "row statistics sent"));
  SR_RETURN_IF_ERROR(reserve(stat_recv_, z.stat_recv_bytes, "row statistics received"));
  SR_RETURN_IF_ERROR(reserve(unpack_scan_, z.unpack_scan_bytes, "the unpack's scans"));
  SR_RETURN_IF_ERROR(reserve(unpack_temp_, unpack_temp, "the unpack's scratch"));
  for (size_t i = 0; i < n; ++i) {
    SR_RETURN_IF_ERROR(reserve(*uniq_rows_[i], z.rows_bytes[i], "unique rows"));
    SR_RETURN_IF_ERROR(reserve(*uniq_grads_[i], z.grads_bytes[i], "aggregated gradients"));
    SR_RETURN_IF_ERROR(reserve(*stats_[i], z.stats_bytes[i], "row statistics"));
  }
  {
    SR_RETURN_IF_ERROR(
        reserve(dev_counts_, sizeof(int64_t) * std::max<size_t>(n, 1), "the unique-row counts"));
  }
  // Stream-ordered calls leave a lookup phase and an update phase in flight when the next forward's
  // counts exchange packs behind them (DeviceStaging): room for two phases and the exchange.
  SR_RETURN_IF_ERROR(
      fail(staging_.Reserve(2 * z.staging_bytes + (n_ranks + 1) * z.summary_bytes + 256)));
  // The data-parallel lookups land here before they are scattered into the output.
  dp_host_.reserve(z.dp_out_bytes / sizeof(float));
  return Status::Ok();
}

DeviceStep::~DeviceStep() {
  const core::CudaRuntime* rt = nullptr;
  if (!core::GetCudaRuntime(&rt).ok()) return;
  // A stream-ordered call may have left work queued: it completes before the buffers it uses are
  // freed (bounded; a failed wait or destroy leaks rather than throwing from a destructor).
  if (launched_ || staging_.queued()) (void)rt->StreamWait(device_, stream_, kDeviceWaitMs);
  if (stream_ != nullptr) (void)rt->StreamDestroy(device_, stream_);
}

Status DeviceStep::Wait() {
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->StreamWait(device_, stream_, kDeviceWaitMs);
}

Status DeviceStep::EndPhase(const char* status_what) {
  if (status_what != nullptr) {
    // Waits for the stream (bounded) and then reads the status block: the phase's one sync.
    SR_RETURN_IF_ERROR(dk::ReadStatus(ctx_, status_.data(), status_what, kDeviceWaitMs));
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
  auto* io = io_.as<float>();
  jobs_.clear();
  for (size_t i = 0; i < layout_->local.size(); ++i) {
    const LocalShard& ls = layout_->local[i];
    const kernels::WeightsView w = params_->View(ls);
    for (const kernels::BagRun& run : runs_[i])
      jobs_.push_back(kernels::LookupJob{w, run, io, ls.cols});
  }
  launched_ = true;
  return dk::Lookup(ctx_, jobs_, status_.data());
}

Status DeviceStep::LookupToSend(const RoutedBatch& rb, float* send) {
  size_t runs = 0;
  for (const ShardRuns& sr : rb.shards) runs += sr.runs.size();
  if (runs == 0) return Status::Ok();
  const size_t bytes = sizeof(float) * rb.ret_floats_total;
  // Device buffers first: one that grows waits for the stream, which must not happen while this
  // phase's copies are queued from the staging block.
  SR_RETURN_IF_ERROR(ReserveRuns(rb, 0, "the batch's ids on the device"));
  SR_RETURN_IF_ERROR(io_.Reserve(device_, bytes, "the return message on the device", stream_));
  SR_RETURN_IF_ERROR(staging_.Begin());
  SR_RETURN_IF_ERROR(QueueLookups(rb, nullptr, 0, nullptr));
  SR_RETURN_IF_ERROR(staging_.Download(send, io_.data(), bytes));
  // Routing checked every id on the host, so a row outside its shard here is an internal error.
  return EndPhase("device lookup");
}

Status DeviceStep::LookupExchange(const RoutedBatch& rb, const DeviceExchange& x, float* recv,
                                  float* send) {
  size_t runs = 0;
  for (const ShardRuns& sr : rb.shards) runs += sr.runs.size();
  size_t recv_floats = 0;
  for (size_t c : x.recv_counts) recv_floats += c;
  const size_t bytes = sizeof(float) * rb.ret_floats_total;
  if (rb.device_input) {
    SR_RETURN_IF_ERROR(ReserveDeviceInput(rb));
  } else if (runs > 0) {
    SR_RETURN_IF_ERROR(ReserveRuns(rb, 0, "the batch's ids on the device"));
  }
  SR_RETURN_IF_ERROR(io_.Reserve(device_, bytes, "the return message on the device", stream_));
  SR_RETURN_IF_ERROR(a2a_recv_.Reserve(device_, sizeof(float) * recv_floats,
                                       "the received return message on the device", stream_));
  SR_RETURN_IF_ERROR(staging_.Begin());
  auto* io = io_.as<float>();
  if (rb.device_input) {
    // Sequence runs have no bag offsets: nothing to unpack, the ids are read where they land.
    SR_RETURN_IF_ERROR(QueueDeviceInput(rb, x, nullptr, nullptr));
    if (runs > 0) SR_RETURN_IF_ERROR(QueueLookupJobs());
  } else if (runs > 0) {
    SR_RETURN_IF_ERROR(QueueLookups(rb, nullptr, 0, nullptr));
  }
  // Behind the lookups on the stream: the message leaves from the device block they wrote.
  comm::CallOptions o;
  o.stream = stream_;
  launched_ = true;
  SR_RETURN_IF_ERROR(
      x.comm->AllToAllV(io, x.send_counts, a2a_recv_.data(), x.recv_counts, DType::kFloat32, o));
  if (recv_floats > 0)
    SR_RETURN_IF_ERROR(staging_.Download(recv, a2a_recv_.data(), sizeof(float) * recv_floats));
  const size_t self = rb.ret_floats_total - rb.ret_self_offset;
  if (self > 0)
    SR_RETURN_IF_ERROR(staging_.Download(send + rb.ret_self_offset, io + rb.ret_self_offset,
                                         sizeof(float) * self));
  SR_RETURN_IF_ERROR(EndPhase(runs > 0 ? "device lookup" : nullptr));
  // NCCL reports a peer that failed during the exchange here, not at the enqueue.
  SR_RETURN_IF_ERROR(x.comm->AsyncError());
  return rb.device_input ? CheckUnpack(rb) : Status::Ok();
}

void DeviceStep::BuildCombine(const RoutedBatch& rb) {
  const Layout& l = *layout_;
  const size_t G = groups_.size();
  // Each group's output rows [lo, hi): those its returned rows aim at (a unit's targets
  // increase). A sequence group's rows are positions of its one feature, so bags never cover
  // another feature's rows (nor the data-parallel columns written in the same launch).
  group_lo_.assign(G, INT64_MAX);
  group_hi_.assign(G, 0);
  const int64_t* targets = rb.ret_target.data();
  for (int32_t d = 0; d < l.world; ++d)
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count > 0) {
        const auto g = static_cast<size_t>(unit_group_[u]);
        group_lo_[g] = std::min(group_lo_[g], targets[0]);
        group_hi_[g] = std::max(group_hi_[g], targets[count - 1] + 1);
      }
      targets += count;
    }
  group_begin_.assign(G + 1, 0);
  for (size_t g = 0; g < G; ++g) {
    const int64_t rows = group_hi_[g] > group_lo_[g] ? group_hi_[g] - group_lo_[g] : 0;
    group_begin_[g + 1] = group_begin_[g] + (rows > 0 ? rows + 1 : 0);
  }
  // Bag sizes first (row r of group g counted at begin + (r - lo) + 1), then offsets, then every
  // returned row appended to its bag in (rank, unit) order: CombineOutput's order of addition.
  comb_offsets_.assign(static_cast<size_t>(group_begin_[G]), 0);
  targets = rb.ret_target.data();
  for (int32_t d = 0; d < l.world; ++d)
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;  // its group may have no bags: no offset into empty storage
      const auto g = static_cast<size_t>(unit_group_[u]);
      int64_t* bags = comb_offsets_.data() + group_begin_[g] + 1 - group_lo_[g];
      for (int64_t k = 0; k < count; ++k) ++bags[targets[k]];
      targets += count;
    }
  int64_t total = 0;
  comb_cursor_.resize(comb_offsets_.size());
  for (size_t g = 0; g < G; ++g) {
    const int64_t n = group_begin_[g + 1] - group_begin_[g];
    if (n == 0) continue;
    int64_t* o = comb_offsets_.data() + group_begin_[g];
    o[0] = total;
    for (int64_t b = 0; b + 1 < n; ++b) {
      o[b + 1] += o[b];
      comb_cursor_[static_cast<size_t>(group_begin_[g] + b)] = o[b];
    }
    total = o[n - 1];
  }
  comb_ids_.resize(static_cast<size_t>(total));
  targets = rb.ret_target.data();
  auto others = static_cast<int64_t>(rb.ret_floats_total);
  auto self = static_cast<int64_t>(rb.ret_self_offset);
  for (int32_t d = 0; d < l.world; ++d) {
    int64_t& at = d == l.rank ? self : others;
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;
      const int32_t cols = l.units[u].cols;
      const auto g = static_cast<size_t>(unit_group_[u]);
      int64_t* cursor = comb_cursor_.data() + group_begin_[g] - group_lo_[g];
      for (int64_t k = 0; k < count; ++k) comb_ids_[cursor[targets[k]]++] = at + k * cols;
      targets += count;
      at += count * cols;
    }
  }
}

bool DeviceStep::HasMeanDivide() { return dk::HasMeanDivide(); }

bool DeviceStep::HasDeviceInput() { return dk::HasUnpack(); }

DeviceStep::SlotLayout DeviceStep::LayoutOfSlot(const RoutedBatch& rb) {
  const auto align = [](size_t n) { return (n + 15) & ~size_t{15}; };
  SlotLayout s;
  size_t recv = 0, send = 0;
  for (size_t b : rb.a2a_recv) recv += b;
  for (size_t b : rb.send_bytes) send += b;
  s.recv_at = align(send);
  s.csr_at = s.recv_at + align(recv);
  s.bytes = s.csr_at + sizeof(int64_t) * rb.csr_entries;
  for (const UnpackPlace& u : rb.unpack) s.cells += static_cast<size_t>(u.batch);
  return s;
}

Status DeviceStep::ReserveDeviceInput(const RoutedBatch& rb) {
  const SlotLayout sl = LayoutOfSlot(rb);
  SR_RETURN_IF_ERROR(slots_[rb.device_slot & 1].Reserve(device_, sl.bytes,
                                                        "a batch's ids on the device", stream_));
  SR_RETURN_IF_ERROR(
      unpack_bad_.Reserve(device_, sizeof(unsigned long long), "the unpack's status", stream_));
  if (rb.unpack.empty()) return Status::Ok();
  SR_RETURN_IF_ERROR(unpack_scan_.Reserve(device_, 3 * sizeof(int64_t) * (sl.cells + 1),
                                          "the unpack's scans", stream_));
  size_t temp = 0;
  SR_RETURN_IF_ERROR(dk::RouteTempBytes(ctx_, static_cast<int64_t>(sl.cells) + 1, &temp));
  return unpack_temp_.Reserve(device_, temp, "the unpack's scratch", stream_);
}

void DeviceStep::BuildUnpackTables(const RoutedBatch& rb) {
  const SlotLayout sl = LayoutOfSlot(rb);
  auto* block = slots_[rb.device_slot & 1].as<uint8_t>();
  unpack_runs_.clear();
  unpack_cells_.assign(1, 0);
  for (const UnpackPlace& u : rb.unpack) {
    kernels::simt_body::UnpackRun run;
    run.lengths =
        reinterpret_cast<const int32_t*>(block + (u.self ? 0 : sl.recv_at) + u.lengths_at);
    run.offsets =
        u.offsets_at >= 0 ? reinterpret_cast<int64_t*>(block + sl.csr_at) + u.offsets_at : nullptr;
    run.ids = u.ids;
    run.bags = u.bags;
    unpack_runs_.push_back(run);
    unpack_cells_.push_back(unpack_cells_.back() + u.batch);
  }
}

void DeviceStep::PlaceRuns(const RoutedBatch& rb) {
  const SlotLayout sl = LayoutOfSlot(rb);
  const auto* block = slots_[rb.device_slot & 1].as<uint8_t>();
  const auto* csr = reinterpret_cast<const int64_t*>(block + sl.csr_at);
  for (size_t i = 0; i < rb.shards.size(); ++i) {
    runs_[i].clear();
    num_ids_[i].clear();
    const auto& runs = rb.shards[i].runs;
    for (size_t k = 0; k < runs.size(); ++k) {
      const RunPlace& at = rb.run_at[i][k];
      const uint8_t* base = block + (at.self ? 0 : sl.recv_at);
      kernels::BagRun d = runs[k];
      d.rows = reinterpret_cast<const int64_t*>(base + at.rows_at);
      d.weights =
          at.weights_at >= 0 ? reinterpret_cast<const float*>(base + at.weights_at) : nullptr;
      d.offsets = at.offsets_at >= 0 ? csr + at.offsets_at : nullptr;
      runs_[i].push_back(d);
      // The announced count: num_ids() would read the offsets, which are device memory.
      num_ids_[i].push_back(at.ids);
    }
  }
}

Status DeviceStep::UploadExtras(const DeviceStaging::Piece* extra, size_t num_extra,
                                uint8_t** extra_dev) {
  size_t at[kMaxExtra] = {};
  if (num_extra > kMaxExtra) return Status::Internal("UploadExtras: too many pieces");
  SR_RETURN_IF_ERROR(staging_.Upload(runs_buf_.data(), extra, num_extra, at));
  for (size_t k = 0; k < num_extra; ++k) extra_dev[k] = runs_buf_.as<uint8_t>() + at[k];
  return Status::Ok();
}

Status DeviceStep::QueueDeviceInput(const RoutedBatch& rb, const DeviceExchange& x,
                                    const uint8_t* runs_dev, const uint8_t* cells_dev) {
  const SlotLayout sl = LayoutOfSlot(rb);
  auto* block = slots_[rb.device_slot & 1].as<uint8_t>();
  // The whole routed batch goes up in one copy: the others' messages (which leave from here)
  // and this rank's own (which its runs read in place, forward and backward). A device route
  // wrote them there already.
  if (!rb.send_on_device)
    SR_RETURN_IF_ERROR(staging_.Upload(block, rb.send.data(), rb.send.size()));
  comm::CallOptions o;
  o.stream = stream_;
  launched_ = true;
  SR_RETURN_IF_ERROR(
      x.comm->AllToAllV(block, rb.a2a_send, block + sl.recv_at, rb.a2a_recv, DType::kUInt8, o));
  if (!rb.unpack.empty()) {
    kernels::simt_body::UnpackParams p;
    p.num_runs = static_cast<int64_t>(rb.unpack.size());
    p.num_cells = static_cast<int64_t>(sl.cells);
    p.runs = reinterpret_cast<const kernels::simt_body::UnpackRun*>(runs_dev);
    p.cell_begin = reinterpret_cast<const int64_t*>(cells_dev);
    auto* scan = unpack_scan_.as<int64_t>();
    p.wide = scan;
    p.ne_scan = scan + sl.cells + 1;
    p.id_scan = scan + 2 * (sl.cells + 1);
    p.bad = unpack_bad_.as<unsigned long long>();
    SR_RETURN_IF_ERROR(dk::Unpack(ctx_, p, unpack_temp_.data(), unpack_temp_.bytes()));
    SR_RETURN_IF_ERROR(
        staging_.Download(&unpack_bad_host_, unpack_bad_.data(), sizeof(unpack_bad_host_)));
  } else {
    unpack_bad_host_ = 0;
  }
  PlaceRuns(rb);
  return Status::Ok();
}

Status DeviceStep::GatherSummaries(comm::Communicator& comm, const void* header,
                                   size_t header_bytes, const void* body_dev, const void* body_host,
                                   size_t body_bytes, uint8_t* out) {
  const size_t per = header_bytes + body_bytes;
  const auto world = static_cast<size_t>(comm.Size());
  // The header first, the body right behind it (header_bytes keeps it 16-byte aligned).
  if (header_bytes % 16 != 0) return Status::Internal("GatherSummaries: unaligned header");
  DeviceStaging::Piece up[2] = {{header, header_bytes},
                                {body_host, body_dev != nullptr ? 0 : body_bytes}};
  SR_RETURN_IF_ERROR(gather_send_.Reserve(device_, std::max(per, DeviceStaging::PackedBytes(up, 2)),
                                          "the route summary", stream_));
  SR_RETURN_IF_ERROR(gather_recv_.Reserve(device_, per * world, "the route summaries", stream_));
  SR_RETURN_IF_ERROR(staging_.Reserve(DeviceStaging::PackedBytes(up, 2) + per * world + 16));
  SR_RETURN_IF_ERROR(staging_.Begin());
  // Behind the phases of stream-ordered calls still in flight: room for this one's traffic, else
  // the block drains now (not half-way through).
  SR_RETURN_IF_ERROR(staging_.MakeRoom(DeviceStaging::PackedBytes(up, 2) + per * world + 16));
  size_t at[2] = {};
  SR_RETURN_IF_ERROR(staging_.Upload(gather_send_.data(), up, 2, at));
  auto* send = gather_send_.as<uint8_t>();
  if (body_dev != nullptr && body_bytes > 0) {
    const core::CudaRuntime* rt = nullptr;
    SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
    SR_RETURN_IF_ERROR(rt->MemcpyAsync(device_, send + header_bytes, body_dev, body_bytes,
                                       core::CopyKind::kDeviceToDevice, stream_));
  }
  const std::vector<size_t> counts(world, per);
  comm::CallOptions o;
  o.stream = stream_;
  launched_ = true;
  SR_RETURN_IF_ERROR(comm.AllGatherV(send, per, gather_recv_.data(), counts, DType::kUInt8, o));
  SR_RETURN_IF_ERROR(staging_.Download(out, gather_recv_.data(), per * world));
  SR_RETURN_IF_ERROR(EndPhase(nullptr));
  return comm.AsyncError();
}

Status DeviceStep::CheckUnpack(const RoutedBatch& rb) {
  unpack_sources_.clear();
  for (const UnpackPlace& u : rb.unpack) unpack_sources_.push_back(u.source);
  return UnpackError(unpack_sources_);
}

Status DeviceStep::UnpackError(const std::vector<int32_t>& sources) const {
  if (unpack_bad_host_ == 0) return Status::Ok();
  const auto k = static_cast<size_t>(kernels::simt_body::MinOf(unpack_bad_host_));
  const int32_t source = k < sources.size() ? sources[k] : -1;
  return Status::Internal("input dist: the bag lengths rank ", source,
                          " sent disagree with the counts it announced");
}

Status DeviceStep::LookupCombine(const RoutedBatch& rb, const DeviceExchange* x,
                                 const CombineOut& out) {
  const Layout& l = *layout_;
  const int64_t D = l.output_dim;
  const int64_t B = rb.batch_size;
  // Output rows: samples, or (sequence) ids.
  const int64_t R = l.sequence ? rb.num_values : B;
  size_t runs = 0;
  for (const ShardRuns& sr : rb.shards) runs += sr.runs.size();
  size_t recv_floats = 0;
  if (x != nullptr)
    for (size_t c : x->recv_counts) recv_floats += c;
  const size_t rows_floats = rb.ret_floats_total + recv_floats;
  const auto out_floats = static_cast<size_t>(R * D);
  BuildCombine(rb);
  const bool dp = !l.dp_pairs.empty() && B > 0 && !rb.dp_rows.empty();
  bool means = false;
  for (const Pair& pair : l.pairs) means = means || pair.mean;
  // A device output is divided here: the divisors go up too.
  const bool divide = out.on_device && means && B > 0;
  // The device input (ids exchanged between device buffers) needs the exchange.
  const bool dev_in = rb.device_input;
  if (dev_in && x == nullptr) return Status::Internal("LookupCombine: device input without x");
  // The phase's uploads ride with the runs: the combine's bags, the data-parallel ids; with the
  // device input, the unpack's tables instead of the runs.
  DeviceStaging::Piece extra[8] = {
      {comb_offsets_.data(), sizeof(int64_t) * comb_offsets_.size()},
      {comb_ids_.data(), sizeof(int64_t) * comb_ids_.size()},
      {dp ? rb.dp_offsets.data() : nullptr, dp ? sizeof(int64_t) * rb.dp_offsets.size() : 0},
      {dp ? rb.dp_rows.data() : nullptr, dp ? sizeof(int64_t) * rb.dp_rows.size() : 0},
      {dp ? rb.dp_weights.data() : nullptr, dp ? sizeof(float) * rb.dp_weights.size() : 0},
      {divide ? rb.mean_div.data() : nullptr, divide ? sizeof(float) * rb.mean_div.size() : 0},
      {},
      {}};
  size_t num_extra = 6;
  // Device buffers first: one that grows waits for the stream.
  if (dev_in) {
    SR_RETURN_IF_ERROR(ReserveDeviceInput(rb));
    BuildUnpackTables(rb);
    if (!rb.unpack.empty()) {
      extra[6] = {unpack_runs_.data(), sizeof(unpack_runs_[0]) * unpack_runs_.size()};
      extra[7] = {unpack_cells_.data(), sizeof(int64_t) * unpack_cells_.size()};
    }
    num_extra = 8;
    SR_RETURN_IF_ERROR(runs_buf_.Reserve(device_, DeviceStaging::PackedBytes(extra, num_extra),
                                         "the combine's bags on the device", stream_));
  } else {
    SR_RETURN_IF_ERROR(ReserveRuns(rb, extra, 6, "the batch's ids on the device"));
  }
  SR_RETURN_IF_ERROR(io_.Reserve(device_, sizeof(float) * rows_floats,
                                 "the return message on the device", stream_));
  SR_RETURN_IF_ERROR(
      out_.Reserve(device_, sizeof(float) * out_floats, "the output on the device", stream_));
  // The whole phase's traffic in the pinned block at once: a block that fills up mid-phase drains
  // (a wait) and starts over, so without this it would do so in every step.
  DeviceStaging::Piece all[3 + 8 + 1];
  size_t num_all = 0;
  if (dev_in) {
    all[num_all++] = {rb.send.data(), rb.send.size()};
    all[num_all++] = {nullptr, sizeof(unpack_bad_host_)};
  } else {
    RunPieces(rb, all);
    num_all = 3;
  }
  for (size_t k = 0; k < num_extra; ++k) all[num_all++] = extra[k];
  all[num_all++] = {nullptr, out.on_device ? 0 : sizeof(float) * out_floats};
  SR_RETURN_IF_ERROR(staging_.Reserve(DeviceStaging::PackedBytes(all, num_all)));
  SR_RETURN_IF_ERROR(staging_.Begin());
  // Behind the phases still in flight there must be room for this one's traffic (and a deferred
  // status block): else the block drains now, not half-way.
  SR_RETURN_IF_ERROR(staging_.MakeRoom(DeviceStaging::PackedBytes(all, num_all) + 64));
  // A device output is copied on the step's stream within this phase, behind the caller's work
  // on out.stream (no host wait), when the plugin can order the two streams; else on out.stream
  // after the phase, with a wait of its own.
  const bool ordered = out.on_device && out_floats > 0 && dk::HasGrad();
  if (ordered && out.stream != stream_)
    SR_RETURN_IF_ERROR(dk::StreamWaitStream(device_, stream_, out.stream));
  uint8_t* dev[8] = {};
  if (dev_in) {
    SR_RETURN_IF_ERROR(UploadExtras(extra, num_extra, dev));
    SR_RETURN_IF_ERROR(QueueDeviceInput(rb, *x, dev[6], dev[7]));
    if (runs > 0) SR_RETURN_IF_ERROR(QueueLookupJobs());
  } else if (runs > 0) {
    SR_RETURN_IF_ERROR(QueueLookups(rb, extra, 6, dev));
  } else {
    SR_RETURN_IF_ERROR(UploadRuns(rb, extra, 6, dev));
  }
  auto* io = io_.as<float>();
  launched_ = true;
  if (x != nullptr) {
    // Behind the lookups: the travelling part of io_ goes out, the others' rows land behind it.
    comm::CallOptions o;
    o.stream = stream_;
    SR_RETURN_IF_ERROR(x->comm->AllToAllV(io, x->send_counts, io + rb.ret_floats_total,
                                          x->recv_counts, DType::kFloat32, o));
  }
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  // Groups without a returned row, empty bags of the rest and (sequence) rows of skipped ids stay
  // as zeroed here, as the host combine leaves them.
  if (out_floats > 0)
    SR_RETURN_IF_ERROR(
        rt->MemsetAsync(device_, out_.data(), 0, sizeof(float) * out_floats, stream_));
  jobs_.clear();
  const auto* comb_offsets = reinterpret_cast<const int64_t*>(dev[0]);
  const auto* comb_ids = reinterpret_cast<const int64_t*>(dev[1]);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t n = group_begin_[g + 1] - group_begin_[g];
    const int32_t cols = groups_[g].cols;
    if (n == 0 || rows_floats < static_cast<size_t>(cols)) continue;
    // The returned rows as a table of stride 1: row id = float offset in io_; bag r is output
    // row lo + r.
    const kernels::WeightsView rows{io, DType::kFloat32,
                                    static_cast<int64_t>(rows_floats) - cols + 1, cols, 1};
    jobs_.push_back(kernels::LookupJob{rows,
                                       {comb_offsets + group_begin_[g], n - 1, comb_ids, nullptr,
                                        group_lo_[g] * D + groups_[g].col},
                                       out_.as<float>(),
                                       D});
  }
  if (dp) {
    const auto* d_offsets = reinterpret_cast<const int64_t*>(dev[2]);
    const auto* d_rows = reinterpret_cast<const int64_t*>(dev[3]);
    const float* d_weights =
        rb.dp_weights.empty() ? nullptr : reinterpret_cast<const float*>(dev[4]);
    for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
      const Pair& pair = l.pairs[l.dp_pairs[i]];
      const LocalShard& ls = l.local[l.tables[pair.table].shard_local[l.rank]];
      const size_t begin = rb.dp_offsets_begin[i];
      if (!l.sequence) {
        jobs_.push_back(
            kernels::LookupJob{params_->View(ls),
                               {d_offsets + begin, B, d_rows, d_weights, pair.out_offset},
                               out_.as<float>(),
                               D});
        continue;
      }
      // A sequence pair's ids go to their own output rows (positions of its feature, in
      // order): each run of consecutive positions is one sequence job, which writes W[row]
      // (times the weight) as the host's ReadRow does.
      const int64_t first = rb.dp_offsets[begin], last = rb.dp_offsets[begin + B];
      for (int64_t j = first; j < last;) {
        int64_t k = j + 1;
        while (k < last && rb.dp_pos[k] == rb.dp_pos[k - 1] + 1) ++k;
        jobs_.push_back(kernels::LookupJob{
            params_->View(ls),
            {nullptr, k - j, d_rows + j, d_weights != nullptr ? d_weights + j : nullptr,
             rb.dp_pos[j] * D + pair.out_offset},
            out_.as<float>(),
            D});
        j = k;
      }
    }
  }
  if (!jobs_.empty()) SR_RETURN_IF_ERROR(dk::Lookup(ctx_, jobs_, status_.data()));
  if (divide) {
    const auto* div = reinterpret_cast<const float*>(dev[5]);
    std::vector<kernels::MeanJob> mean_jobs;
    for (size_t p = 0; p < l.pairs.size(); ++p) {
      const Pair& pair = l.pairs[p];
      if (pair.mean)
        mean_jobs.push_back(kernels::MeanJob{pair.out_offset, l.plan->tables[pair.table].dim,
                                             div + static_cast<int64_t>(p) * B});
    }
    SR_RETURN_IF_ERROR(dk::DivideMeans(ctx_, out_.as<float>(), B, D, mean_jobs));
  }
  if (out_floats > 0 && !out.on_device && !out.discard)
    SR_RETURN_IF_ERROR(staging_.Download(out.data, out_.data(), sizeof(float) * out_floats));
  if (ordered)
    SR_RETURN_IF_ERROR(rt->MemcpyAsync(device_, out.data, out_.data(), sizeof(float) * out_floats,
                                       core::CopyKind::kDeviceToDevice, stream_));
  if (out.async && out.on_device && dk::HasGrad()) {
    // Stream-ordered: the phase stays queued, its checks (the status block, the unpack's word,
    // the communicator's error) are made at the next wait, and the caller's later work on its
    // stream is ordered behind the copy into its view.
    SR_RETURN_IF_ERROR(EndPhaseDeferred("device lookup", x != nullptr ? x->comm : nullptr));
    if (dev_in && !rb.unpack.empty()) {
      deferred_.unpack = true;
      deferred_.unpack_sources.clear();
      for (const UnpackPlace& u : rb.unpack) deferred_.unpack_sources.push_back(u.source);
    }
    if (out.stream != stream_)
      SR_RETURN_IF_ERROR(dk::StreamWaitStream(device_, out.stream, stream_));
    return Status::Ok();
  }
  // Routing checked every id on the host, so a row outside its shard here is an internal error.
  SR_RETURN_IF_ERROR(EndPhase("device lookup"));
  // NCCL reports a peer that failed during the exchange here, not at the enqueue.
  if (x != nullptr) SR_RETURN_IF_ERROR(x->comm->AsyncError());
  if (dev_in) SR_RETURN_IF_ERROR(CheckUnpack(rb));
  if (!out.on_device || out_floats == 0 || ordered) return Status::Ok();
  // On the caller's stream, behind its earlier work on the output buffer; waited for, so the
  // buffer holds the output when this returns (as a staged output would).
  SR_RETURN_IF_ERROR(rt->MemcpyAsync(device_, out.data, out_.data(), sizeof(float) * out_floats,
                                     core::CopyKind::kDeviceToDevice, out.stream));
  return rt->StreamWait(device_, out.stream, kDeviceWaitMs);
}

Status DeviceStep::LookupDataParallel(const RoutedBatch& rb, float* out) {
  const Layout& l = *layout_;
  if (l.dp_pairs.empty()) return Status::Ok();
  const int64_t D = l.output_dim;
  const int64_t B = rb.batch_size;
  // Pooled: [B, D] like the output, only the data-parallel columns written. Sequence: one row of
  // the table's width per id, in dp_rows order, scattered to the output rows on the host.
  const size_t out_floats =
      l.sequence ? rb.dp_rows.size() * static_cast<size_t>(D) : static_cast<size_t>(B * D);
  if (out_floats == 0) return Status::Ok();
  DeviceStaging::Piece p[3];
  p[0] = {rb.dp_offsets.data(), sizeof(int64_t) * rb.dp_offsets.size()};
  p[1] = {rb.dp_rows.data(), sizeof(int64_t) * rb.dp_rows.size()};
  p[2] = {rb.dp_weights.data(), sizeof(float) * rb.dp_weights.size()};
  SR_RETURN_IF_ERROR(dp_ids_.Reserve(device_, DeviceStaging::PackedBytes(p, 3),
                                     "the data-parallel ids on the device", stream_));
  SR_RETURN_IF_ERROR(
      dp_out_.Reserve(device_, sizeof(float) * out_floats, "data-parallel rows", stream_));
  SR_RETURN_IF_ERROR(staging_.Begin());
  size_t at[3] = {};
  SR_RETURN_IF_ERROR(staging_.Upload(dp_ids_.data(), p, 3, at));
  auto* dev = dp_ids_.as<uint8_t>();
  const auto* d_offsets = reinterpret_cast<const int64_t*>(dev + at[0]);
  const auto* d_rows = reinterpret_cast<const int64_t*>(dev + at[1]);
  const float* d_weights =
      rb.dp_weights.empty() ? nullptr : reinterpret_cast<const float*>(dev + at[2]);
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  launched_ = true;
  SR_RETURN_IF_ERROR(
      rt->MemsetAsync(device_, dp_out_.data(), 0, sizeof(float) * out_floats, stream_));
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
  SR_RETURN_IF_ERROR(
      staging_.Download(dp_host_.data(), dp_out_.data(), sizeof(float) * out_floats));
  SR_RETURN_IF_ERROR(EndPhase("device data-parallel lookup"));
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
  // Rows and gradients in one block of the shard's own buffer, so one copy each table, and the
  // tables of this phase never share device memory (their copies and updates queue back to back
  // and are waited for once, by FinishRows).
  DeviceStaging::Piece p[2] = {{rows.data(), sizeof(int64_t) * u},
                               {grads, sizeof(float) * u * ls.cols}};
  SR_RETURN_IF_ERROR(uniq_rows_[local]->Reserve(device_, DeviceStaging::PackedBytes(p, 2),
                                                "touched rows and their gradients", stream_));
  if (K > 0)
    SR_RETURN_IF_ERROR(
        stats_[local]->Reserve(device_, sizeof(float) * u * K, "row statistics", stream_));
  if (!rows_phase_) {
    SR_RETURN_IF_ERROR(staging_.Begin());
    rows_phase_ = true;
  }
  size_t at[2] = {};
  SR_RETURN_IF_ERROR(staging_.Upload(uniq_rows_[local]->data(), p, 2, at));
  auto* dev = uniq_rows_[local]->as<uint8_t>();
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
        rt->MemsetAsync(device_, stats_[local]->data(), 0, sizeof(float) * u * K, stream_));
    SR_RETURN_IF_ERROR(
        dk::PartialRowStats(ctx_, config, step, params, up, stats_[local]->as<float>()));
    stats = stats_[local]->as<float>();
  }
  return dk::Apply(ctx_, config, step, l.plan->tables[ls.table].dim, params, up, stats);
}

Status DeviceStep::FinishRows() {
  if (!rows_phase_) return Status::Ok();
  rows_phase_ = false;
  return EndPhase(nullptr);
}

bool DeviceStep::HasDeviceDataParallel() { return DeviceDataParallel::Available(); }

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
  return pack_buf_.Reserve(device_, DeviceStaging::PackedBytes(p, 4), "the gradient pack's tables",
                           stream_);
}

Status DeviceStep::QueuePack(const RoutedBatch& rb, const float* grad_dev, float* send,
                             float* self) {
  const Layout& l = *layout_;
  const int64_t B = rb.batch_size;
  // The tables' places in pack_buf_ (DeviceStaging's packing: 16-byte aligned, in order), so the
  // jobs can point at the targets and divisors that ride in the same copy.
  DeviceStaging::Piece p[4];
  size_t jobs = 0;
  PackPieces(rb, p, &jobs);
  size_t at[4] = {};
  for (size_t k = 1; k < 4; ++k) at[k] = at[k - 1] + DeviceStaging::PackedBytes(&p[k - 1], 1);
  auto* base = pack_buf_.as<uint8_t>();
  const auto* d_targets = reinterpret_cast<const int64_t*>(base + at[0]);
  const auto* d_div = reinterpret_cast<const float*>(base + at[1]);
  pack_jobs_.clear();
  pack_first_.assign(1, 0);
  int64_t k = 0;
  float* others = send;
  float* own = self;
  for (int32_t d = 0; d < l.world; ++d) {
    float*& dst = d == l.rank ? own : others;
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;
      const Unit& unit = l.units[u];
      const Pair& pair = l.pairs[unit.pair];
      kernels::simt_body::PackJob j;
      j.targets = d_targets + k;
      j.dst = dst;
      j.div = pair.mean ? d_div + static_cast<int64_t>(unit.pair) * B : nullptr;
      j.count = count;
      j.col = pair.out_offset + unit.col_offset;
      j.cols = unit.cols;
      pack_jobs_.push_back(j);
      pack_first_.push_back(pack_first_.back() + count);
      k += count;
      dst += count * unit.cols;
    }
  }
  p[2].host = pack_jobs_.data();
  p[3].host = pack_first_.data();
  size_t got[4] = {};
  SR_RETURN_IF_ERROR(staging_.Upload(base, p, 4, got));
  kernels::simt_body::PackParams pp;
  pp.grad = grad_dev;
  pp.stride = l.output_dim;
  pp.num_jobs = static_cast<int64_t>(jobs);
  pp.jobs = reinterpret_cast<const kernels::simt_body::PackJob*>(base + at[2]);
  pp.first_row = reinterpret_cast<const int64_t*>(base + at[3]);
  launched_ = true;
  return dk::PackGradients(ctx_, pp, pack_first_.back());
}

Status DeviceStep::ApplySharded(comm::Communicator& comm, SparseUpdater& updater,
                                const RoutedBatch& rb,
                                const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                                double* comm_seconds, const ShardedInputs& in) {
  const Layout& l = *layout_;
  const size_t n = l.local.size();
  const float* grads = in.grads;
  const DeviceExchange* x = in.x;
  const float* packed = in.packed;
  const float* grad_dev = in.grad_dev;
  const bool grad_on_device = in.grad_on_device;
  const DeviceDpWork* dp = in.dp;
  if (in.verdict != nullptr && !HasGate())
    return Status::Internal("ApplySharded: a gated backward without the gated grouping");
  if (dp != nullptr && !dp_.active())
    return Status::Internal("ApplySharded: data-parallel work without InitDataParallel");
  // Which shards run, and every device buffer sized before anything is queued (a buffer that
  // grows waits for the stream; the staging block's copies must not be in flight then).
  // An aggregated shard whose row statistics need no sibling's (none, or a row block of one
  // shard) is "counted": its unique-row count stays on the device (GroupRowsGated writes it
  // there) and its statistics and update read it (RowPhaseCounted), so it needs no host wait.
  // The others read their counts on the host (any_aggregated) for the statistics' exchange.
  // Column shards' statistics are summed on the device too when their exchange goes between
  // device blocks (or stays on this rank): every shard is then counted, and the exchange happens
  // in the first phase on every rank (counts_on_device_ is agreed at creation).
  const bool can_count = counts_on_device_;
  const bool counted_exchange =
      can_count && (x != nullptr || l.world == 1) && !l.stat_messages.empty();
  bool any = false;
  bool any_aggregated = false;
  size_t ws_bytes = 0;
  counted_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    num_unique_[i] = 0;
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
    counted_[i] = can_count && (tl.num_row_stats == 0 || alone || counted_exchange) ? 1 : 0;
    if (!counted_[i]) any_aggregated = true;
    // Sized for every id, as the device kernel's contract asks; the first u rows are written.
    const auto ids = static_cast<size_t>(rb.shards[i].num_ids);
    SR_RETURN_IF_ERROR(
        uniq_rows_[i]->Reserve(device_, sizeof(int64_t) * ids, "unique rows", stream_));
    SR_RETURN_IF_ERROR(uniq_grads_[i]->Reserve(device_, sizeof(float) * ids * ls.cols,
                                               "aggregated gradients", stream_));
    if (counted_[i] && tl.num_row_stats > 0)
      SR_RETURN_IF_ERROR(
          stats_[i]->Reserve(device_, sizeof(float) * CountedRowsMax(rb, i) * tl.num_row_stats,
                             "row statistics", stream_));
  }
  SR_RETURN_IF_ERROR(dev_counts_.Reserve(device_, sizeof(int64_t) * std::max<size_t>(n, 1),
                                         "the unique-row counts", stream_));
  // The statistics' exchange of counted column shards, sized for their most rows (siblings get
  // the same ids, so both ends agree on every message's size; the rows past a shard's count are
  // not read).
  std::vector<size_t> cx_send_counts, cx_recv_counts, cx_send_shards;
  size_t cx_send_total = 0, cx_recv_total = 0, cx_full_total = 0;
  full_at_.assign(n, 0);
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
      full_at_[i] = cx_full_total;
      cx_full_total += rows * K;
    }
    updater.PlanRowStats(&cx_send_counts, &cx_recv_counts, &cx_send_shards);
    for (size_t c : cx_send_counts) cx_send_total += c;
    for (size_t c : cx_recv_counts) cx_recv_total += c;
    SR_RETURN_IF_ERROR(
        stat_send_.Reserve(device_, sizeof(float) * cx_send_total, "row statistics sent", stream_));
    SR_RETURN_IF_ERROR(stat_recv_.Reserve(device_, sizeof(float) * cx_recv_total,
                                          "row statistics received", stream_));
    SR_RETURN_IF_ERROR(
        full_stats_.Reserve(device_, sizeof(float) * cx_full_total, "row statistics", stream_));
  }
  const size_t bytes = sizeof(float) * rb.ret_floats_total;
  // With the device input the batch's ids are still in its slot block: only gradients go up.
  // With a device gradient nothing of the message goes up: it is packed into dgrad_block_ (own
  // rows) and a2a_send_ (the others').
  const DeviceStaging::Piece grad_piece{grads, bytes};
  if (grad_on_device) {
    SR_RETURN_IF_ERROR(
        dgrad_block_.Reserve(device_, bytes, "the gradients on the device", stream_));
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
    SR_RETURN_IF_ERROR(workspace_.Reserve(device_, ws_bytes, "the backward workspace", stream_));
  size_t x_send = 0;
  size_t x_recv = 0;
  if (x != nullptr) {
    for (size_t c : x->send_counts) x_send += c;
    for (size_t c : x->recv_counts) x_recv += c;
    SR_RETURN_IF_ERROR(a2a_send_.Reserve(device_, sizeof(float) * x_send,
                                         "the gradient message on the device", stream_));
    // Without ids for its shards a rank receives nothing that a kernel reads; a block is still
    // the exchange's destination.
    if (!any)
      SR_RETURN_IF_ERROR(a2a_recv_.Reserve(device_, sizeof(float) * x_recv,
                                           "the received gradients on the device", stream_));
  }
  if (dp != nullptr) SR_RETURN_IF_ERROR(dp_.Reserve(rb, dp->host_grad_floats));
  if (in.verdict != nullptr)
    SR_RETURN_IF_ERROR(verdict_buf_.Reserve(device_, 4 * sizeof(int64_t), "the verdict", stream_));
  // Phase 1: the runs and the gradient message in one copy, then every shard's grouping and its
  // fused backward or aggregation, the shards in turn on the one workspace (stream-ordered).
  SR_RETURN_IF_ERROR(staging_.Begin());
  // A gated backward's verdict first: the gradient is read behind the caller's work, and every
  // update below reads the agreed word.
  const int64_t* gate = nullptr;
  if (in.verdict != nullptr) SR_RETURN_IF_ERROR(QueueVerdict(*in.verdict, &gate));
  const float* dgrads = nullptr;
  if (grad_on_device) {
    dgrads = dgrad_block_.as<float>();
    if (any && rb.device_input) {
      PlaceRuns(rb);
    } else if (any) {
      SR_RETURN_IF_ERROR(UploadRuns(rb, static_cast<const DeviceStaging::Piece*>(nullptr), 0,
                                    static_cast<uint8_t**>(nullptr)));
    }
    SR_RETURN_IF_ERROR(QueuePack(rb, grad_dev, x != nullptr ? a2a_send_.as<float>() : nullptr,
                                 dgrad_block_.as<float>() + rb.ret_self_offset));
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
      SR_RETURN_IF_ERROR(staging_.Upload(a2a_send_.data(), packed, sizeof(float) * x_send));
    comm::CallOptions o;
    o.stream = stream_;
    launched_ = true;
    void* dst = any ? const_cast<float*>(dgrads) : a2a_recv_.data();
    SR_RETURN_IF_ERROR(x->comm->AllToAllV(a2a_send_.data(), x->send_counts, dst, x->recv_counts,
                                          DType::kFloat32, o));
  }
  // The data-parallel tables' upload too, so every copy of the phase is queued before any update
  // (a failed copy then changes nothing).
  if (dp != nullptr)
    SR_RETURN_IF_ERROR(dp_.Upload(staging_, rb, dp->host_grad, dp->host_grad_floats));
  // TorchRec's gradient division, as on the host.
  const float scale = 1.0f / static_cast<float>(l.world);
  auto* counts = static_cast<int64_t*>(count_.data());
  for (size_t i = 0; i < n; ++i) {
    const LocalShard& ls = l.local[i];
    if (l.tables[ls.table].data_parallel || rb.shards[i].num_ids == 0) continue;
    const optim::OptimizerConfig& config = configs[ls.table];
    const kernels::DeviceRuns runs = Runs(i);
    // The count reaches the pinned word when the stream gets there: read after the wait.
    counts[i] = 0;
    launched_ = true;
    int64_t* dev_count = counted_[i] ? dev_counts_.as<int64_t>() + i : nullptr;
    if (gate != nullptr || dev_count != nullptr) {
      // A rejected step's grouping is emptied on the device: its updates change nothing. A
      // counted shard's count stays on the device.
      SR_RETURN_IF_ERROR(dk::GroupRowsGated(ctx_, runs, workspace_.data(), workspace_.bytes(),
                                            dev_count != nullptr ? nullptr : &counts[i], dev_count,
                                            gate));
    } else {
      SR_RETURN_IF_ERROR(
          dk::GroupRows(ctx_, runs, workspace_.data(), workspace_.bytes(), &counts[i]));
    }
    if (updater.FusedEligible(i)) {
      optim::ShardParams params = params_->Params(static_cast<int32_t>(i));
      SR_RETURN_IF_ERROR(dk::FusedBackward(ctx_, runs, dgrads, ls.cols, scale, config, step,
                                           l.plan->tables[ls.table].dim, params,
                                           workspace_.data()));
      continue;
    }
    SR_RETURN_IF_ERROR(dk::AggregateGrads(ctx_, runs, dgrads, ls.cols, ls.cols, scale,
                                          workspace_.data(), uniq_rows_[i]->as<int64_t>(),
                                          uniq_grads_[i]->as<float>()));
    if (counted_[i]) {
      // A shard with siblings' statistics to add waits for the exchange below for its update.
      const TableLayout& tl = l.tables[ls.table];
      const bool siblings =
          tl.num_row_stats > 0 && tl.blocks[FindRowBlock(tl, ls.row_offset)].shards.size() > 1;
      SR_RETURN_IF_ERROR(QueueCountedUpdate(rb, i, config, step, dev_count, !siblings));
    }
  }
  // The data-parallel tables behind the sharded ones, in the same phase (device_dp.h): their
  // all-reduce follows the gradient exchange on every rank.
  if (dp != nullptr) {
    launched_ = true;
    SR_RETURN_IF_ERROR(dp_.Queue(grad_dev, dp->comm, dp->comm_size, gate, configs, step));
  }
  if (counted_exchange)
    SR_RETURN_IF_ERROR(QueueCountedExchange(updater, rb, x, cx_send_counts, cx_recv_counts,
                                            cx_send_shards, cx_send_total, configs, step));
  // Aggregated shards need their unique-row counts on the host: the first wait. A backward of
  // fused shards only goes straight on to its one wait at the end.
  if (any_aggregated) SR_RETURN_IF_ERROR(EndPhase(nullptr));
  // Phase 2: partial row statistics of the aggregated shards, downloaded for the exchange.
  bool stats_queued = false;
  for (size_t i = 0; any_aggregated && i < n; ++i) {
    const LocalShard& ls = l.local[i];
    if (l.tables[ls.table].data_parallel || rb.shards[i].num_ids == 0) continue;
    if (updater.FusedEligible(i) || counted_[i]) continue;
    num_unique_[i] = counts[i];
    const int K = l.tables[ls.table].num_row_stats;
    const auto u = static_cast<size_t>(counts[i]);
    if (K == 0 || u == 0) continue;
    SR_RETURN_IF_ERROR(
        stats_[i]->Reserve(device_, sizeof(float) * u * K, "row statistics", stream_));
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
      updater.partial_stats(i).resize(static_cast<size_t>(num_unique_[i]) * K);
    }
    updater.PlanRowStats(&stat_send_counts, &stat_recv_counts, &stat_send_shards);
    for (size_t c : stat_send_counts) stat_send_total += c;
    for (size_t c : stat_recv_counts) stat_recv_total += c;
    SR_RETURN_IF_ERROR(stat_send_.Reserve(device_, sizeof(float) * stat_send_total,
                                          "row statistics sent", stream_));
    SR_RETURN_IF_ERROR(stat_recv_.Reserve(device_, sizeof(float) * stat_recv_total,
                                          "row statistics received", stream_));
  }
  for (size_t i = 0; any_aggregated && i < n; ++i) {
    const LocalShard& ls = l.local[i];
    const int K = l.tables[ls.table].num_row_stats;
    const auto u = static_cast<size_t>(num_unique_[i]);
    if (K == 0 || u == 0) continue;
    if (!stats_queued) SR_RETURN_IF_ERROR(staging_.Begin());
    stats_queued = true;
    optim::ShardParams params = params_->Params(static_cast<int32_t>(i));
    const optim::RowUpdate up{std::span<const int64_t>(uniq_rows_[i]->as<int64_t>(), u),
                              uniq_grads_[i]->as<float>()};
    launched_ = true;
    SR_RETURN_IF_ERROR(
        dk::PartialRowStats(ctx_, configs[ls.table], step, params, up, stats_[i]->as<float>()));
    std::vector<float>& host_stats = updater.partial_stats(i);
    host_stats.resize(u * K);
    SR_RETURN_IF_ERROR(
        staging_.Download(host_stats.data(), stats_[i]->data(), sizeof(float) * u * K));
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
    SR_RETURN_IF_ERROR(x->comm->AllToAllV(stat_send_.data(), stat_send_counts, stat_recv_.data(),
                                          stat_recv_counts, DType::kFloat32, o));
    if (stat_recv_total > 0)
      SR_RETURN_IF_ERROR(staging_.Download(updater.stat_recv(), stat_recv_.data(),
                                           sizeof(float) * stat_recv_total));
  }
  if (stats_queued) SR_RETURN_IF_ERROR(EndPhase(nullptr));
  // The statistics of sibling column shards travel over the host communicator, as on the host.
  if (!stats_on_device && !counted_exchange)
    SR_RETURN_IF_ERROR(updater.ExchangeRowStats(comm, comm_seconds));
  // Phase 3: the full statistics up and the updates, back to back, then the step's last wait.
  // One device block per shard's statistics (the updates are queued before any is waited for).
  size_t total_stats = 0;
  for (size_t i = 0; i < n; ++i)
    if (num_unique_[i] > 0) total_stats += updater.partial_stats(i).size();
  SR_RETURN_IF_ERROR(
      full_stats_.Reserve(device_, sizeof(float) * total_stats, "row statistics", stream_));
  if (any_aggregated) SR_RETURN_IF_ERROR(staging_.Begin());
  size_t stats_at = 0;
  for (size_t i = 0; i < n; ++i) {
    if (num_unique_[i] == 0) continue;
    const LocalShard& ls = l.local[i];
    const auto u = static_cast<size_t>(num_unique_[i]);
    const float* full = nullptr;
    SR_RETURN_IF_ERROR(updater.FullRowStats(i, &full));
    const float* dfull = nullptr;
    if (full != nullptr) {
      const size_t k = updater.partial_stats(i).size();
      float* dst = full_stats_.as<float>() + stats_at;
      SR_RETURN_IF_ERROR(staging_.Upload(dst, full, sizeof(float) * k));
      stats_at += k;
      dfull = dst;
    }
    optim::ShardParams params = params_->Params(static_cast<int32_t>(i));
    const optim::RowUpdate up{std::span<const int64_t>(uniq_rows_[i]->as<int64_t>(), u),
                              uniq_grads_[i]->as<float>()};
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
