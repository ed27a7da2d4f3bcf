// The NCCL communicator's collectives. NCCL 2.28 has no variable-size all-to-all, so the "V"
// operations use grouped ncclSend/ncclRecv (or one ncclReduce per block) unless every block has
// the same size, where the native collective (ncclAlltoAll, ncclAllGather, ncclReduceScatter)
// is faster.
#include <algorithm>
#include <vector>

#include "impl/cuda_plugin/cuda_util.h"
#include "impl/cuda_plugin/nccl_communicator.h"
#include "impl/cuda_plugin/nccl_util.h"

namespace shardrec::cuda_plugin {
namespace {

cudaStream_t ToStream(const comm::CallOptions& opts) {
  return static_cast<cudaStream_t>(opts.stream);
}

// Runs `body` inside ncclGroupStart/End; the group is always closed, even after a failure.
template <typename Body>
ncclResult_t Grouped(const DeviceApi& api, Body&& body) {
  ncclResult_t r = api.NcclGroupStart();
  if (r != ncclSuccess) return r;
  const ncclResult_t inner = body();
  r = api.NcclGroupEnd();
  return inner != ncclSuccess ? inner : r;
}

bool AllEqual(std::span<const size_t> counts) {
  return std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
}

std::vector<size_t> Offsets(std::span<const size_t> counts) {
  std::vector<size_t> out(counts.size());
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    out[i] = at;
    at += counts[i];
  }
  return out;
}

size_t Sum(std::span<const size_t> counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

Status CheckBuffer(const void* p, size_t count, const char* what) {
  if (count > 0 && p == nullptr) {
    return Status::InvalidArgument(what, " must not be NULL when it holds ", count, " elements");
  }
  return Status::Ok();
}

Status CheckType(DType dtype, ncclDataType_t* out) {
  if (!ToNccl(dtype, out)) {
    return Status::InvalidArgument("unsupported dtype ", static_cast<int32_t>(dtype));
  }
  return Status::Ok();
}

Status CheckOp(comm::ReduceOp op, ncclRedOp_t* out) {
  if (!ToNccl(op, out)) {
    return Status::InvalidArgument("unsupported reduce op ", static_cast<int32_t>(op));
  }
  return Status::Ok();
}

const char* At(const void* base, size_t elements, DType dtype) {
  return static_cast<const char*>(base) + elements * DTypeSize(dtype);
}
char* At(void* base, size_t elements, DType dtype) {
  return static_cast<char*>(base) + elements * DTypeSize(dtype);
}

}  // namespace

template <typename Fn>
Status NcclCommunicator::Enqueue(const char* what, Stream stream, Clock::time_point deadline,
                                 Fn&& enqueue) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    SR_RETURN_IF_ERROR(CheckUsableLocked());
    DeviceGuard guard(api_);
    SR_RETURN_IF_ERROR(guard.Set(device_));
    const ncclResult_t r = enqueue(comm_);
    if (r != ncclSuccess && r != ncclInProgress) {
      return FailLocked(NcclStatus(api_, r, what, comm_));
    }
    // The event goes right behind the NCCL kernels on the same stream, so it completes exactly
    // when they do. A non-blocking enqueue still in progress has not reached the stream yet.
    if (r == ncclSuccess) return TrackLocked(static_cast<cudaStream_t>(stream), what, deadline);
  }
  SR_RETURN_IF_ERROR(WaitReady(what, deadline));
  std::lock_guard<std::mutex> lock(mu_);
  SR_RETURN_IF_ERROR(CheckUsableLocked());
  DeviceGuard guard(api_);
  SR_RETURN_IF_ERROR(guard.Set(device_));
  return TrackLocked(static_cast<cudaStream_t>(stream), what, deadline);
}

Status NcclCommunicator::AllReduce(const void* send, void* recv, size_t count, DType dtype,
                                   comm::ReduceOp op, const comm::CallOptions& opts) {
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t nop = ncclSum;
  SR_RETURN_IF_ERROR(CheckType(dtype, &type));
  SR_RETURN_IF_ERROR(CheckOp(op, &nop));
  SR_RETURN_IF_ERROR(CheckBuffer(send, count, "allreduce send buffer"));
  SR_RETURN_IF_ERROR(CheckBuffer(recv, count, "allreduce recv buffer"));
  if (count == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    return CheckUsableLocked();
  }
  return Enqueue("allreduce", opts.stream, Deadline(opts), [&](ncclComm_t c) {
    return api_.NcclAllReduce(send, recv, count, type, nop, c, ToStream(opts));
  });
}

Status NcclCommunicator::AllToAllV(const void* send, std::span<const size_t> send_counts,
                                   void* recv, std::span<const size_t> recv_counts, DType dtype,
                                   const comm::CallOptions& opts) {
  ncclDataType_t type = ncclFloat32;
  SR_RETURN_IF_ERROR(CheckType(dtype, &type));
  if (send_counts.size() != static_cast<size_t>(size_) ||
      recv_counts.size() != static_cast<size_t>(size_)) {
    return Status::InvalidArgument("alltoallv needs ", size_, " send and recv counts, got ",
                                   send_counts.size(), " and ", recv_counts.size());
  }
  SR_RETURN_IF_ERROR(CheckBuffer(send, Sum(send_counts), "alltoallv send buffer"));
  SR_RETURN_IF_ERROR(CheckBuffer(recv, Sum(recv_counts), "alltoallv recv buffer"));
  if (AllEqual(send_counts) && AllEqual(recv_counts) && send_counts[0] == recv_counts[0]) {
    if (send_counts[0] == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      return CheckUsableLocked();
    }
    return Enqueue("alltoallv", opts.stream, Deadline(opts), [&](ncclComm_t c) {
      return api_.NcclAllToAll(send, recv, send_counts[0], type, c, ToStream(opts));
    });
  }
  const std::vector<size_t> send_at = Offsets(send_counts);
  const std::vector<size_t> recv_at = Offsets(recv_counts);
  return Enqueue("alltoallv", opts.stream, Deadline(opts), [&](ncclComm_t c) {
    return Grouped(api_, [&] {
      for (int p = 0; p < size_; ++p) {
        ncclResult_t r = ncclSuccess;
        if (send_counts[p] > 0) {
          r = api_.NcclSend(At(send, send_at[p], dtype), send_counts[p], type, p, c,
                            ToStream(opts));
        }
        if (r == ncclSuccess && recv_counts[p] > 0) {
          r = api_.NcclRecv(At(recv, recv_at[p], dtype), recv_counts[p], type, p, c,
                            ToStream(opts));
        }
        if (r != ncclSuccess) return r;
      }
      return ncclSuccess;
    });
  });
}

Status NcclCommunicator::AllGatherV(const void* send, size_t send_count, void* recv,
                                    std::span<const size_t> recv_counts, DType dtype,
                                    const comm::CallOptions& opts) {
  ncclDataType_t type = ncclFloat32;
  SR_RETURN_IF_ERROR(CheckType(dtype, &type));
  if (recv_counts.size() != static_cast<size_t>(size_)) {
    return Status::InvalidArgument("allgatherv needs ", size_, " recv counts, got ",
                                   recv_counts.size());
  }
  if (send_count != recv_counts[rank_]) {
    return Status::InvalidArgument("allgatherv send count ", send_count,
                                   " differs from recv_counts[", rank_, "] = ", recv_counts[rank_]);
  }
  SR_RETURN_IF_ERROR(CheckBuffer(send, send_count, "allgatherv send buffer"));
  SR_RETURN_IF_ERROR(CheckBuffer(recv, Sum(recv_counts), "allgatherv recv buffer"));
  if (Sum(recv_counts) == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    return CheckUsableLocked();
  }
  if (AllEqual(recv_counts)) {
    return Enqueue("allgatherv", opts.stream, Deadline(opts), [&](ncclComm_t c) {
      return api_.NcclAllGather(send, recv, send_count, type, c, ToStream(opts));
    });
  }
  const std::vector<size_t> recv_at = Offsets(recv_counts);
  return Enqueue("allgatherv", opts.stream, Deadline(opts), [&](ncclComm_t c) {
    return Grouped(api_, [&] {
      for (int p = 0; p < size_; ++p) {
        ncclResult_t r = ncclSuccess;
        if (send_count > 0) r = api_.NcclSend(send, send_count, type, p, c, ToStream(opts));
        if (r == ncclSuccess && recv_counts[p] > 0) {
          r = api_.NcclRecv(At(recv, recv_at[p], dtype), recv_counts[p], type, p, c,
                            ToStream(opts));
        }
        if (r != ncclSuccess) return r;
      }
      return ncclSuccess;
    });
  });
}

Status NcclCommunicator::ReduceScatterV(const void* send, void* recv,
                                        std::span<const size_t> recv_counts, DType dtype,
                                        comm::ReduceOp op, const comm::CallOptions& opts) {
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t nop = ncclSum;
  SR_RETURN_IF_ERROR(CheckType(dtype, &type));
  SR_RETURN_IF_ERROR(CheckOp(op, &nop));
  if (recv_counts.size() != static_cast<size_t>(size_)) {
    return Status::InvalidArgument("reducescatterv needs ", size_, " recv counts, got ",
                                   recv_counts.size());
  }
  SR_RETURN_IF_ERROR(CheckBuffer(send, Sum(recv_counts), "reducescatterv send buffer"));
  SR_RETURN_IF_ERROR(CheckBuffer(recv, recv_counts[rank_], "reducescatterv recv buffer"));
  if (Sum(recv_counts) == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    return CheckUsableLocked();
  }
  if (AllEqual(recv_counts)) {
    return Enqueue("reducescatterv", opts.stream, Deadline(opts), [&](ncclComm_t c) {
      return api_.NcclReduceScatter(send, recv, recv_counts[0], type, nop, c, ToStream(opts));
    });
  }
  const std::vector<size_t> send_at = Offsets(recv_counts);
  return Enqueue("reducescatterv", opts.stream, Deadline(opts), [&](ncclComm_t c) {
    return Grouped(api_, [&] {
      for (int root = 0; root < size_; ++root) {
        if (recv_counts[root] == 0) continue;
        // Only the root's recv buffer is written; the others pass a valid placeholder (their
        // own recv, or the send block when they receive nothing).
        const char* block = At(send, send_at[root], dtype);
        void* sink = recv != nullptr ? recv : const_cast<char*>(block);
        const ncclResult_t r =
            api_.NcclReduce(block, sink, recv_counts[root], type, nop, root, c, ToStream(opts));
        if (r != ncclSuccess) return r;
      }
      return ncclSuccess;
    });
  });
}

Status NcclCommunicator::Broadcast(void* buf, size_t count, DType dtype, int root,
                                   const comm::CallOptions& opts) {
  ncclDataType_t type = ncclFloat32;
  SR_RETURN_IF_ERROR(CheckType(dtype, &type));
  if (root < 0 || root >= size_) {
    return Status::InvalidArgument("broadcast root ", root, " is outside [0, ", size_, ")");
  }
  SR_RETURN_IF_ERROR(CheckBuffer(buf, count, "broadcast buffer"));
  if (count == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    return CheckUsableLocked();
  }
  return Enqueue("broadcast", opts.stream, Deadline(opts), [&](ncclComm_t c) {
    return api_.NcclBroadcast(buf, buf, count, type, root, c, ToStream(opts));
  });
}

Status NcclCommunicator::Barrier(const comm::CallOptions& opts) {
  // A one-element all-reduce on the caller's stream, then a bounded wait for that stream: the
  // barrier also waits for the work queued before it, which is what callers expect.
  const Clock::time_point deadline = Deadline(opts);
  SR_RETURN_IF_ERROR(Enqueue("barrier", opts.stream, deadline, [&](ncclComm_t c) {
    return api_.NcclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, c, ToStream(opts));
  }));
  DeviceGuard guard(api_);
  SR_RETURN_IF_ERROR(guard.Set(device_));
  return WaitStream(opts.stream, "barrier", deadline);
}

}  // namespace shardrec::cuda_plugin
