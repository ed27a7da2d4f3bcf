// The device route's backend on a CUDA device through the plugin (route.h): workspaces in
// grow-only device buffers, copies and waits through core::CudaRuntime on one stream (the GPU
// collection's step stream), the steps through the emb_route
// entry (gpu/dispatch.h). A plugin without the route entries makes Count and Fill
// kUnsupported. The plan's route tables are uploaded once and kept in device memory: a batch
// routed with the tables of the last one copies none of them. Not thread-safe: one route at a
// time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/core/device_buffer.h"
#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/embedding/gpu/route.h"

namespace shardrec::embedding {

class DeviceRouteBackend : public RouteBackend {
 public:
  // Copies, steps and waits on `stream` (the legacy default stream when null).
  explicit DeviceRouteBackend(int device, Stream stream = nullptr);

  Status Workspace(int which, size_t bytes, void** base) override;
  Status ToDevice(void* dst, const void* src, size_t bytes) override;
  Status ToHost(void* dst, const void* src, size_t bytes) override;
  Status Wait() override;
  Status Count(const kernels::simt_body::RouteParams& params) override;
  Status Fill(const kernels::simt_body::RouteParams& params) override;
  Status Tables(const RouteTables& tables, const int32_t** i32, const int64_t** i64) override;

 private:
  // The scans' scratch for `params`' longest scan.
  Status Temp(const kernels::simt_body::RouteParams& params, size_t* bytes);

  int device_;
  Stream stream_;
  ExecContext ctx_;
  core::DeviceBuffer ws_[2];
  core::DeviceBuffer temp_;
  // The tables on the device (int32 part, then the int64 part at tables_i64_at_) and the host
  // copy they were uploaded from: the copy is the source of the queued upload, and tells whether
  // the next batch's tables are the same. Empty (nothing kept) until an upload was queued.
  core::DeviceBuffer tables_;
  size_t tables_i64_at_ = 0;
  std::vector<int32_t> kept_i32_;
  std::vector<int64_t> kept_i64_;
  bool kept_ = false;
};

}  // namespace shardrec::embedding
