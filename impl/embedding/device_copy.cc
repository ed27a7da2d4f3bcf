// Waited host <-> device copies and the reusable host staging block (device_copy.h).
#include "impl/embedding/device_copy.h"

#include <new>

#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"
#include "impl/core/device_buffer.h"

namespace shardrec::embedding {

namespace {

Status Copy(const Device& device, void* dst, const void* src, size_t bytes, core::CopyKind kind) {
  if (bytes == 0) return Status::Ok();
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  const Stream stream = nullptr;
  SR_RETURN_IF_ERROR(rt->MemcpyAsync(device.index, dst, src, bytes, kind, stream));
  // The host side may be pageable and is the caller's: it must not be touched before the copy
  // has finished.
  return rt->StreamWait(device.index, stream, core::kDeviceWaitMs);
}

}  // namespace

Status CopyToHost(const Device& device, void* dst, const void* src, size_t bytes) {
  return Copy(device, dst, src, bytes, core::CopyKind::kDeviceToHost)
      .WithContext(StrCat("copying ", bytes, " bytes from ", device.ToString(), " to the host"));
}

Status CopyToDevice(const Device& device, void* dst, const void* src, size_t bytes) {
  return Copy(device, dst, src, bytes, core::CopyKind::kHostToDevice)
      .WithContext(StrCat("copying ", bytes, " bytes from the host to ", device.ToString()));
}

Status FillDevice(const Device& device, void* dst, int value, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  SR_RETURN_IF_ERROR(rt->MemsetAsync(device.index, dst, value, bytes, nullptr)
                         .WithContext(StrCat("clearing ", bytes, " bytes on ", device.ToString())));
  return rt->StreamWait(device.index, nullptr, core::kDeviceWaitMs);
}

Status HostStaging::Reserve(const Device& device, size_t bytes) {
  if (bytes <= this->bytes()) return Status::Ok();
  pinned_.SetDevice(device.is_cuda() ? device.index : -1);
  // A failed Reserve leaves pinned_ empty (PinnedBuffer's contract), so the fallback below never
  // sits beside a pinned block.
  if (pinned_.Reserve(bytes).ok()) {
    pageable_ = std::vector<uint8_t>();
    return Status::Ok();
  }
  // Pinning is an optimisation: a host that cannot pin this much still stages, more slowly.
  try {
    pageable_.resize(bytes);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("host staging of ", bytes, " bytes for device data");
  }
  return Status::Ok();
}

}  // namespace shardrec::embedding
