// Host-memory collective bodies of GlooCommunicator on top of Gloo's algorithms.
//
// ReduceScatterV is an AllToAllV followed by a local reduction in rank order, not Gloo's
// ReduceScatterHalvingDoubling: that one is an old-style algorithm bound to per-pair buffers,
// takes int counts, has no per-call timeout, and must be rebuilt for every buffer. The
// all-to-all moves the same (n-1)/n of the data per rank as a ring reduce-scatter, and the
// rank-ordered reduction makes the result bitwise deterministic.
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>

#include <cstring>
#include <vector>

#include "impl/comm/gloo/gloo_communicator.h"
#include "impl/comm/reduce.h"
#include "impl/core/check.h"

namespace shardrec::comm {

namespace {

// Gloo's typed setters only use sizeof(T); an unsigned type of the element's width will do.
template <typename F>
void WithElementWidth(size_t width, F&& f) {
  switch (width) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    default:
      f(uint64_t{});
      break;
  }
}

// Gloo rejects some null pointers even for empty buffers; point those at a harmless byte.
void* NonNull(const void* p) {
  static uint64_t dummy = 0;
  return p != nullptr ? const_cast<void*>(p) : &dummy;
}

}  // namespace

Status GlooCommunicator::HostAllReduce(const void* send, void* recv, size_t count, DType dtype,
                                       ReduceOp op, std::chrono::milliseconds timeout) {
  if (count == 0) return Status::Ok();
  const size_t width = DTypeSize(dtype);
  if (size_ == 1) {
    if (send != recv) std::memmove(recv, send, count * width);
    return Status::Ok();
  }
  ReduceFn fn = nullptr;
  SR_RETURN_IF_ERROR(GetReduceFn(dtype, op, &fn));
  SR_RETURN_IF_ERROR(Run("allreduce", timeout, [&] {
    WithElementWidth(width, [&](auto tag) {
      using T = decltype(tag);
      gloo::AllreduceOptions o(context_);
      if (send != recv) o.setInput(static_cast<T*>(const_cast<void*>(send)), count);
      o.setOutput(static_cast<T*>(recv), count);
      o.setReduceFunction(fn);
      o.setTimeout(timeout);
      gloo::allreduce(o);
    });
  }));
  if (op == ReduceOp::kAvg) DivideBy(recv, count, dtype, size_);
  return Status::Ok();
}

Status GlooCommunicator::HostAllToAllV(const void* send, std::span<const size_t> send_counts,
                                       void* recv, std::span<const size_t> recv_counts, DType dtype,
                                       std::chrono::milliseconds timeout) {
  const size_t width = DTypeSize(dtype);
  if (size_ == 1) {  // the counts to itself agree (CheckAllToAllVCall)
    if (send_counts[0] > 0 && send != recv) std::memmove(recv, send, send_counts[0] * width);
    return Status::Ok();
  }
  std::vector<int64_t> sc(send_counts.begin(), send_counts.end());
  std::vector<int64_t> rc(recv_counts.begin(), recv_counts.end());
  return Run("alltoallv", timeout, [&] {
    WithElementWidth(width, [&](auto tag) {
      using T = decltype(tag);
      gloo::AlltoallvOptions o(context_);
      o.setInput(static_cast<T*>(NonNull(send)), sc);
      o.setOutput(static_cast<T*>(NonNull(recv)), rc);
      o.setTimeout(timeout);
      gloo::alltoallv(o);
    });
  });
}

Status GlooCommunicator::HostAllGatherV(const void* send, size_t send_count, void* recv,
                                        std::span<const size_t> recv_counts, DType dtype,
                                        std::chrono::milliseconds timeout) {
  const size_t width = DTypeSize(dtype);
  if (size_ == 1) {
    if (send_count > 0 && send != recv) std::memmove(recv, send, send_count * width);
    return Status::Ok();
  }
  std::vector<size_t> counts(recv_counts.begin(), recv_counts.end());
  return Run("allgatherv", timeout, [&] {
    WithElementWidth(width, [&](auto tag) {
      using T = decltype(tag);
      gloo::AllgathervOptions o(context_);
      o.setInput(static_cast<T*>(NonNull(send)), send_count);
      o.setOutput(static_cast<T*>(NonNull(recv)), counts);
      o.setTimeout(timeout);
      gloo::allgatherv(o);
    });
  });
}

Status GlooCommunicator::HostReduceScatterV(const void* send, void* recv,
                                            std::span<const size_t> recv_counts, DType dtype,
                                            ReduceOp op, std::chrono::milliseconds timeout) {
  const size_t width = DTypeSize(dtype);
  const size_t mine = recv_counts[rank_];
  if (size_ == 1) {
    if (mine > 0) std::memmove(recv, send, mine * width);
    return Status::Ok();
  }
  ReduceFn fn = nullptr;
  SR_RETURN_IF_ERROR(GetReduceFn(dtype, op, &fn));
  // Block d of `send` goes to rank d; this rank receives its block from every rank.
  std::vector<uint8_t> gathered(mine * width * static_cast<size_t>(size_));
  std::vector<size_t> from_each(size_, mine);
  SR_RETURN_IF_ERROR(HostAllToAllV(send, recv_counts, gathered.data(), from_each, dtype, timeout));
  if (mine == 0) return Status::Ok();
  std::memcpy(recv, gathered.data(), mine * width);
  for (int s = 1; s < size_; ++s) fn(recv, recv, gathered.data() + s * mine * width, mine);
  if (op == ReduceOp::kAvg) DivideBy(recv, mine, dtype, size_);
  return Status::Ok();
}

Status GlooCommunicator::HostBroadcast(void* buf, size_t count, DType dtype, int root,
                                       std::chrono::milliseconds timeout) {
  if (count == 0 || size_ == 1) return Status::Ok();
  return Run("broadcast", timeout, [&] {
    WithElementWidth(DTypeSize(dtype), [&](auto tag) {
      using T = decltype(tag);
      gloo::BroadcastOptions o(context_);
      o.setOutput(static_cast<T*>(buf), count);
      o.setRoot(root);
      o.setTimeout(timeout);
      gloo::broadcast(o);
    });
  });
}

}  // namespace shardrec::comm
