// Replica sync over a device (NCCL) replica group: a GPU collection's fp32 and integer arenas are
// all-reduced in place on the device, on its legacy default stream (the collection's own stream
// synchronises with it, so the sync runs behind the step's work and the next step behind the
// sync): adjacent buffers of one (dtype, op) become one collective, as SyncBuffers merges them,
// and the whole sync ends with ONE bounded wait and the communicator's asynchronous error. No
// byte of those arenas crosses to the host. 16-bit arenas are averaged in fp32 and rounded once
// (as SyncBuffers does on the host, which NCCL's 16-bit reductions would not match), and any
// host-resident buffer, go through the host staging first, their collectives over the staging
// wrapper; both on the same stream, in the same order on every replica.
#include <map>
#include <utility>

#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"
#include "impl/core/device_buffer.h"
#include "impl/replica/mesh.h"

namespace shardrec::replica {

Status Mesh::SyncOverDevice(std::vector<SyncBuffer>* buffers,
                            std::vector<embedding::ParamBuffer>* params) {
  last_ = SyncStats{};
  if (replica_->Size() <= 1) return Status::Ok();
  if (hook_)
    return Status::Unsupported(
        "a custom sync hook is handed host buffers: it is not supported with a device (NCCL) "
        "replica group; use a host (Gloo) world for the mesh");
  // Staged: host-resident buffers and 16-bit device arenas. Direct: the rest.
  std::vector<SyncBuffer> staged_buffers;
  std::vector<embedding::ParamBuffer> staged_params;
  std::vector<size_t> direct;
  int device = -1;
  for (size_t i = 0; i < buffers->size(); ++i) {
    const embedding::ParamBuffer& p = (*params)[i];
    const SyncBuffer& b = (*buffers)[i];
    if (p.data != nullptr) {
      if (device >= 0 && p.device.index != device)
        return Status::InvalidArgument("replica sync: parameters on two devices");
      device = p.device.index;
      if (p.device.index != replica_->device().index)
        return Status::InvalidArgument("replica sync: the collection's parameters are on ",
                                       p.device.ToString(), " but the replica group on ",
                                       replica_->device().ToString());
    }
    const bool half = b.dtype == DType::kFloat16 || b.dtype == DType::kBFloat16;
    if (p.data != nullptr && !half) {
      direct.push_back(i);
    } else {
      staged_buffers.push_back(b);
      staged_params.push_back(p);
    }
  }
  bool any_staged = false;
  for (const auto& p : staged_params) any_staged = any_staged || p.data != nullptr;
  if (!staged_buffers.empty()) {
    if (any_staged) SR_RETURN_IF_ERROR(StageIn(staged_params, &staged_buffers));
    SyncStats s;
    SR_RETURN_IF_ERROR(SyncBuffers(*replica_host_, staged_buffers, SyncHook(), &staging_, &s));
    if (any_staged) SR_RETURN_IF_ERROR(StageOut(staged_params, staged_buffers));
    last_ = s;
  }
  if (direct.empty()) return Status::Ok();
  // Group by (dtype, op) in a fixed order, then merge neighbours in memory (the weight and state
  // arenas), exactly as SyncBuffers groups host buffers.
  std::map<std::pair<int, int>, std::vector<SyncBuffer>> groups;
  for (size_t i : direct) {
    const SyncBuffer& b = (*buffers)[i];
    if (b.count == 0) continue;
    auto& spans = groups[{static_cast<int>(b.dtype), static_cast<int>(b.op)}];
    const size_t es = DTypeSize(b.dtype);
    if (!spans.empty() && static_cast<uint8_t*>(spans.back().data) + spans.back().count * es ==
                              static_cast<uint8_t*>(b.data)) {
      spans.back().count += b.count;
    } else {
      spans.push_back(b);
    }
  }
  comm::CallOptions o;
  o.stream = nullptr;  // the legacy default stream: ordered with the collection's own
  for (const auto& [key, spans] : groups) {
    for (const SyncBuffer& b : spans) {
      SR_RETURN_IF_ERROR(replica_->AllReduce(b.data, b.data, b.count, b.dtype, b.op, o));
      last_.bytes += b.count * DTypeSize(b.dtype);
      last_.collectives += 1;
    }
  }
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  SR_RETURN_IF_ERROR(rt->StreamWait(device, nullptr, core::kDeviceWaitMs));
  return replica_->AsyncError().WithContext(
      "replica sync over NCCL (this replica's parameters may be partly averaged: restore them "
      "from a checkpoint)");
}

}  // namespace shardrec::replica
