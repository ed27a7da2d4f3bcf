// The communicator's watchdog: one thread that follows every enqueued collective to its
// completion on the device. NCCL itself bounds nothing once a kernel waits for a peer that
// died or stopped; without this, a survivor's stream never drains and its host blocks forever.
#include "impl/cuda_plugin/cuda_util.h"
#include "impl/cuda_plugin/nccl_communicator.h"
#include "impl/cuda_plugin/nccl_util.h"

namespace shardrec::cuda_plugin {

Status NcclCommunicator::TrackLocked(cudaStream_t stream, const char* what,
                                     Clock::time_point deadline) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    // Retire what already completed here too: a caller issuing collectives faster than the
    // watchdog wakes up would otherwise create an event per collective.
    while (!pending_.empty() && api_.EventQuery(pending_.front().event) == cudaSuccess) {
      spare_events_.push_back(pending_.front().event);
      pending_.pop_front();
    }
    if (!spare_events_.empty()) {
      event = spare_events_.back();
      spare_events_.pop_back();
    }
  }
  if (event == nullptr) {
    const cudaError_t e = api_.EventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      return FailLocked(CudaStatus(api_, e, StrCat("cudaEventCreate for the ", what, " watchdog")));
    }
  }
  const cudaError_t e = api_.EventRecord(event, stream);
  if (e != cudaSuccess) {
    (void)api_.EventDestroy(event);
    return FailLocked(CudaStatus(api_, e, StrCat("cudaEventRecord after ", what)));
  }
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    pending_.push_back({event, deadline, what, next_seq_++});
  }
  watch_cv_.notify_one();
  return Status::Ok();
}

void NcclCommunicator::WatchLoop() {
  // Bind this thread to the communicator's device, whose context exists already; otherwise
  // the first event query would create a context on GPU 0.
  (void)api_.SetDevice(device_);
  Backoff backoff;
  std::unique_lock<std::mutex> lock(watch_mu_);
  while (!stop_) {
    if (pending_.empty()) {
      watch_cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      backoff = Backoff();
      continue;
    }
    const Pending front = pending_.front();
    lock.unlock();
    const cudaError_t q = api_.EventQuery(front.event);
    Status failure;
    bool done = false;
    if (q == cudaSuccess) {
      done = true;
    } else if (q != cudaErrorNotReady) {
      failure = CudaStatus(api_, q, StrCat("NCCL ", front.what, " failed on the device"));
    } else {
      std::lock_guard<std::mutex> state(mu_);
      bool still_watched;
      {
        std::lock_guard<std::mutex> watch(watch_mu_);
        still_watched = !pending_.empty() && pending_.front().seq == front.seq;
      }
      if (!still_watched) {
        // A caller retired it meanwhile (and may have re-recorded its event for a newer
        // collective, which this query saw): its deadline no longer applies.
      } else if (comm_ != nullptr && poison_.ok()) {
        ncclResult_t async = ncclSuccess;
        const ncclResult_t r = api_.NcclCommGetAsyncError(comm_, &async);
        if (r != ncclSuccess) async = r;
        if (async != ncclSuccess && async != ncclInProgress) {
          failure = FailLocked(NcclStatus(api_, async, StrCat("NCCL ", front.what), comm_));
        } else if (Clock::now() >= front.deadline) {
          failure = TimeoutLocked(front.what);
        }
      } else {
        // Already aborted (by a caller, or an error seen elsewhere): nothing left to watch.
        failure = poison_.ok() ? Status::Remote("aborted") : poison_;
      }
    }
    lock.lock();
    if (done) {
      if (!pending_.empty() && pending_.front().seq == front.seq) {
        pending_.pop_front();
        spare_events_.push_back(front.event);
      }
      backoff = Backoff();
      continue;
    }
    if (!failure.ok()) {
      // After an abort NCCL's kernels exit; the events will complete, but nobody needs them.
      for (const Pending& p : pending_) spare_events_.push_back(p.event);
      pending_.clear();
      continue;
    }
    lock.unlock();
    backoff.Sleep();
    lock.lock();
  }
}

void NcclCommunicator::StopWatchdog() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stop_ = true;
  }
  watch_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  std::lock_guard<std::mutex> lock(watch_mu_);
  for (const Pending& p : pending_) spare_events_.push_back(p.event);
  pending_.clear();
  for (cudaEvent_t e : spare_events_) (void)api_.EventDestroy(e);
  spare_events_.clear();
}

size_t NcclCommunicator::PendingForTest() const {
  std::lock_guard<std::mutex> lock(watch_mu_);
  return pending_.size();
}

}  // namespace shardrec::cuda_plugin
