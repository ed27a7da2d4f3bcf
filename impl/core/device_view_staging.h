// Device tensor views on a host collection. The collection computes in host memory, so an output
// view in CUDA memory is written to a pinned staging block and copied to the device on the
// caller's stream, and a gradient view in CUDA memory is copied into the block first. Each copy is
// waited for (bounded) before the call returns: the block is reused by the next call, and the
// caller may free or overwrite its device buffer as soon as the call returns.
#pragma once

#include <chrono>
#include <cstddef>

#include "impl/core/device.h"
#include "impl/core/pinned_buffer.h"
#include "impl/core/status.h"

namespace shardrec::core {

class DeviceViewStaging {
 public:
  // Where the collection should write `count` floats meant for `view` on `device`: the view
  // itself for host memory, else the staging block. Local (no collective); errors: kNoDevice
  // (no plugin or no such GPU), allocation failures.
  Status OutputTarget(const Device& device, float* view, size_t count, float** target);
  // After the collection wrote to the staging block: copies it to `view` on `stream` and waits
  // at most `timeout` for the copy. A no-op for host views.
  Status FinishOutput(const Device& device, float* view, size_t count, Stream stream,
                      std::chrono::milliseconds timeout);
  // Host memory holding the gradient `view`: the view itself for host memory, else the staging
  // block, filled by a copy on `stream` (ordered after the caller's earlier work there) that is
  // waited for at most `timeout`.
  Status GradientSource(const Device& device, const float* view, size_t count, Stream stream,
                        std::chrono::milliseconds timeout, const float** source);

 private:
  PinnedBuffer pinned_;
};

}  // namespace shardrec::core
