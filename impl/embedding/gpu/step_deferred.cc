// The end of a phase without a wait and what is learnt at the next one (step.h:
// stream-ordered calls).
#include <algorithm>
#include <cstring>
#include <vector>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/step.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

Status DeviceStep::EndPhaseDeferred(const char* status_what, comm::Communicator* comm) {
  if (status_what != nullptr) {
    // The status block comes down with the next wait and is cleared behind this phase's kernels
    // (its clear state is all-zero bytes), so the next phase's lookups report into a clean one.
    const core::CudaRuntime* rt = nullptr;
    SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
    SR_RETURN_IF_ERROR(
        staging_.Download(deferred_status_.data(), status_.data(), deferred_status_.size()));
    SR_RETURN_IF_ERROR(
        rt->MemsetAsync(device_, status_.data(), 0, deferred_status_.size(), stream_));
    deferred_.status_what = status_what;
  }
  if (comm != nullptr) deferred_.comm = comm;
  staging_.EndDeferred();
  return Status::Ok();
}

void DeviceStep::CheckDeferred() {
  Status found;
  if (deferred_.status_what != nullptr) {
    kernels::simt_body::DeviceStatus st;
    std::memcpy(static_cast<void*>(&st), deferred_status_.data(),
                std::min(sizeof(st), deferred_status_.size()));
    if (st.code == kernels::simt_body::kStatusRowOutOfRange)
      found =
          Status::InvalidArgument(deferred_.status_what, ": a row outside its shard at position ",
                                  kernels::simt_body::FirstPosition(st), " (left out)");
    else if (st.code != kernels::simt_body::kStatusOk)
      found = Status::InvalidArgument(deferred_.status_what, ": status code ", st.code);
    deferred_.status_what = nullptr;
  }
  if (found.ok() && deferred_.unpack) found = UnpackError(deferred_.unpack_sources);
  deferred_.unpack = false;
  // NCCL reports a peer that failed during a deferred phase's exchanges at its next check.
  if (found.ok() && deferred_.comm != nullptr) found = deferred_.comm->AsyncError();
  deferred_.comm = nullptr;
  if (deferred_error_.ok()) deferred_error_ = found;
}

Status DeviceStep::Synchronize() {
  // Between calls a phase still open is one that failed: what it queued for the host goes
  // nowhere (its destinations belong to the caller again, or were its own stack).
  staging_.Abandon();
  if (!launched_ && !staging_.queued()) return Status::Ok();
  SR_RETURN_IF_ERROR(Wait());
  launched_ = false;
  staging_.Deliver();
  return Status::Ok();
}

Status DeviceStep::TakeDeferredError() {
  Status s = std::move(deferred_error_);
  deferred_error_ = Status::Ok();
  return s;
}

}  // namespace shardrec::embedding
