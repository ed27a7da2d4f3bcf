// A backward's verdict on the device (verdict.h: the object that owns its words): its own phase
// (Verdict), or queued first in the update phase as the gate its updates read (QueueVerdict),
// and what a rank that rejected its call packs (step.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/step.h"
#include "impl/embedding/gpu/verdict.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

Status DeviceVerdict::Reserve(int device, Stream stream, size_t words) {
  return words_.Reserve(device, words * sizeof(int64_t), "the verdict", stream);
}

Status DeviceVerdict::Queue(const VerdictPhase& ph, const DeviceVerdictWork& v,
                            const int64_t** gate) {
  // Words: [0] this rank's flag, [1] the agreed one (the gate), [2, 4) the check's first
  // non-finite element.
  auto* words = words_.as<int64_t>();
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  if (v.grad != nullptr && v.caller != ph.stream)
    SR_RETURN_IF_ERROR(dk::StreamWaitStream(ph.device, ph.stream, v.caller));
  if (v.check && v.n > 0 && v.local_flag == 0) {
    kernels::simt_body::FiniteParams p;
    p.x = v.grad;
    p.n = static_cast<int64_t>(v.n);
    p.flag_value = v.rank + 1;
    p.flag = words;
    p.result = reinterpret_cast<kernels::simt_body::FiniteResult*>(words + 2);
    SR_RETURN_IF_ERROR(dk::CheckFinite(*ph.ctx, p));
  } else {
    // An accepting rank's flag is a memset; only a rejecting one's goes up.
    if (v.local_flag != 0) {
      SR_RETURN_IF_ERROR(ph.staging->Upload(words, &v.local_flag, sizeof(v.local_flag)));
    } else {
      SR_RETURN_IF_ERROR(rt->MemsetAsync(ph.device, words, 0, sizeof(int64_t), ph.stream));
    }
    SR_RETURN_IF_ERROR(rt->MemsetAsync(ph.device, words + 2, 0, 2 * sizeof(int64_t), ph.stream));
  }
  if (v.comm != nullptr) {
    comm::CallOptions o;
    o.stream = ph.stream;
    SR_RETURN_IF_ERROR(
        v.comm->AllReduce(words, words + 1, 1, DType::kInt64, comm::ReduceOp::kMax, o));
  } else {
    SR_RETURN_IF_ERROR(rt->MemcpyAsync(ph.device, words + 1, words, sizeof(int64_t),
                                       core::CopyKind::kDeviceToDevice, ph.stream));
  }
  SR_RETURN_IF_ERROR(ph.staging->Download(host_, words + 1, sizeof(host_), &ticket_));
  *gate = words + 1;
  return Status::Ok();
}

void DeviceVerdict::Read(int64_t* agreed, int64_t* first_bad, float* bad_value) const {
  *agreed = host_[0];
  kernels::simt_body::FiniteResult r;
  std::memcpy(static_cast<void*>(&r), host_ + 1, sizeof(r));
  *first_bad =
      kernels::simt_body::HasMin(r.inv_first) ? kernels::simt_body::MinOf(r.inv_first) : -1;
  *bad_value = r.value;
}

Status DeviceVerdict::QueueOwn(const VerdictPhase& ph, comm::Communicator* comm, int64_t local_flag,
                               int64_t* agreed) {
  // Words: [0] this rank's verdict, [1] the agreed one.
  auto* words = words_.as<int64_t>();
  SR_RETURN_IF_ERROR(ph.staging->Upload(words, &local_flag, sizeof(local_flag)));
  if (comm != nullptr) {
    comm::CallOptions o;
    o.stream = ph.stream;
    SR_RETURN_IF_ERROR(
        comm->AllReduce(words, words + 1, 1, DType::kInt64, comm::ReduceOp::kMax, o));
  } else {
    const core::CudaRuntime* rt = nullptr;
    SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
    SR_RETURN_IF_ERROR(rt->MemcpyAsync(ph.device, words + 1, words, sizeof(int64_t),
                                       core::CopyKind::kDeviceToDevice, ph.stream));
  }
  return ph.staging->Download(agreed, words + 1, sizeof(*agreed));
}

// The step's side: its phase bookkeeping around the verdict object.

Status DeviceStep::QueueVerdict(const DeviceVerdictWork& v, const int64_t** gate) {
  launched_ = true;
  return verdict_.Queue(Phase(), v, gate);
}

void DeviceStep::ReadVerdict(int64_t* agreed, int64_t* first_bad, float* bad_value) const {
  verdict_.Read(agreed, first_bad, bad_value);
}

Status DeviceStep::JunkGradient(size_t floats, const float** out) {
  SR_RETURN_IF_ERROR(bwd_.junk_grad.Reserve(device_, sizeof(float) * std::max<size_t>(floats, 1),
                                            "a rejected call's gradient", stream_));
  *out = bwd_.junk_grad.as<float>();
  return Status::Ok();
}

Status DeviceStep::Verdict(comm::Communicator* comm, int64_t local_flag, int64_t* agreed) {
  SR_RETURN_IF_ERROR(verdict_.Reserve(device_, stream_, 2));
  int64_t down = 0;
  SR_RETURN_IF_ERROR(staging_.Reserve(64));
  SR_RETURN_IF_ERROR(staging_.Begin());
  launched_ = true;
  SR_RETURN_IF_ERROR(verdict_.QueueOwn(Phase(), comm, local_flag, &down));
  SR_RETURN_IF_ERROR(EndPhase(nullptr));
  if (comm != nullptr) SR_RETURN_IF_ERROR(comm->AsyncError());
  *agreed = down;
  return Status::Ok();
}

}  // namespace shardrec::embedding
