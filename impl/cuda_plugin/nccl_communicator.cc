// NCCL communicator lifecycle: non-blocking creation, split, bounded waits, abort, poisoning and
// a destruction that cannot hang on a dead peer.
#include "impl/cuda_plugin/nccl_communicator.h"

#include <thread>
#include <utility>

#include "impl/core/check.h"  // SR_RETURN_IF_ERROR
#include "impl/cuda_plugin/cuda_util.h"
#include "impl/cuda_plugin/nccl_util.h"

namespace shardrec::cuda_plugin {
namespace {

int64_t ToMillis(std::chrono::milliseconds t) { return t.count(); }

// Allocates and zeroes Barrier's operand, so that summing it never overflows.
Status AllocScratch(const DeviceApi& api, int device, void** out) {
  *out = nullptr;
  DeviceGuard guard(api);
  SR_RETURN_IF_ERROR(guard.Set(device));
  SR_RETURN_IF_ERROR(
      CudaStatus(api, api.Malloc(out, sizeof(int32_t)), "cudaMalloc(barrier scratch)"));
  Status s = CudaStatus(api, api.Memset(*out, 0, sizeof(int32_t)), "cudaMemset(barrier scratch)");
  if (!s.ok()) {
    (void)api.Free(*out);
    *out = nullptr;
  }
  return s;
}

}  // namespace

void Backoff::Sleep() {
  std::this_thread::sleep_for(std::chrono::microseconds(micros_));
  if (micros_ < 1000) micros_ *= 2;
}

Status WaitNcclInit(const DeviceApi& api, ncclComm_t comm, const std::string& what,
                    NcclCommunicator::Clock::time_point deadline,
                    std::chrono::milliseconds timeout) {
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = api.NcclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return Status::Ok();
    if (state != ncclInProgress) {
      Status s = NcclStatus(api, state, what, comm);
      (void)api.NcclCommAbort(comm);
      return s;
    }
    if (NcclCommunicator::Clock::now() >= deadline) {
      (void)api.NcclCommAbort(comm);
      return Status::Timeout(what, " did not complete within ", ToMillis(timeout),
                             " ms (is every rank running and reachable?); aborted");
    }
    backoff.Sleep();
  }
}

Status NcclCommunicator::Create(const DeviceApi& api, const ncclUniqueId& id, int world, int rank,
                                int device, std::chrono::milliseconds timeout,
                                std::unique_ptr<NcclCommunicator>* out) {
  out->reset();
  const Clock::time_point deadline = Clock::now() + timeout;
  DeviceGuard guard(api);
  SR_RETURN_IF_ERROR(guard.Set(device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so a missing rank becomes a timeout instead of a hang
  ncclComm_t comm = nullptr;
  const std::string what = StrCat("NCCL init of rank ", rank, " of ", world, " on cuda:", device);
  ncclResult_t r = api.NcclCommInitRankConfig(&comm, world, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    Status s = NcclStatus(api, r, what, comm);
    if (comm != nullptr) (void)api.NcclCommAbort(comm);
    return s;
  }
  SR_RETURN_IF_ERROR(WaitNcclInit(api, comm, what, deadline, timeout));
  void* scratch = nullptr;
  Status s = AllocScratch(api, device, &scratch);
  if (!s.ok()) {
    (void)api.NcclCommAbort(comm);
    return s;
  }
  out->reset(new NcclCommunicator(api, comm, rank, world, device, timeout, scratch));
  return Status::Ok();
}

NcclCommunicator::NcclCommunicator(const DeviceApi& api, ncclComm_t comm, int rank, int size,
                                   int device, std::chrono::milliseconds timeout, void* scratch)
    : api_(api),
      comm_(comm),
      rank_(rank),
      size_(size),
      device_(device),
      timeout_ms_(ToMillis(timeout)),
      scratch_(scratch) {
  watchdog_ = std::thread([this] { WatchLoop(); });
}

NcclCommunicator::~NcclCommunicator() {
  StopWatchdog();
  std::lock_guard<std::mutex> lock(mu_);
  DeviceGuard guard(api_);
  (void)guard.Set(device_);
  if (comm_ != nullptr) {
    bool clean = poison_.ok();
    if (clean) {
      // Finalize flushes outstanding work; bounding it keeps a dead peer from hanging us.
      const Clock::time_point deadline = Clock::now() + timeout();
      ncclResult_t r = api_.NcclCommFinalize(comm_);
      Backoff backoff;
      while (r == ncclInProgress || r == ncclSuccess) {
        ncclResult_t state = ncclSuccess;
        if (api_.NcclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
        if (state != ncclInProgress) {
          r = state;
          break;
        }
        if (Clock::now() >= deadline) break;
        backoff.Sleep();
      }
      clean = r == ncclSuccess;
    }
    if (clean) {
      (void)api_.NcclCommDestroy(comm_);
    } else {
      (void)api_.NcclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (scratch_ != nullptr) (void)api_.Free(scratch_);
}

void NcclCommunicator::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) timeout_ms_.store(ToMillis(timeout));
}

NcclCommunicator::Clock::time_point NcclCommunicator::Deadline(
    const comm::CallOptions& opts) const {
  const std::chrono::milliseconds t = opts.timeout.count() > 0 ? opts.timeout : timeout();
  return Clock::now() + t;
}

Status NcclCommunicator::CheckUsableLocked() const {
  if (!poison_.ok()) {
    return Status::InvalidUsage("NCCL communicator (rank ", rank_, " of ", size_,
                                ") is unusable after an earlier error: ", poison_.ToString());
  }
  // Every path that clears comm_ also sets poison_; stay defensive rather than throw across
  // the plugin boundary.
  if (comm_ == nullptr) return Status::Internal("NCCL communicator has no NCCL handle");
  return Status::Ok();
}

Status NcclCommunicator::FailLocked(Status error) {
  if (poison_.ok()) poison_ = error;
  if (comm_ != nullptr) {
    // After an error nothing is known about enqueued work; abort releases peers and kernels.
    (void)api_.NcclCommAbort(comm_);
    comm_ = nullptr;
  }
  return error;
}

Status NcclCommunicator::AbortedDuringLocked(const std::string& what) const {
  if (!poison_.ok() && poison_.code() != Code::kRemote) return poison_;
  return Status::Remote("NCCL communicator was aborted during ", what,
                        poison_.ok() ? std::string() : ": " + poison_.message());
}

Status NcclCommunicator::TimeoutLocked(const std::string& what) {
  return FailLocked(Status::Timeout("NCCL ", what, " on rank ", rank_, " of ", size_,
                                    " did not complete within ", timeout_ms_.load(),
                                    " ms (a missing or stalled peer?); the communicator was "
                                    "aborted"));
}

Status NcclCommunicator::WaitReady(const std::string& what, Clock::time_point deadline) {
  Backoff backoff;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Aborted meanwhile (by the watchdog, or by another thread): report why.
      if (comm_ == nullptr) return AbortedDuringLocked(what);
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = api_.NcclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) return Status::Ok();
      if (state != ncclInProgress) return FailLocked(NcclStatus(api_, state, what, comm_));
      if (Clock::now() >= deadline) return TimeoutLocked(what);
    }
    backoff.Sleep();
  }
}

Status NcclCommunicator::WaitStream(void* stream, const std::string& what,
                                    Clock::time_point deadline) {
  Backoff backoff;
  for (;;) {
    const cudaError_t q = api_.StreamQuery(static_cast<cudaStream_t>(stream));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (comm_ == nullptr) return AbortedDuringLocked(what);
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = api_.NcclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
      if (state != ncclSuccess && state != ncclInProgress) {
        return FailLocked(NcclStatus(api_, state, what, comm_));
      }
      if (q == cudaSuccess) return Status::Ok();
      if (q != cudaErrorNotReady) {
        return FailLocked(CudaStatus(api_, q, StrCat(what, ": stream error")));
      }
      if (Clock::now() >= deadline) return TimeoutLocked(what);
    }
    // Sleep without the lock so that Abort() from another thread gets through.
    backoff.Sleep();
  }
}

Status NcclCommunicator::Split(int color, int key, std::unique_ptr<comm::Communicator>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  out->reset();
  const Clock::time_point deadline = Deadline({});
  const std::string what = StrCat("split (color ", color, ", key ", key, ")");
  ncclComm_t child = nullptr;
  // Outlives the asynchronous part of the split, in case NCCL reads it late.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SR_RETURN_IF_ERROR(CheckUsableLocked());
    DeviceGuard guard(api_);
    SR_RETURN_IF_ERROR(guard.Set(device_));
    const ncclResult_t r =
        api_.NcclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (child != nullptr) (void)api_.NcclCommAbort(child);
      return FailLocked(NcclStatus(api_, r, what, comm_));
    }
  }
  // The parent reports in progress until its part of the split is done, then the child
  // finishes its own initialisation.
  Status s = WaitReady(what, deadline);
  if (!s.ok()) {
    if (child != nullptr) (void)api_.NcclCommAbort(child);
    return s;  // WaitReady has already poisoned this communicator
  }
  if (child != nullptr) {
    s = WaitNcclInit(api_, child, what, deadline, timeout());  // aborts the child on failure
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      return FailLocked(s);
    }
  }
  if (child == nullptr) return Status::Ok();  // color < 0: not a member of any group
  int child_rank = 0;
  int child_size = 0;
  ncclResult_t r = api_.NcclCommUserRank(child, &child_rank);
  if (r == ncclSuccess) r = api_.NcclCommCount(child, &child_size);
  if (r != ncclSuccess) {
    Status err = NcclStatus(api_, r, "query of the split communicator", child);
    (void)api_.NcclCommAbort(child);
    return err;
  }
  void* scratch = nullptr;
  s = AllocScratch(api_, device_, &scratch);
  if (!s.ok()) {
    (void)api_.NcclCommAbort(child);
    return s;
  }
  out->reset(
      new NcclCommunicator(api_, child, child_rank, child_size, device_, timeout(), scratch));
  return Status::Ok();
}

void NcclCommunicator::Abort() {
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_ != nullptr) {
    (void)api_.NcclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (poison_.ok()) poison_ = Status::Remote("the NCCL communicator was aborted");
}

Status NcclCommunicator::AsyncError() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!poison_.ok()) return poison_;
  if (comm_ == nullptr) return Status::Ok();
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = api_.NcclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) state = r;
  if (state == ncclSuccess || state == ncclInProgress) return Status::Ok();
  // Recorded (not aborted: this is a const query) so later calls fail fast and destruction
  // aborts instead of finalizing.
  poison_ = NcclStatus(api_, state, "background NCCL error", comm_);
  return poison_;
}

}  // namespace shardrec::cuda_plugin
