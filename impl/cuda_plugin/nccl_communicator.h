// comm::Communicator over NCCL, built by the plugin for the NCCL bridge in impl/comm/nccl.
//
// Blocking behaviour. Collectives (AllReduce, AllToAllV, AllGatherV, ReduceScatterV, Broadcast)
// are asynchronous on CallOptions::stream: they return once NCCL has enqueued the work (the
// host waits only for a non-blocking enqueue that NCCL reports as in progress, bounded by the
// timeout). Barrier, Split, creation and destruction block the host; every such wait polls the
// stream and ncclCommGetAsyncError against the timeout and aborts the communicator on expiry
// (kTimeout). Any NCCL error or timeout aborts and poisons the communicator.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "impl/comm/communicator.h"

namespace shardrec::cuda_plugin {

class NcclCommunicator final : public comm::Communicator {
 public:
  using Clock = std::chrono::steady_clock;

  // Collective: initialises rank `rank` of `world` on CUDA device `device` (non-blocking init,
  // aborted with kTimeout after `timeout`).
  static Status Create(const ncclUniqueId& id, int world, int rank, int device,
                       std::chrono::milliseconds timeout, std::unique_ptr<NcclCommunicator>* out);

  ~NcclCommunicator() override;

  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  Device device() const override { return Device::Cuda(device_); }
  const char* backend() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override {
    return std::chrono::milliseconds(timeout_ms_.load());
  }
  void set_timeout(std::chrono::milliseconds timeout) override;

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
  void Abort() override;
  Status AsyncError() const override;

 private:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device,
                   std::chrono::milliseconds timeout, void* scratch);

  // Deadline of a call: its own timeout, or the communicator's when that is zero.
  Clock::time_point Deadline(const comm::CallOptions& opts) const;

  // Runs `enqueue(comm)` (one NCCL call or a group) with the device set, then waits for a
  // non-blocking enqueue to leave ncclInProgress. Defined in nccl_collectives.cc.
  template <typename Fn>
  Status Enqueue(const char* what, Clock::time_point deadline, Fn&& enqueue);

  // Polls ncclCommGetAsyncError until the communicator is no longer in progress.
  Status WaitReady(const std::string& what, Clock::time_point deadline);
  // Polls the stream and the async error until the stream drains.
  Status WaitStream(void* stream, const std::string& what, Clock::time_point deadline);

  // Callers hold mu_. Checks the poison; records an error, aborting NCCL; the timeout variant
  // builds the kTimeout status.
  Status CheckUsableLocked() const;
  Status FailLocked(Status error);
  Status TimeoutLocked(const std::string& what);

  mutable std::mutex mu_;  // guards comm_ and poison_ against a concurrent Abort()
  ncclComm_t comm_;        // null once aborted or destroyed
  mutable Status poison_;  // the error that broke the communicator, OK while healthy
  const int rank_;
  const int size_;
  const int device_;
  std::atomic<int64_t> timeout_ms_;
  void* scratch_;  // one int32 on the device: Barrier's all-reduce operand
};

// Polls a freshly created (or split) communicator until its non-blocking init finishes; on an
// error or at `deadline` it aborts the communicator. Shared by Create and Split.
Status WaitNcclInit(ncclComm_t comm, const std::string& what,
                    NcclCommunicator::Clock::time_point deadline,
                    std::chrono::milliseconds timeout);

// Sleeps a little longer each call (to 1 ms): quick collectives return fast, long waits do not
// burn a core.
class Backoff {
 public:
  void Sleep();

 private:
  int64_t micros_ = 10;
};

}  // namespace shardrec::cuda_plugin
