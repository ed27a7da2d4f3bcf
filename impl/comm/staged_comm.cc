// Host-buffer collectives staged through device blocks around a device communicator.
#include "impl/comm/staged_comm.h"

#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"

namespace shardrec::comm {
namespace {

size_t Sum(std::span<const size_t> counts) {
  size_t s = 0;
  for (size_t c : counts) s += c;
  return s;
}

}  // namespace

Status StagedComm::Create(std::shared_ptr<comm::Communicator> inner, int device, Stream stream,
                          bool own_stream, std::unique_ptr<StagedComm>* out) {
  if (inner == nullptr) return Status::InvalidArgument("StagedComm: no communicator");
  std::unique_ptr<StagedComm> c(new StagedComm(std::move(inner), device));
  c->stream_ = stream;
  if (own_stream) {
    const core::CudaRuntime* rt = nullptr;
    SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
    Stream s = nullptr;
    const Status made = rt->StreamCreate(device, &s);
    // A plugin built before stream_create: the legacy default stream serves.
    if (made.ok()) {
      c->stream_ = s;
      c->owns_stream_ = true;
    } else if (made.code() != Code::kUnsupported) {
      return made;
    } else {
      c->stream_ = nullptr;
    }
  }
  *out = std::move(c);
  return Status::Ok();
}

StagedComm::~StagedComm() {
  const core::CudaRuntime* rt = nullptr;
  if (!core::GetCudaRuntime(&rt).ok()) return;
  // Every call waited for its stream, so nothing of this wrapper is queued any more.
  if (owns_stream_) (void)rt->StreamDestroy(device_, stream_);
}

comm::CallOptions StagedComm::On(const comm::CallOptions& opts) const {
  comm::CallOptions o = opts;
  o.stream = stream_;
  return o;
}

Status StagedComm::Reserve(size_t bytes) {
  SR_RETURN_IF_ERROR(send_.Reserve(device_, bytes, "a staged collective", stream_));
  return recv_.Reserve(device_, bytes, "a staged collective", stream_);
}

Status StagedComm::Up(core::DeviceBuffer& b, const void* host, size_t bytes, const char* what) {
  SR_RETURN_IF_ERROR(b.Reserve(device_, bytes, what, stream_));
  if (bytes == 0) return Status::Ok();
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->MemcpyAsync(device_, b.data(), host, bytes, core::CopyKind::kHostToDevice, stream_);
}

Status StagedComm::DownAndWait(void* host, const core::DeviceBuffer& b, size_t bytes) {
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  if (bytes > 0)
    SR_RETURN_IF_ERROR(
        rt->MemcpyAsync(device_, host, b.data(), bytes, core::CopyKind::kDeviceToHost, stream_));
  SR_RETURN_IF_ERROR(rt->StreamWait(device_, stream_, core::kDeviceWaitMs));
  // A collective the plugin's watchdog aborted (a dead peer) leaves the stream drained and its
  // error here, not in the enqueue's status.
  return inner_->AsyncError();
}

Status StagedComm::AllReduce(const void* send, void* recv, size_t count, DType dtype,
                             comm::ReduceOp op, const comm::CallOptions& opts) {
  const size_t bytes = count * DTypeSize(dtype);
  SR_RETURN_IF_ERROR(Up(send_, send, bytes, "staged allreduce"));
  SR_RETURN_IF_ERROR(inner_->AllReduce(send_.data(), send_.data(), count, dtype, op, On(opts)));
  return DownAndWait(recv, send_, bytes);
}

Status StagedComm::AllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                             std::span<const size_t> recv_counts, DType dtype,
                             const comm::CallOptions& opts) {
  const size_t in = Sum(send_counts) * DTypeSize(dtype);
  const size_t out = Sum(recv_counts) * DTypeSize(dtype);
  SR_RETURN_IF_ERROR(Up(send_, send, in, "staged alltoallv"));
  SR_RETURN_IF_ERROR(recv_.Reserve(device_, out, "staged alltoallv", stream_));
  SR_RETURN_IF_ERROR(
      inner_->AllToAllV(send_.data(), send_counts, recv_.data(), recv_counts, dtype, On(opts)));
  return DownAndWait(recv, recv_, out);
}

Status StagedComm::AllGatherV(const void* send, size_t send_count, void* recv,
                              std::span<const size_t> recv_counts, DType dtype,
                              const comm::CallOptions& opts) {
  const size_t in = send_count * DTypeSize(dtype);
  const size_t out = Sum(recv_counts) * DTypeSize(dtype);
  SR_RETURN_IF_ERROR(Up(send_, send, in, "staged allgatherv"));
  SR_RETURN_IF_ERROR(recv_.Reserve(device_, out, "staged allgatherv", stream_));
  SR_RETURN_IF_ERROR(
      inner_->AllGatherV(send_.data(), send_count, recv_.data(), recv_counts, dtype, On(opts)));
  return DownAndWait(recv, recv_, out);
}

Status StagedComm::ReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                                  DType dtype, comm::ReduceOp op, const comm::CallOptions& opts) {
  const size_t in = Sum(recv_counts) * DTypeSize(dtype);
  const size_t out = recv_counts.size() > static_cast<size_t>(Rank())
                         ? recv_counts[static_cast<size_t>(Rank())] * DTypeSize(dtype)
                         : 0;
  SR_RETURN_IF_ERROR(Up(send_, send, in, "staged reducescatterv"));
  SR_RETURN_IF_ERROR(recv_.Reserve(device_, out, "staged reducescatterv", stream_));
  SR_RETURN_IF_ERROR(
      inner_->ReduceScatterV(send_.data(), recv_.data(), recv_counts, dtype, op, On(opts)));
  return DownAndWait(recv, recv_, out);
}

Status StagedComm::Broadcast(void* buf, size_t count, DType dtype, int root,
                             const comm::CallOptions& opts) {
  const size_t bytes = count * DTypeSize(dtype);
  SR_RETURN_IF_ERROR(Up(send_, buf, bytes, "staged broadcast"));
  SR_RETURN_IF_ERROR(inner_->Broadcast(send_.data(), count, dtype, root, On(opts)));
  return DownAndWait(buf, send_, bytes);
}

Status StagedComm::Barrier(const comm::CallOptions& opts) {
  SR_RETURN_IF_ERROR(inner_->Barrier(On(opts)));
  return inner_->AsyncError();
}

Status StagedComm::Split(int color, int key, std::unique_ptr<comm::Communicator>* out) {
  if (out == nullptr) return inner_->Split(color, key, nullptr);  // a refusal, as the inner's
  std::unique_ptr<comm::Communicator> child;
  SR_RETURN_IF_ERROR(inner_->Split(color, key, &child));
  if (child == nullptr) {
    *out = nullptr;
    return Status::Ok();
  }
  std::unique_ptr<StagedComm> wrapped;
  SR_RETURN_IF_ERROR(StagedComm::Create(std::shared_ptr<comm::Communicator>(std::move(child)),
                                        device_, stream_, owns_stream_, &wrapped));
  *out = std::move(wrapped);
  return Status::Ok();
}

}  // namespace shardrec::comm
