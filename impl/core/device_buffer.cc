// Grow-only device blocks through the plugin's runtime services.
#include "impl/core/device_buffer.h"

#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"

namespace shardrec::core {

DeviceBuffer::~DeviceBuffer() { Release(); }

void DeviceBuffer::Release() {
  if (data_ == nullptr) return;
  const CudaRuntime* rt = nullptr;
  // The runtime that handed the block out is cached for the process, so this cannot fail here;
  // a failed free leaks the block rather than throwing from a destructor.
  if (GetCudaRuntime(&rt).ok()) (void)rt->Free(device_, data_);
  data_ = nullptr;
  bytes_ = 0;
}

Status DeviceBuffer::Reserve(int device, size_t bytes, const char* what, Stream stream) {
  if (bytes <= bytes_ && device == device_ && (data_ != nullptr || bytes == 0)) return Status::Ok();
  const CudaRuntime* rt = nullptr;
  if (data_ != nullptr) {
    // No queued kernel may still read or write the block that is given back.
    SR_RETURN_IF_ERROR(GetCudaRuntime(&rt));
    SR_RETURN_IF_ERROR(rt->StreamWait(device_, stream, kDeviceWaitMs));
  }
  Release();
  if (bytes == 0) return Status::Ok();
  SR_RETURN_IF_ERROR(GetCudaRuntime(&rt));
  void* p = nullptr;
  const Status s = rt->Malloc(device, bytes, &p);
  if (!s.ok()) {
    if (s.code() == Code::kOutOfMemory)
      return Status::OutOfMemory(what, ": cuda:", device, " has not got ", bytes, " bytes free (",
                                 s.message(), ")");
    return s.WithContext(StrCat(what, ": allocating ", bytes, " bytes on cuda:", device));
  }
  device_ = device;
  data_ = p;
  bytes_ = bytes;
  return Status::Ok();
}

}  // namespace shardrec::core
