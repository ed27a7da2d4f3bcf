#include "impl/embedding/gpu/route_backend.h"

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

DeviceRouteBackend::DeviceRouteBackend(int device, Stream stream)
    : device_(device), stream_(stream), ctx_(ExecContext::Cuda(device, stream)) {}

Status DeviceRouteBackend::Workspace(int which, size_t bytes, void** base) {
  if (which < 0 || which > 1) return Status::Internal("route workspace ", which);
  core::DeviceBuffer& b = ws_[which];
  SR_RETURN_IF_ERROR(b.Reserve(device_, bytes < 16 ? 16 : bytes, "the route's workspace", stream_));
  *base = b.data();
  return Status::Ok();
}

Status DeviceRouteBackend::ToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->MemcpyAsync(device_, dst, src, bytes, core::CopyKind::kHostToDevice, stream_);
}

Status DeviceRouteBackend::ToHost(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->MemcpyAsync(device_, dst, src, bytes, core::CopyKind::kDeviceToHost, stream_);
}

Status DeviceRouteBackend::Wait() {
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->StreamWait(device_, stream_, core::kDeviceWaitMs);
}

Status DeviceRouteBackend::Temp(const kernels::simt_body::RouteParams& p, size_t* bytes) {
  const int64_t cells = static_cast<int64_t>(p.num_slots) * p.batch_size;
  const int64_t n = (p.num_lengths > cells ? p.num_lengths : cells) + 1;
  SR_RETURN_IF_ERROR(dk::RouteTempBytes(ctx_, n, bytes));
  return temp_.Reserve(device_, *bytes < 16 ? 16 : *bytes, "the route's scan scratch", stream_);
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

Status DeviceRouteBackend::Tables(const RouteTables& t, const int32_t** i32, const int64_t** i64) {
  if (!kept_ || kept_i32_ != t.i32 || kept_i64_ != t.i64) {
    // Dropped first: a failed upload leaves nothing that looks uploaded. A route that failed
    // after queuing the last upload returned without its wait: that copy may still read the
    // host copy about to be replaced.
    kept_ = false;
    if (!kept_i32_.empty() || !kept_i64_.empty()) SR_RETURN_IF_ERROR(Wait());
    tables_i64_at_ = (4 * t.i32.size() + 15) & ~size_t{15};
    const size_t bytes = tables_i64_at_ + 8 * t.i64.size();
    // Growing waits for the stream, where the last route's steps that read them run.
    SR_RETURN_IF_ERROR(
        tables_.Reserve(device_, bytes < 16 ? 16 : bytes, "the route's plan tables", stream_));
    kept_i32_ = t.i32;
    kept_i64_ = t.i64;
    auto* base = static_cast<uint8_t*>(tables_.data());
    SR_RETURN_IF_ERROR(ToDevice(base, kept_i32_.data(), 4 * kept_i32_.size()));
    SR_RETURN_IF_ERROR(ToDevice(base + tables_i64_at_, kept_i64_.data(), 8 * kept_i64_.size()));
    kept_ = true;
  }
  auto* base = static_cast<uint8_t*>(tables_.data());
  *i32 = reinterpret_cast<const int32_t*>(base);
  *i64 = reinterpret_cast<const int64_t*>(base + tables_i64_at_);
  return Status::Ok();
}

}  // namespace shardrec::embedding
