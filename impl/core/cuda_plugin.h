// Access to the CUDA plugin (libshardrec_cuda.so). libshardrec.so never links CUDA: the plugin
// is dlopen'ed on the first GPU request, and a CPU-only host never pays for loading it.
#pragma once

#include <cstddef>

#include "impl/core/device.h"
#include "impl/core/status.h"

namespace shardrec::core {

enum class CopyKind : int32_t { kHostToDevice, kDeviceToHost, kDeviceToDevice, kDefault };

// The runtime services the plugin provides to CUDA-free code (comm staging, accessors, tests).
// All methods are thread-safe.
class CudaRuntime {
 public:
  virtual ~CudaRuntime() = default;
  virtual int DeviceCount() = 0;  // 0 when the driver reports none
  virtual Status Malloc(int device, size_t bytes, void** out) = 0;
  virtual Status Free(int device, void* ptr) = 0;
  virtual Status MallocHost(size_t bytes, void** out) = 0;  // pinned
  virtual Status FreeHost(void* ptr) = 0;
  virtual Status MemcpyAsync(int device, void* dst, const void* src, size_t bytes, CopyKind kind,
                             Stream stream) = 0;
  virtual Status MemsetAsync(int device, void* dst, int value, size_t bytes, Stream stream) = 0;
  virtual Status StreamSynchronize(int device, Stream stream) = 0;
};

// Loads the plugin once (thread-safe) and returns its runtime. Errors: kNoDevice when the
// plugin, the CUDA runtime or a GPU is missing; kUnsupported when this build has no plugin.
// The returned pointer lives until process exit.
Status GetCudaRuntime(CudaRuntime** out);

// Looks up an extern "C" entry point exported by the plugin (e.g. the NCCL communicator
// factory). Same errors as GetCudaRuntime, plus kNotFound for an unknown symbol.
Status GetCudaPluginSymbol(const char* name, void** out);

// Checks that `device` is usable: host is always fine; cuda:n needs the plugin and n <
// DeviceCount(). The message names the device.
Status CheckDevice(const Device& device);

}  // namespace shardrec::core
