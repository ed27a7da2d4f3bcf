#include "impl/core/pinned_buffer.h"

#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"

namespace shardrec::core {

PinnedBuffer::~PinnedBuffer() { Release(); }

void PinnedBuffer::Release() {
  if (data_ == nullptr) return;
  const CudaRuntime* cuda = nullptr;
  // The block came from the plugin, so the runtime is loaded; a failure to free at teardown has
  // nobody to report to.
  if (GetCudaRuntime(&cuda).ok()) (void)cuda->FreeHost(data_);
  data_ = nullptr;
  bytes_ = 0;
}

Status PinnedBuffer::Reserve(size_t bytes) {
  if (bytes <= bytes_) return Status::Ok();
  const CudaRuntime* cuda = nullptr;
  SR_RETURN_IF_ERROR(GetCudaRuntime(&cuda));
  Release();
  void* p = nullptr;
  SR_RETURN_IF_ERROR(cuda->MallocHost(bytes, &p));
  data_ = p;
  bytes_ = bytes;
  return Status::Ok();
}

}  // namespace shardrec::core
