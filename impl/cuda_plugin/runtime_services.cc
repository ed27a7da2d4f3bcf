// Runtime services over a DeviceApi. Every call names the device and the size in its error,
// sets the device only for its own duration, and never waits without a bound.
#include "impl/cuda_plugin/runtime_services.h"

#include <chrono>

#include "impl/core/plugin_abi.h"
#include "impl/cuda_plugin/cuda_util.h"
#include "impl/cuda_plugin/nccl_communicator.h"  // Backoff

namespace shardrec::cuda_plugin {
namespace {

Status CheckIndex(const DeviceApi& api, int32_t device) {
  int count = 0;
  if (api.GetDeviceCount(&count) != cudaSuccess) {
    (void)api.GetLastError();
    count = 0;
  }
  if (device < 0 || device >= count) {
    return Status::InvalidArgument("CUDA device index ", device, " is outside [0, ", count, ")");
  }
  return Status::Ok();
}

bool ToCuda(int32_t kind, cudaMemcpyKind* out) {
  switch (kind) {
    case SHARDREC_PLUGIN_COPY_HOST_TO_DEVICE:
      *out = cudaMemcpyHostToDevice;
      return true;
    case SHARDREC_PLUGIN_COPY_DEVICE_TO_HOST:
      *out = cudaMemcpyDeviceToHost;
      return true;
    case SHARDREC_PLUGIN_COPY_DEVICE_TO_DEVICE:
      *out = cudaMemcpyDeviceToDevice;
      return true;
    case SHARDREC_PLUGIN_COPY_DEFAULT:
      *out = cudaMemcpyDefault;
      return true;
    default:
      return false;
  }
}

}  // namespace

Status CountDevices(const DeviceApi& api, int32_t* count) {
  *count = 0;
  int n = 0;
  const cudaError_t err = api.GetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)api.GetLastError();
    return Status::NoDevice("no CUDA device (cudaGetDeviceCount: ", api.GetErrorName(err), ": ",
                            api.GetErrorString(err), ")");
  }
  if (n <= 0) return Status::NoDevice("no CUDA device (cudaGetDeviceCount reports 0)");
  *count = n;
  return Status::Ok();
}

Status DeviceAlloc(const DeviceApi& api, int32_t device, size_t bytes, void** out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  *out = nullptr;
  SR_RETURN_IF_ERROR(CheckIndex(api, device));
  if (bytes == 0) return Status::Ok();
  DeviceGuard guard(api);
  SR_RETURN_IF_ERROR(guard.Set(device));
  return CudaStatus(api, api.Malloc(out, bytes),
                    StrCat("cudaMalloc(", bytes, " bytes) on cuda:", device));
}

Status DeviceFree(const DeviceApi& api, int32_t device, void* ptr) {
  if (ptr == nullptr) return Status::Ok();
  SR_RETURN_IF_ERROR(CheckIndex(api, device));
  DeviceGuard guard(api);
  SR_RETURN_IF_ERROR(guard.Set(device));
  return CudaStatus(api, api.Free(ptr), StrCat("cudaFree on cuda:", device));
}

Status HostAlloc(const DeviceApi& api, size_t bytes, void** out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  *out = nullptr;
  if (bytes == 0) return Status::Ok();
  return CudaStatus(api, api.MallocHost(out, bytes), StrCat("cudaMallocHost(", bytes, " bytes)"));
}

Status HostAllocOn(const DeviceApi& api, int32_t device, size_t bytes, void** out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  *out = nullptr;
  SR_RETURN_IF_ERROR(CheckIndex(api, device));
  if (bytes == 0) return Status::Ok();
  DeviceGuard guard(api);
  SR_RETURN_IF_ERROR(guard.Set(device));
  return HostAlloc(api, bytes, out);
}

Status HostFree(const DeviceApi& api, void* ptr) {
  if (ptr == nullptr) return Status::Ok();
  return CudaStatus(api, api.FreeHost(ptr), "cudaFreeHost");
}

Status MemcpyOnStream(const DeviceApi& api, int32_t device, void* dst, const void* src,
                      size_t bytes, int32_t kind, void* stream) {
  cudaMemcpyKind ckind = cudaMemcpyDefault;
  if (!ToCuda(kind, &ckind)) return Status::InvalidArgument("unknown copy kind ", kind);
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr) {
    return Status::InvalidArgument("memcpy of ", bytes, " bytes with a NULL ",
                                   dst == nullptr ? "destination" : "source");
  }
  SR_RETURN_IF_ERROR(CheckIndex(api, device));
  DeviceGuard guard(api);
  SR_RETURN_IF_ERROR(guard.Set(device));
  return CudaStatus(api, api.MemcpyAsync(dst, src, bytes, ckind, static_cast<cudaStream_t>(stream)),
                    StrCat("cudaMemcpyAsync(", bytes, " bytes) on cuda:", device));
}

Status MemsetOnStream(const DeviceApi& api, int32_t device, void* dst, int32_t value, size_t bytes,
                      void* stream) {
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr) return Status::InvalidArgument("memset of ", bytes, " bytes at NULL");
  SR_RETURN_IF_ERROR(CheckIndex(api, device));
  DeviceGuard guard(api);
  SR_RETURN_IF_ERROR(guard.Set(device));
  return CudaStatus(api, api.MemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)),
                    StrCat("cudaMemsetAsync(", bytes, " bytes) on cuda:", device));
}

Status WaitStream(const DeviceApi& api, int32_t device, void* stream, int64_t timeout_ms) {
  if (timeout_ms <= 0) {
    return Status::InvalidArgument("stream wait timeout must be positive, got ", timeout_ms);
  }
  SR_RETURN_IF_ERROR(CheckIndex(api, device));
  DeviceGuard guard(api);
  SR_RETURN_IF_ERROR(guard.Set(device));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Backoff backoff;
  for (;;) {
    const cudaError_t q = api.StreamQuery(static_cast<cudaStream_t>(stream));
    if (q == cudaSuccess) return Status::Ok();
    if (q != cudaErrorNotReady) {
      return CudaStatus(api, q, StrCat("waiting for a stream on cuda:", device));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Timeout("a stream on cuda:", device, " did not drain within ", timeout_ms,
                             " ms");
    }
    backoff.Sleep();
  }
}

Status CreateStream(const DeviceApi& api, int32_t device, void** out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  *out = nullptr;
  SR_RETURN_IF_ERROR(CheckIndex(api, device));
  DeviceGuard guard(api);
  SR_RETURN_IF_ERROR(guard.Set(device));
  cudaStream_t s = nullptr;
  // Non-blocking: the step stream does not serialise with every legacy-default-stream operation
  // of the process; the collection orders itself against the caller's streams explicitly
  // (stream_wait_stream) and waits for its own.
  SR_RETURN_IF_ERROR(CudaStatus(api, api.StreamCreateWithFlags(&s, cudaStreamNonBlocking),
                                StrCat("cudaStreamCreateWithFlags on cuda:", device)));
  *out = s;
  return Status::Ok();
}

Status DestroyStream(const DeviceApi& api, int32_t device, void* stream) {
  if (stream == nullptr) return Status::Ok();
  SR_RETURN_IF_ERROR(CheckIndex(api, device));
  DeviceGuard guard(api);
  SR_RETURN_IF_ERROR(guard.Set(device));
  return CudaStatus(api, api.StreamDestroy(static_cast<cudaStream_t>(stream)),
                    StrCat("cudaStreamDestroy on cuda:", device));
}

}  // namespace shardrec::cuda_plugin
