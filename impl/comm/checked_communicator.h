// The one checked prologue of every communicator backend (Gloo, MPI, NCCL): every collective enters
// through a final, non-virtual-from-below method here that takes the communicator for the call
// (one thread at a time), refuses it while the communicator is aborted or poisoned, runs the
// collective's argument checks (call_checks.h: one wording whichever backend refuses) and
// resolves the timeout, and only then calls the backend's protected DoX with arguments known to
// be valid. A backend cannot skip or reorder the checks, and a new backend gets them by
// implementing the DoX calls. The NCCL communicators (nccl/nccl_bridge.cc) take the same
// prologue; what only the device can check (the buffers) the CUDA plugin checks after it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <span>

#include "impl/comm/communicator.h"
#include "impl/core/dtype.h"
#include "impl/core/status.h"

namespace shardrec::comm {

class CheckedCommunicator : public Communicator {
 public:
  Status AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                   const CallOptions& opts = {}) final;
  Status AllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                   std::span<const size_t> recv_counts, DType dtype,
                   const CallOptions& opts = {}) final;
  Status AllGatherV(const void* send, size_t send_count, void* recv,
                    std::span<const size_t> recv_counts, DType dtype,
                    const CallOptions& opts = {}) final;
  Status ReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                        DType dtype, ReduceOp op, const CallOptions& opts = {}) final;
  Status Broadcast(void* buf, size_t count, DType dtype, int root,
                   const CallOptions& opts = {}) final;
  Status Barrier(const CallOptions& opts = {}) final;

 protected:
  // What a checked call hands its body: the timeout resolved against the communicator's default,
  // the caller's stream (CUDA buffers staged by a host backend), and the element totals the
  // checks summed (0 where the collective has none).
  struct Call {
    std::chrono::milliseconds timeout{0};
    Stream stream = nullptr;
    size_t send_total = 0;
    size_t recv_total = 0;
  };

  virtual Status DoAllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                             const Call& call) = 0;
  virtual Status DoAllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                             std::span<const size_t> recv_counts, DType dtype,
                             const Call& call) = 0;
  virtual Status DoAllGatherV(const void* send, size_t send_count, void* recv,
                              std::span<const size_t> recv_counts, DType dtype,
                              const Call& call) = 0;
  virtual Status DoReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                                  DType dtype, ReduceOp op, const Call& call) = 0;
  virtual Status DoBroadcast(void* buf, size_t count, DType dtype, int root, const Call& call) = 0;
  virtual Status DoBarrier(const Call& call) = 0;

  // Set while a thread is inside a call (OneCaller); the backends' other calls (Split) take it
  // too.
  std::atomic<bool>& busy() { return busy_; }

 private:
  // kInvalidArgument for a negative per-call timeout; zero means the communicator's timeout().
  Status ResolveTimeout(const CallOptions& opts, std::chrono::milliseconds* out) const;

  std::atomic<bool> busy_{false};
};

}  // namespace shardrec::comm
