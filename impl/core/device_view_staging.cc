#include "impl/core/device_view_staging.h"

#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"

namespace shardrec::core {

namespace {

// The runtime, once `device` is known to be a usable GPU.
Status Runtime(const Device& device, const CudaRuntime** out) {
  SR_RETURN_IF_ERROR(CheckDevice(device));
  return GetCudaRuntime(out);
}

}  // namespace

Status DeviceViewStaging::OutputTarget(const Device& device, float* view, size_t count,
                                       float** target) {
  if (device.is_host()) {
    *target = view;
    return Status::Ok();
  }
  const CudaRuntime* cuda = nullptr;
  SR_RETURN_IF_ERROR(Runtime(device, &cuda));
  SR_RETURN_IF_ERROR(pinned_.Reserve(count * sizeof(float)));
  *target = static_cast<float*>(pinned_.data());
  return Status::Ok();
}

Status DeviceViewStaging::FinishOutput(const Device& device, float* view, size_t count,
                                       Stream stream, std::chrono::milliseconds timeout) {
  if (device.is_host() || count == 0) return Status::Ok();
  const CudaRuntime* cuda = nullptr;
  SR_RETURN_IF_ERROR(Runtime(device, &cuda));
  SR_RETURN_IF_ERROR(cuda->MemcpyAsync(device.index, view, pinned_.data(), count * sizeof(float),
                                       CopyKind::kHostToDevice, stream));
  return cuda->StreamWait(device.index, stream, timeout.count());
}

Status DeviceViewStaging::GradientSource(const Device& device, const float* view, size_t count,
                                         Stream stream, std::chrono::milliseconds timeout,
                                         const float** source) {
  if (device.is_host()) {
    *source = view;
    return Status::Ok();
  }
  const CudaRuntime* cuda = nullptr;
  SR_RETURN_IF_ERROR(Runtime(device, &cuda));
  SR_RETURN_IF_ERROR(pinned_.Reserve(count * sizeof(float)));
  if (count > 0) {
    SR_RETURN_IF_ERROR(cuda->MemcpyAsync(device.index, pinned_.data(), view, count * sizeof(float),
                                         CopyKind::kDeviceToHost, stream));
    SR_RETURN_IF_ERROR(cuda->StreamWait(device.index, stream, timeout.count()));
  }
  *source = static_cast<const float*>(pinned_.data());
  return Status::Ok();
}

}  // namespace shardrec::core
