// Pinned host memory through the CUDA plugin (pinned_buffer.h).
#include "impl/core/pinned_buffer.h"

#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"

namespace shardrec::core {

PinnedBuffer::~PinnedBuffer() { Release(); }

void PinnedBuffer::Release() {
  if (data_ != nullptr) (void)cuda_->FreeHost(data_);
  cuda_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

Status PinnedBuffer::Reserve(size_t bytes) {
  if (bytes <= bytes_) return Status::Ok();
  // Released before the lookup too: every failure leaves the buffer empty.
  Release();
  const CudaRuntime* cuda = nullptr;
  SR_RETURN_IF_ERROR(GetCudaRuntime(&cuda));
  return Reserve(bytes, *cuda);
}

Status PinnedBuffer::Reserve(size_t bytes, const CudaRuntime& cuda) {
  if (bytes <= bytes_) return Status::Ok();
  Release();
  void* p = nullptr;
  SR_RETURN_IF_ERROR(device_ >= 0 ? cuda.MallocHostOn(device_, bytes, &p)
                                  : cuda.MallocHost(bytes, &p));
  if (p == nullptr)
    return Status::OutOfMemory("pinned host memory: the CUDA plugin gave no block of ", bytes,
                               " bytes");
  cuda_ = &cuda;
  data_ = p;
  bytes_ = bytes;
  return Status::Ok();
}

}  // namespace shardrec::core
