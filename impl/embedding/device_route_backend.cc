#include "impl/embedding/device_route_backend.h"

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/kernels/device_dispatch.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

DeviceRouteBackend::DeviceRouteBackend(int device)
    : device_(device), ctx_(ExecContext::Cuda(device, nullptr)) {}

Status DeviceRouteBackend::Workspace(int which, size_t bytes, void** base) {
  if (which < 0 || which > 1) return Status::Internal("route workspace ", which);
  DeviceBuffer& b = ws_[which];
  SR_RETURN_IF_ERROR(b.Reserve(device_, bytes < 16 ? 16 : bytes, "the route's workspace"));
  *base = b.data();
  return Status::Ok();
}

Status DeviceRouteBackend::ToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->MemcpyAsync(device_, dst, src, bytes, core::CopyKind::kHostToDevice, nullptr);
}

Status DeviceRouteBackend::ToHost(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->MemcpyAsync(device_, dst, src, bytes, core::CopyKind::kDeviceToHost, nullptr);
}

Status DeviceRouteBackend::Wait() {
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->StreamWait(device_, nullptr, kDeviceWaitMs);
}

Status DeviceRouteBackend::Temp(const kernels::simt_body::RouteParams& p, size_t* bytes) {
  const int64_t cells = static_cast<int64_t>(p.num_slots) * p.batch_size;
  const int64_t n = (p.num_lengths > cells ? p.num_lengths : cells) + 1;
  SR_RETURN_IF_ERROR(dk::RouteTempBytes(ctx_, n, bytes));
  return temp_.Reserve(device_, *bytes < 16 ? 16 : *bytes, "the route's scan scratch");
}

Status DeviceRouteBackend::Count(const kernels::simt_body::RouteParams& p) {
  size_t bytes = 0;
  SR_RETURN_IF_ERROR(Temp(p, &bytes));
  return dk::RouteCount(ctx_, p, temp_.data(), bytes);
}

Status DeviceRouteBackend::Fill(const kernels::simt_body::RouteParams& p) {
  size_t bytes = 0;
  SR_RETURN_IF_ERROR(Temp(p, &bytes));
  return dk::RouteFill(ctx_, p, temp_.data(), bytes);
}

}  // namespace shardrec::embedding
