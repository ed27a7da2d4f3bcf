// The device route's backend on a CUDA device through the plugin (device_route.h): workspaces in
// grow-only device buffers, copies and waits through core::CudaRuntime on the device's default
// stream (where the GPU collection v1 queues all its work), the steps through the emb_route
// entry (kernels/device_dispatch.h). A plugin without the route entries makes Count and Fill
// kUnsupported. Not thread-safe: one route at a time.
#pragma once

#include <cstddef>

#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/embedding/device_buffer.h"
#include "impl/embedding/device_route.h"

namespace shardrec::embedding {

class DeviceRouteBackend : public RouteBackend {
 public:
  explicit DeviceRouteBackend(int device);

  Status Workspace(int which, size_t bytes, void** base) override;
  Status ToDevice(void* dst, const void* src, size_t bytes) override;
  Status ToHost(void* dst, const void* src, size_t bytes) override;
  Status Wait() override;
  Status Count(const kernels::simt_body::RouteParams& params) override;
  Status Fill(const kernels::simt_body::RouteParams& params) override;

 private:
  // The scans' scratch for `params`' longest scan.
  Status Temp(const kernels::simt_body::RouteParams& params, size_t* bytes);

  int device_;
  ExecContext ctx_;
  DeviceBuffer ws_[2];
  DeviceBuffer temp_;
};

}  // namespace shardrec::embedding
