// The plugin's CudaRuntime (device memory, pinned memory, async copies) and its entry points:
// the ABI version, the runtime singleton and the plugin's own path.
#include <dlfcn.h>

#include <new>
#include <string>

#include "impl/core/cuda_plugin.h"
#include "impl/cuda_plugin/cuda_util.h"
#include "impl/cuda_plugin/plugin_abi.h"

namespace shardrec::cuda_plugin {
namespace {

cudaMemcpyKind ToCuda(core::CopyKind kind) {
  switch (kind) {
    case core::CopyKind::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case core::CopyKind::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case core::CopyKind::kDeviceToDevice:
      return cudaMemcpyDeviceToDevice;
    case core::CopyKind::kDefault:
      return cudaMemcpyDefault;
  }
  return cudaMemcpyDefault;
}

class CudaRuntimeImpl final : public core::CudaRuntime {
 public:
  explicit CudaRuntimeImpl(int count) : count_(count) {}

  int DeviceCount() override { return count_; }

  Status Malloc(int device, size_t bytes, void** out) override {
    if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
    *out = nullptr;
    SR_RETURN_IF_ERROR(CheckIndex(device));
    if (bytes == 0) return Status::Ok();
    DeviceGuard guard;
    SR_RETURN_IF_ERROR(guard.Set(device));
    return CudaStatus(cudaMalloc(out, bytes),
                      StrCat("cudaMalloc(", bytes, " bytes) on cuda:", device));
  }

  Status Free(int device, void* ptr) override {
    if (ptr == nullptr) return Status::Ok();
    SR_RETURN_IF_ERROR(CheckIndex(device));
    DeviceGuard guard;
    SR_RETURN_IF_ERROR(guard.Set(device));
    return CudaStatus(cudaFree(ptr), StrCat("cudaFree on cuda:", device));
  }

  Status MallocHost(size_t bytes, void** out) override {
    if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
    *out = nullptr;
    if (bytes == 0) return Status::Ok();
    return CudaStatus(cudaMallocHost(out, bytes), StrCat("cudaMallocHost(", bytes, " bytes)"));
  }

  Status FreeHost(void* ptr) override {
    if (ptr == nullptr) return Status::Ok();
    return CudaStatus(cudaFreeHost(ptr), "cudaFreeHost");
  }

  Status MemcpyAsync(int device, void* dst, const void* src, size_t bytes, core::CopyKind kind,
                     Stream stream) override {
    if (bytes == 0) return Status::Ok();
    if (dst == nullptr || src == nullptr) {
      return Status::InvalidArgument("memcpy of ", bytes, " bytes with a NULL ",
                                     dst == nullptr ? "destination" : "source");
    }
    SR_RETURN_IF_ERROR(CheckIndex(device));
    DeviceGuard guard;
    SR_RETURN_IF_ERROR(guard.Set(device));
    return CudaStatus(
        cudaMemcpyAsync(dst, src, bytes, ToCuda(kind), static_cast<cudaStream_t>(stream)),
        StrCat("cudaMemcpyAsync(", bytes, " bytes) on cuda:", device));
  }

  Status MemsetAsync(int device, void* dst, int value, size_t bytes, Stream stream) override {
    if (bytes == 0) return Status::Ok();
    if (dst == nullptr) return Status::InvalidArgument("memset of ", bytes, " bytes at NULL");
    SR_RETURN_IF_ERROR(CheckIndex(device));
    DeviceGuard guard;
    SR_RETURN_IF_ERROR(guard.Set(device));
    return CudaStatus(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)),
                      StrCat("cudaMemsetAsync(", bytes, " bytes) on cuda:", device));
  }

  Status StreamSynchronize(int device, Stream stream) override {
    SR_RETURN_IF_ERROR(CheckIndex(device));
    DeviceGuard guard;
    SR_RETURN_IF_ERROR(guard.Set(device));
    return CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                      StrCat("cudaStreamSynchronize on cuda:", device));
  }

 private:
  Status CheckIndex(int device) const {
    if (device < 0 || device >= count_) {
      return Status::InvalidArgument("CUDA device index ", device, " is outside [0, ", count_, ")");
    }
    return Status::Ok();
  }

  const int count_;
};

// Probed once: the driver's answer does not change within a process.
struct Probe {
  CudaRuntimeImpl* runtime = nullptr;
  Status status;
};

const Probe& GetProbe() {
  static const Probe* probe = [] {
    auto* p = new Probe();
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      p->status = Status::NoDevice("no CUDA device (cudaGetDeviceCount: ", cudaGetErrorName(err),
                                   ": ", cudaGetErrorString(err), ")");
    } else if (count <= 0) {
      p->status = Status::NoDevice("no CUDA device (cudaGetDeviceCount reports 0)");
    } else {
      p->runtime = new CudaRuntimeImpl(count);
    }
    return p;
  }();
  return *probe;
}

}  // namespace
}  // namespace shardrec::cuda_plugin

using shardrec::Status;
namespace cp = shardrec::cuda_plugin;

SHARDREC_CUDA_EXPORT int32_t shardrec_cuda_abi_version() { return cp::kAbiVersion; }

SHARDREC_CUDA_EXPORT void shardrec_cuda_runtime_v1(int32_t abi_version,
                                                   shardrec::core::CudaRuntime** out,
                                                   Status* status) noexcept {
  if (out == nullptr || status == nullptr) return;
  *out = nullptr;
  try {
    if (abi_version != cp::kAbiVersion) {
      *status = Status::InvalidUsage("CUDA plugin ABI version ", cp::kAbiVersion,
                                     " does not match the caller's ", abi_version);
      return;
    }
    const cp::Probe& probe = cp::GetProbe();
    *status = probe.status;
    *out = probe.runtime;
  } catch (const std::bad_alloc&) {
    *status = Status::OutOfMemory("out of host memory while probing CUDA devices");
  } catch (...) {
    *status = Status::Internal("unexpected exception while probing CUDA devices");
  }
}

SHARDREC_CUDA_EXPORT const char* shardrec_cuda_plugin_path_v1() noexcept {
  static const std::string path = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&shardrec_cuda_abi_version), &info) != 0 &&
        info.dli_fname != nullptr) {
      return std::string(info.dli_fname);
    }
    return std::string();
  }();
  return path.c_str();
}

// The definitions must keep the shapes the callers cast dlsym results to.
[[maybe_unused]] static constexpr cp::AbiVersionFn kCheckAbi = &shardrec_cuda_abi_version;
[[maybe_unused]] static constexpr cp::RuntimeFn kCheckRuntime = &shardrec_cuda_runtime_v1;
[[maybe_unused]] static constexpr cp::PluginPathFn kCheckPath = &shardrec_cuda_plugin_path_v1;
