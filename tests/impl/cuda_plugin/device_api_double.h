// A test double of the CUDA runtime and NCCL as the plugin sees them (DeviceApi): fake
// communicators, events and streams whose progress the test controls, a per-thread current
// device and context, and call counters. Lets CPU tests drive the plugin's control flow (init
// timeouts, the watchdog, aborts, poisoning, device choice) exactly as a GPU run would.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "impl/cuda_plugin/device_api.h"

namespace shardrec::testing {

struct FakeDevices {
  // Knobs, set by the test before the code under test runs.
  std::atomic<bool> init_completes{true};        // false: a rank that never shows up
  std::atomic<int> init_error{ncclSuccess};      // != success: init fails asynchronously
  std::atomic<bool> work_completes{true};        // false: a dead or stalled peer
  std::atomic<int> async_error{ncclSuccess};     // injected asynchronous NCCL error
  std::atomic<bool> enqueue_in_progress{false};  // collectives return ncclInProgress once

  // Counters, read by the test.
  std::atomic<int> aborts{0};
  std::atomic<int> finalizes{0};
  std::atomic<int> destroys{0};
  std::atomic<int> events_created{0};
  std::atomic<int> all_to_all{0};
  std::atomic<int> sends{0};
  std::atomic<int> all_reduces{0};
  std::atomic<int> stream_flags{-1};  // the flags of the last cudaStreamCreateWithFlags

  // Every cudaSetDevice, per calling thread (by a test-assigned name).
  std::mutex mu;
  std::map<std::string, std::vector<int>> set_device_calls;

  void Reset();
};

// The one fake world of this test binary.
FakeDevices& Fake();

// Names the calling thread in set_device_calls; with has_context the thread starts with a
// current context on `device` (as if it had used CUDA before), else with none.
void FakeThread(const std::string& name, bool has_context, int device = 0);

const shardrec::cuda_plugin::DeviceApi& FakeDeviceApi();

}  // namespace shardrec::testing
