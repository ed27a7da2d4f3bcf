// Argument checks shared by the host communicator backends.
#include "impl/comm/call_checks.h"

#include "impl/core/check.h"

namespace shardrec::comm {

namespace {

Status CheckCallDType(DType dtype) {
  if (!IsValidDType(static_cast<int32_t>(dtype))) {
    return Status::InvalidArgument("dtype ", static_cast<int32_t>(dtype),
                                   " is not a valid element type");
  }
  return Status::Ok();
}

Status CheckCallOp(ReduceOp op) {
  const auto v = static_cast<int32_t>(op);
  if (v < 0 || v > 3)
    return Status::InvalidArgument("reduce op ", v, " is not one of sum, avg, max, min");
  return Status::Ok();
}

Status CheckCallCounts(std::span<const size_t> counts, int size, const char* name, size_t* total) {
  if (counts.size() != static_cast<size_t>(size)) {
    return Status::InvalidArgument(name, " has ", counts.size(),
                                   " entries, expected one per rank (", size, ")");
  }
  *total = 0;
  for (size_t c : counts) {
    if (__builtin_add_overflow(*total, c, total))
      return Status::InvalidArgument(name, " sum to more elements than any buffer holds");
  }
  return Status::Ok();
}

Status CheckCallBuffer(const void* p, size_t count, const char* name) {
  if (p == nullptr && count > 0)
    return Status::InvalidArgument(name, " must not be null for ", count, " elements");
  return Status::Ok();
}

}  // namespace

Status CheckAllReduceCall(const void* send, const void* recv, size_t count, DType dtype,
                          ReduceOp op) {
  SR_RETURN_IF_ERROR(CheckCallDType(dtype));
  SR_RETURN_IF_ERROR(CheckCallOp(op));
  SR_RETURN_IF_ERROR(CheckCallBuffer(send, count, "send"));
  return CheckCallBuffer(recv, count, "recv");
}

Status CheckAllToAllVCall(const void* send, std::span<const size_t> send_counts, const void* recv,
                          std::span<const size_t> recv_counts, DType dtype, int size, int rank,
                          size_t* send_total, size_t* recv_total) {
  SR_RETURN_IF_ERROR(CheckCallDType(dtype));
  SR_RETURN_IF_ERROR(CheckCallCounts(send_counts, size, "send_counts", send_total));
  SR_RETURN_IF_ERROR(CheckCallCounts(recv_counts, size, "recv_counts", recv_total));
  if (send_counts[rank] != recv_counts[rank]) {
    return Status::InvalidArgument("send_counts[", rank, "] = ", send_counts[rank],
                                   " differs from recv_counts[", rank, "] = ", recv_counts[rank],
                                   " (the block a rank sends itself)");
  }
  SR_RETURN_IF_ERROR(CheckCallBuffer(send, *send_total, "send"));
  return CheckCallBuffer(recv, *recv_total, "recv");
}

Status CheckAllGatherVCall(const void* send, size_t send_count, const void* recv,
                           std::span<const size_t> recv_counts, DType dtype, int size, int rank,
                           size_t* total) {
  SR_RETURN_IF_ERROR(CheckCallDType(dtype));
  SR_RETURN_IF_ERROR(CheckCallCounts(recv_counts, size, "recv_counts", total));
  if (recv_counts[rank] != send_count) {
    return Status::InvalidArgument("send_count ", send_count, " differs from recv_counts[", rank,
                                   "] = ", recv_counts[rank]);
  }
  SR_RETURN_IF_ERROR(CheckCallBuffer(send, send_count, "send"));
  return CheckCallBuffer(recv, *total, "recv");
}

Status CheckReduceScatterVCall(const void* send, const void* recv,
                               std::span<const size_t> recv_counts, DType dtype, ReduceOp op,
                               int size, int rank, size_t* total) {
  SR_RETURN_IF_ERROR(CheckCallDType(dtype));
  SR_RETURN_IF_ERROR(CheckCallOp(op));
  SR_RETURN_IF_ERROR(CheckCallCounts(recv_counts, size, "recv_counts", total));
  SR_RETURN_IF_ERROR(CheckCallBuffer(send, *total, "send"));
  return CheckCallBuffer(recv, recv_counts[rank], "recv");
}

Status CheckBroadcastCall(const void* buf, size_t count, DType dtype, int root, int size) {
  SR_RETURN_IF_ERROR(CheckCallDType(dtype));
  if (root < 0 || root >= size)
    return Status::InvalidArgument("root ", root, " is outside [0, ", size, ")");
  return CheckCallBuffer(buf, count, "buf");
}

}  // namespace shardrec::comm
