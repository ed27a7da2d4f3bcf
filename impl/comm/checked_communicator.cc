// The checked prologue of the host backends: one caller, usable, arguments, timeout, in that
// order for every collective, then the backend's body.
#include "impl/comm/checked_communicator.h"

#include "impl/comm/call_checks.h"
#include "impl/comm/one_caller.h"
#include "impl/core/check.h"

namespace shardrec::comm {

Status CheckedCommunicator::ResolveTimeout(const CallOptions& opts,
                                           std::chrono::milliseconds* out) const {
  if (opts.timeout.count() < 0) {
    return Status::InvalidArgument("timeout ", opts.timeout.count(), " ms must not be negative");
  }
  *out = opts.timeout.count() > 0 ? opts.timeout : timeout();
  return Status::Ok();
}

Status CheckedCommunicator::AllReduce(const void* send, void* recv, size_t count, DType dtype,
                                      ReduceOp op, const CallOptions& opts) {
  const OneCaller caller(busy_);
  SR_RETURN_IF_ERROR(caller.Usable(*this));
  SR_RETURN_IF_ERROR(CheckAllReduceCall(send, recv, count, dtype, op));
  Call call{.stream = opts.stream};
  SR_RETURN_IF_ERROR(ResolveTimeout(opts, &call.timeout));
  return DoAllReduce(send, recv, count, dtype, op, call);
}

Status CheckedCommunicator::AllToAllV(const void* send, std::span<const size_t> send_counts,
                                      void* recv, std::span<const size_t> recv_counts, DType dtype,
                                      const CallOptions& opts) {
  const OneCaller caller(busy_);
  SR_RETURN_IF_ERROR(caller.Usable(*this));
  Call call{.stream = opts.stream};
  SR_RETURN_IF_ERROR(CheckAllToAllVCall(send, send_counts, recv, recv_counts, dtype, Size(), Rank(),
                                        &call.send_total, &call.recv_total));
  SR_RETURN_IF_ERROR(ResolveTimeout(opts, &call.timeout));
  return DoAllToAllV(send, send_counts, recv, recv_counts, dtype, call);
}

Status CheckedCommunicator::AllGatherV(const void* send, size_t send_count, void* recv,
                                       std::span<const size_t> recv_counts, DType dtype,
                                       const CallOptions& opts) {
  const OneCaller caller(busy_);
  SR_RETURN_IF_ERROR(caller.Usable(*this));
  Call call{.stream = opts.stream, .send_total = send_count};
  SR_RETURN_IF_ERROR(CheckAllGatherVCall(send, send_count, recv, recv_counts, dtype, Size(), Rank(),
                                         &call.recv_total));
  SR_RETURN_IF_ERROR(ResolveTimeout(opts, &call.timeout));
  return DoAllGatherV(send, send_count, recv, recv_counts, dtype, call);
}

Status CheckedCommunicator::ReduceScatterV(const void* send, void* recv,
                                           std::span<const size_t> recv_counts, DType dtype,
                                           ReduceOp op, const CallOptions& opts) {
  const OneCaller caller(busy_);
  SR_RETURN_IF_ERROR(caller.Usable(*this));
  Call call{.stream = opts.stream};
  SR_RETURN_IF_ERROR(CheckReduceScatterVCall(send, recv, recv_counts, dtype, op, Size(), Rank(),
                                             &call.send_total));
  call.recv_total = recv_counts[Rank()];
  SR_RETURN_IF_ERROR(ResolveTimeout(opts, &call.timeout));
  return DoReduceScatterV(send, recv, recv_counts, dtype, op, call);
}

Status CheckedCommunicator::Broadcast(void* buf, size_t count, DType dtype, int root,
                                      const CallOptions& opts) {
  const OneCaller caller(busy_);
  SR_RETURN_IF_ERROR(caller.Usable(*this));
  SR_RETURN_IF_ERROR(CheckBroadcastCall(buf, count, dtype, root, Size()));
  Call call{.stream = opts.stream, .send_total = count, .recv_total = count};
  SR_RETURN_IF_ERROR(ResolveTimeout(opts, &call.timeout));
  return DoBroadcast(buf, count, dtype, root, call);
}

Status CheckedCommunicator::Barrier(const CallOptions& opts) {
  const OneCaller caller(busy_);
  SR_RETURN_IF_ERROR(caller.Usable(*this));
  Call call{.stream = opts.stream};
  SR_RETURN_IF_ERROR(ResolveTimeout(opts, &call.timeout));
  return DoBarrier(call);
}

}  // namespace shardrec::comm
