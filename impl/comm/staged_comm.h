// Host-buffer collectives over a device (NCCL) communicator, for the parts of a GPU collection's
// step that the host still computes: the creation agreement, the per-step flags, the count
// exchange and whatever else travels between host buffers (a quantised encoding's message, the
// row statistics, the data-parallel all-reduce). Each call uploads its operand into a grow-only
// device block on `stream`, runs the collective of the wrapped communicator there, downloads the
// result and waits for the stream once (bounded; then the communicator's asynchronous error is
// checked, since NCCL reports a failed peer there): one host synchronisation and at most one copy
// each way per call. The payloads that stay on the device do not come here: the collection calls
// the wrapped communicator (inner()) with device buffers on its step's stream.
//
// device() is the host (its buffers are host memory); backend() is the wrapped one's. Split wraps
// the child on the same device, with a stream of its own when the parent owns one. Thread-safety
// as comm::Communicator: one thread at a time.
#pragma once

#include <memory>

#include "impl/comm/communicator.h"
#include "impl/core/device_buffer.h"

namespace shardrec::comm {

class StagedComm final : public comm::Communicator {
 public:
  // `inner` is a communicator of CUDA device `device`. With `own_stream` the wrapper makes a
  // stream of its own (for a communicator used from another thread than the step's, e.g. the
  // input exchange's worker); else it queues on `stream` (borrowed; nullptr: the legacy default
  // stream). Errors: those of the runtime (no plugin).
  static Status Create(std::shared_ptr<comm::Communicator> inner, int device, Stream stream,
                       bool own_stream, std::unique_ptr<StagedComm>* out);
  ~StagedComm() override;

  // At least `bytes` in each staging block, allocated now (a caller that knows its largest
  // operand keeps its steps free of allocations).
  Status Reserve(size_t bytes);

  comm::Communicator& inner() const { return *inner_; }
  const std::shared_ptr<comm::Communicator>& shared_inner() const { return inner_; }
  Stream stream() const { return stream_; }

  int Rank() const override { return inner_->Rank(); }
  int Size() const override { return inner_->Size(); }
  Device device() const override { return Device::Host(); }
  const char* backend() const override { return inner_->backend(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  void set_timeout(std::chrono::milliseconds t) override { inner_->set_timeout(t); }

  Status AllReduce(const void* send, void* recv, size_t count, DType dtype, comm::ReduceOp op,
                   const comm::CallOptions& opts) override;
  Status AllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                   std::span<const size_t> recv_counts, DType dtype,
                   const comm::CallOptions& opts) override;
  Status AllGatherV(const void* send, size_t send_count, void* recv,
                    std::span<const size_t> recv_counts, DType dtype,
                    const comm::CallOptions& opts) override;
  Status ReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                        DType dtype, comm::ReduceOp op, const comm::CallOptions& opts) override;
  Status Broadcast(void* buf, size_t count, DType dtype, int root,
                   const comm::CallOptions& opts) override;
  Status Barrier(const comm::CallOptions& opts) override;
  Status Split(int color, int key, std::unique_ptr<comm::Communicator>* out) override;
  void Abort() override { inner_->Abort(); }
  Status AsyncError() const override { return inner_->AsyncError(); }

 private:
  StagedComm(std::shared_ptr<comm::Communicator> inner, int device)
      : inner_(std::move(inner)), device_(device) {}
  // The call's options with this wrapper's stream.
  comm::CallOptions On(const comm::CallOptions& opts) const;
  // Uploads `bytes` of `host` into block `b` (grown as needed).
  Status Up(core::DeviceBuffer& b, const void* host, size_t bytes, const char* what);
  // Downloads `bytes` of `b` into `host`, then the call's one wait and the async-error check.
  Status DownAndWait(void* host, const core::DeviceBuffer& b, size_t bytes);

  std::shared_ptr<comm::Communicator> inner_;
  const int device_;
  Stream stream_ = nullptr;
  bool owns_stream_ = false;
  core::DeviceBuffer send_;
  core::DeviceBuffer recv_;
};

}  // namespace shardrec::comm
