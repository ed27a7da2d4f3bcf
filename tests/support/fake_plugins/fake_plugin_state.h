// The fake embedding plugin's shared state (fake_embedding_plugin.cc): its call counters, the
// failure injection, the stream queues that defer copies as a GPU does, and its device memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "impl/core/status.h"
#include "tests/support/fake_plugins/fake_device_memory.h"

namespace shardrec::fake {

// Calls of the kernel entries (index: kCallLookup ..), so a test can tell that a collection ran
// its kernels through the plugin (the fake's device memory is host memory, so host kernels handed
// device pointers would give the same bits unnoticed).
enum : int32_t {
  kCallLookup = 0,
  kCallGroupRows,
  kCallAggregate,
  kCallFused,
  kCallPartial,
  kCallApply,
  kCallRoute,
  kCallMean,
  kCallUnpack,
  kCallFinite,
  kCallPack,
  kCallDpStep,
  kCallRowPhaseCounted,
  kCallGroupRowsGated,
  kCallSumSources,
  kNumCalls
};
inline std::atomic<int64_t> g_calls[kNumCalls];
// Failure injection (shardrec_fake_fail_copy_after): copies still allowed before one fails; -1
// means none fails.
inline std::atomic<int64_t> g_copies_before_failure{-1};

// True when this copy is the one chosen to fail (then disarms).
inline bool CopyFails() {
  int64_t left = g_copies_before_failure.load();
  while (left >= 0) {
    if (g_copies_before_failure.compare_exchange_weak(left, left - 1)) return left == 0;
  }
  return false;
}

// Failure injection (shardrec_fake_fail_wait_after): host waits (stream_wait, emb_read_status)
// still allowed before one fails; -1 means none fails.
inline std::atomic<int64_t> g_waits_before_failure{-1};

// True when this wait is the one chosen to fail (then disarms).
inline bool WaitFails() {
  int64_t left = g_waits_before_failure.load();
  while (left >= 0) {
    if (g_waits_before_failure.compare_exchange_weak(left, left - 1)) return left == 0;
  }
  return false;
}

// Calls of the runtime services (shardrec_fake_runtime_calls): host synchronisations (stream
// waits and emb_read_status, which waits for the stream before it reads the status block),
// host <-> device copies by direction, and allocations of device and of pinned host memory.
enum : int32_t {
  kRtSync = 0,
  kRtCopyToDevice,
  kRtCopyToHost,
  kRtDeviceAlloc,
  kRtHostAlloc,
  kNumRtCalls
};
inline std::atomic<int64_t> g_rt[kNumRtCalls];

// With SHARDREC_FAKE_DEFER_COPIES set, copies and memsets behave as a GPU's do: they are queued
// on their stream and run only when the stream gets there, i.e. before the next kernel entry on
// that stream (kernels run at once, behind the copies queued before them), at a wait for that
// stream (stream_wait, emb_read_status), or when memory is freed (cudaFree / cudaFreeHost
// synchronise the device). Streams of stream_create are non-blocking (cudaStreamNonBlocking, as
// the real plugin makes them): no implicit order with the NULL stream either way, so only an
// explicit stream_wait_stream orders two streams; a wait for a stream drains only that stream. So a
// caller that reads a download before its wait reads stale bytes, one that refills a staging block
// while its upload is still queued uploads the new bytes, and one that waits on another stream than
// its work's leaves that work undone: all show up as wrong results. The queues are shared by every
// thread, as the device's streams are.
class CopyQueue {
 public:
  bool deferred() const { return deferred_; }
  void Push(void* stream, std::function<void()> op) {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[stream].push_back(std::move(op));
  }
  void BeforeKernel(void* stream) { Drain(stream); }
  void Wait(void* stream) { Drain(stream); }
  void DrainAll() {
    std::vector<void*> streams;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& q : queues_) streams.push_back(q.first);
    }
    for (void* s : streams) Drain(s);
  }

 private:
  void Drain(void* stream) {
    // One drain at a time: a thread that finds a queue empty because another thread took its
    // operations must not go on before they ran (ranks as threads share the legacy stream, and
    // DrainAll empties every stream).
    std::lock_guard<std::mutex> running(run_mu_);
    std::vector<std::function<void()>> ops;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = queues_.find(stream);
      if (it == queues_.end()) return;
      ops.swap(it->second);
    }
    for (auto& op : ops) op();
  }

  const bool deferred_ = std::getenv("SHARDREC_FAKE_DEFER_COPIES") != nullptr;
  std::mutex mu_;
  std::mutex run_mu_;  // held while a drain runs its operations
  std::map<void*, std::vector<std::function<void()>>> queues_;
};

// Streams of stream_create: distinct addresses, never dereferenced.
inline std::atomic<int64_t> g_streams_live{0};

inline CopyQueue& Queue() {
  static CopyQueue* q = new CopyQueue;  // outlives every caller's static destructors
  return *q;
}

// The fake device's largest block (device or pinned): more is out of memory, as on a GPU.
constexpr size_t kMaxBlock = size_t{1} << 32;

inline DeviceMemory& Mem() {
  static DeviceMemory* m = new DeviceMemory;  // outlives every caller's static destructors
  return *m;
}

inline Status CheckDevice(int32_t device) {
  if (device != 0) return Status::InvalidArgument("fake device: no device ", device);
  return Status::Ok();
}

}  // namespace shardrec::fake
