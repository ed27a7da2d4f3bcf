// comm::Communicator over NCCL, living inside the plugin (the plain-C table hands it out as an
// opaque handle).
//
// Blocking behaviour. Collectives (AllReduce, AllToAllV, AllGatherV, ReduceScatterV, Broadcast)
// are asynchronous on CallOptions::stream: they return once NCCL has enqueued the work (the
// host waits only for a non-blocking enqueue that NCCL reports as in progress, bounded by the
// timeout). Barrier, Split, creation and destruction block the host; every such wait polls the
// stream and ncclCommGetAsyncError against the timeout and aborts the communicator on expiry
// (kTimeout).
//
// Completion is watched: after each collective an event is recorded on its stream, and a
// watchdog thread per communicator polls the oldest event together with ncclCommGetAsyncError.
// A collective that has not completed within its timeout (a dead or stalled peer) or an
// asynchronous NCCL error aborts the communicator, so the kernels it left on the caller's
// stream exit and whoever waits on that stream is released; the next call returns the error.
// Any NCCL error or timeout poisons the communicator for good.
//
// Ordering: NCCL requires every rank to issue the operations of one communicator in the same
// order; libshardrec issues the sharding group's and the replica group's collectives in a fixed
// program order on every rank.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/cuda_plugin/device_api.h"

namespace shardrec::cuda_plugin {

class NcclCommunicator final : public comm::Communicator {
 public:
  using Clock = std::chrono::steady_clock;

  // Collective: initialises rank `rank` of `world` on CUDA device `device` (non-blocking init,
  // aborted with kTimeout after `timeout`). `api` outlives the communicator.
  static Status Create(const DeviceApi& api, const ncclUniqueId& id, int world, int rank,
                       int device, std::chrono::milliseconds timeout,
                       std::unique_ptr<NcclCommunicator>* out);

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

  // Number of collectives whose completion the watchdog still waits for (tests).
  size_t PendingForTest() const;

 private:
  NcclCommunicator(const DeviceApi& api, ncclComm_t comm, int rank, int size, int device,
                   std::chrono::milliseconds timeout, void* scratch);

  // Deadline of a call: its own timeout, or the communicator's when that is zero.
  Clock::time_point Deadline(const comm::CallOptions& opts) const;

  // Runs `enqueue(comm)` (one NCCL call or a group) with the device set, hands its completion
  // to the watchdog, then waits for a non-blocking enqueue to leave ncclInProgress. Defined in
  // nccl_collectives.cc.
  template <typename Fn>
  Status Enqueue(const char* what, Stream stream, Clock::time_point deadline, Fn&& enqueue);

  // Polls ncclCommGetAsyncError until the communicator is no longer in progress.
  Status WaitReady(const std::string& what, Clock::time_point deadline);
  // Polls the stream and the async error until the stream drains.
  Status WaitStream(void* stream, const std::string& what, Clock::time_point deadline);

  // Callers hold mu_. Checks the poison; records an error, aborting NCCL; the timeout variant
  // builds the kTimeout status.
  Status CheckUsableLocked() const;
  Status FailLocked(Status error);
  Status TimeoutLocked(const std::string& what);
  // The status of a wait whose communicator was aborted under it: the poisoning error itself
  // (e.g. the watchdog's kTimeout), else kRemote.
  Status AbortedDuringLocked(const std::string& what) const;

  // The watchdog (nccl_watchdog.cc). Track is called with mu_ held and the device current.
  Status TrackLocked(cudaStream_t stream, const char* what, Clock::time_point deadline);
  void WatchLoop();
  void StopWatchdog();

  const DeviceApi& api_;
  mutable std::mutex mu_;  // guards comm_ and poison_ against a concurrent Abort()
  ncclComm_t comm_;        // null once aborted or destroyed
  mutable Status poison_;  // the error that broke the communicator, OK while healthy
  const int rank_;
  const int size_;
  const int device_;
  std::atomic<int64_t> timeout_ms_;
  void* scratch_;  // one int32 on the device: Barrier's all-reduce operand

  struct Pending {
    cudaEvent_t event;
    Clock::time_point deadline;
    const char* what;
    // Identifies the entry: a caller retires completed entries too and reuses their events, so
    // the watchdog, which queries the front without holding watch_mu_, checks it is still there.
    uint64_t seq;
  };
  mutable std::mutex watch_mu_;  // after mu_ when both are held
  uint64_t next_seq_ = 0;        // guarded by watch_mu_
  std::condition_variable watch_cv_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> spare_events_;
  bool stop_ = false;
  std::thread watchdog_;
};

// Polls a freshly created (or split) communicator until its non-blocking init finishes; on an
// error or at `deadline` it aborts the communicator. Shared by Create and Split.
Status WaitNcclInit(const DeviceApi& api, ncclComm_t comm, const std::string& what,
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
