// The device step's input distribution (step.h, input.h): the batch slots' blocks,
// the unpack's tables, the routed messages' exchange between device buffers and the route
// summaries' all-gather.
#include <algorithm>
#include <cstring>
#include <span>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/sizing.h"
#include "impl/embedding/gpu/step.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

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

}  // namespace shardrec::embedding
