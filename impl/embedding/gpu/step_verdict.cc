// A backward's verdict on the device: its own phase (Verdict), or queued first in the update
// phase as the gate its updates read (QueueVerdict), and what a rank that rejected its call
// packs (step.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/step.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

Status DeviceStep::QueueVerdict(const DeviceVerdictWork& v, const int64_t** gate) {
  // Words: [0] this rank's flag, [1] the agreed one (the gate), [2, 4) the check's first
  // non-finite element.
  auto* words = verdict_buf_.as<int64_t>();
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  if (v.grad != nullptr && v.caller != stream_)
    SR_RETURN_IF_ERROR(dk::StreamWaitStream(device_, stream_, v.caller));
  launched_ = true;
  if (v.check && v.n > 0 && v.local_flag == 0) {
    kernels::simt_body::FiniteParams p;
    p.x = v.grad;
    p.n = static_cast<int64_t>(v.n);
    p.flag_value = v.rank + 1;
    p.flag = words;
    p.result = reinterpret_cast<kernels::simt_body::FiniteResult*>(words + 2);
    SR_RETURN_IF_ERROR(dk::CheckFinite(ctx_, p));
  } else {
    // An accepting rank's flag is a memset; only a rejecting one's goes up.
    if (v.local_flag != 0) {
      SR_RETURN_IF_ERROR(staging_.Upload(words, &v.local_flag, sizeof(v.local_flag)));
    } else {
      SR_RETURN_IF_ERROR(rt->MemsetAsync(device_, words, 0, sizeof(int64_t), stream_));
    }
    SR_RETURN_IF_ERROR(rt->MemsetAsync(device_, words + 2, 0, 2 * sizeof(int64_t), stream_));
  }
  if (v.comm != nullptr) {
    comm::CallOptions o;
    o.stream = stream_;
    SR_RETURN_IF_ERROR(
        v.comm->AllReduce(words, words + 1, 1, DType::kInt64, comm::ReduceOp::kMax, o));
  } else {
    SR_RETURN_IF_ERROR(rt->MemcpyAsync(device_, words + 1, words, sizeof(int64_t),
                                       core::CopyKind::kDeviceToDevice, stream_));
  }
  SR_RETURN_IF_ERROR(
      staging_.Download(verdict_host_, words + 1, sizeof(verdict_host_), &verdict_ticket_));
  *gate = words + 1;
  return Status::Ok();
}

void DeviceStep::ReadVerdict(int64_t* agreed, int64_t* first_bad, float* bad_value) const {
  *agreed = verdict_host_[0];
  kernels::simt_body::FiniteResult r;
  std::memcpy(static_cast<void*>(&r), verdict_host_ + 1, sizeof(r));
  *first_bad =
      kernels::simt_body::HasMin(r.inv_first) ? kernels::simt_body::MinOf(r.inv_first) : -1;
  *bad_value = r.value;
}

Status DeviceStep::JunkGradient(size_t floats, const float** out) {
  SR_RETURN_IF_ERROR(junk_grad_.Reserve(device_, sizeof(float) * std::max<size_t>(floats, 1),
                                        "a rejected call's gradient", stream_));
  *out = junk_grad_.as<float>();
  return Status::Ok();
}

Status DeviceStep::Verdict(comm::Communicator* comm, int64_t local_flag, int64_t* agreed) {
  // Words: [0] this rank's verdict, [1] the agreed one.
  SR_RETURN_IF_ERROR(verdict_buf_.Reserve(device_, 2 * sizeof(int64_t), "the verdict", stream_));
  auto* words = verdict_buf_.as<int64_t>();
  int64_t down = 0;
  SR_RETURN_IF_ERROR(staging_.Reserve(64));
  SR_RETURN_IF_ERROR(staging_.Begin());
  SR_RETURN_IF_ERROR(staging_.Upload(words, &local_flag, sizeof(local_flag)));
  launched_ = true;
  if (comm != nullptr) {
    comm::CallOptions o;
    o.stream = stream_;
    SR_RETURN_IF_ERROR(
        comm->AllReduce(words, words + 1, 1, DType::kInt64, comm::ReduceOp::kMax, o));
  } else {
    const core::CudaRuntime* rt = nullptr;
    SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
    SR_RETURN_IF_ERROR(rt->MemcpyAsync(device_, words + 1, words, sizeof(int64_t),
                                       core::CopyKind::kDeviceToDevice, stream_));
  }
  SR_RETURN_IF_ERROR(staging_.Download(&down, words + 1, sizeof(down)));
  SR_RETURN_IF_ERROR(EndPhase(nullptr));
  if (comm != nullptr) SR_RETURN_IF_ERROR(comm->AsyncError());
  *agreed = down;
  return Status::Ok();
}

}  // namespace shardrec::embedding
