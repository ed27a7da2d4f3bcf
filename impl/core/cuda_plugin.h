// Access to the CUDA plugin (libshardrec_cuda.so). libshardrec.so never links CUDA: the plugin
// is dlopen'ed on the first GPU request, and a CPU-only host never pays for loading it. All
// traffic goes through the plain-C table of impl/core/plugin_abi.h.
#pragma once

#include <cstddef>
#include <string>

#include "impl/core/device.h"
#include "impl/core/plugin_abi.h"
#include "impl/core/status.h"

namespace shardrec::core {

// The plugin's status record as a Status (rc is the returned code; the message is copied).
Status FromPlugin(int32_t rc, const shardrec_plugin_status_t& status);

// A loaded plugin: its table and the file it came from.
struct LoadedPlugin {
  void* handle = nullptr;  // dlopen handle, never closed
  std::string path;
  const shardrec_cuda_plugin_table_t* table = nullptr;
};

// Opens `path` and checks it: the ABI symbol and version, a table of exactly this build's ABI
// version and size (no older table is served), every runtime entry present, and the CUDA driver /
// runtime / NCCL versions it reports (CheckPluginVersions). Errors are kNoDevice with a message
// naming the file and the mismatch. Used once per process by the loader below; tests call it with
// fake plugins.
Status LoadCudaPlugin(const std::string& path, LoadedPlugin* out);

// Whether the plugin serves the dense GPU layers (linear_forward/backward not NULL): kUnsupported
// naming `path` and the missing entry otherwise (a test double serving the embedding side only).
Status HasDenseEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path);

// Whether the plugin serves every embedding kernel entry (emb_*): kUnsupported naming `path` and
// the first missing entry otherwise (a test double serving the dense side only). Checked once,
// where the embedding dispatch first looks the table up; nothing else is probed.
Status HasEmbeddingEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path);

// The run-time versions against the build-time ones: the driver must support at least the CUDA
// version the plugin was compiled with, and the loaded NCCL must have the compiled major version
// and be at least as new. A driver version of 0 (no driver) passes here; the device probe
// reports that case.
Status CheckPluginVersions(const shardrec_plugin_versions_t& v);

// Loads the plugin once per process (thread-safe; later calls return the cached answer) from
// $SHARDREC_CUDA_PLUGIN when set, else next to libshardrec.so, else by soname. Errors: kNoDevice
// when the plugin or CUDA is missing or mismatched; kUnsupported when this build has no plugin.
// The table lives until process exit.
Status GetCudaPlugin(const shardrec_cuda_plugin_table_t** out);

// The loaded plugin's file path (for diagnostics). Same errors as GetCudaPlugin.
Status GetCudaPluginPath(std::string* out);

enum class CopyKind : int32_t {
  kHostToDevice = SHARDREC_PLUGIN_COPY_HOST_TO_DEVICE,
  kDeviceToHost = SHARDREC_PLUGIN_COPY_DEVICE_TO_HOST,
  kDeviceToDevice = SHARDREC_PLUGIN_COPY_DEVICE_TO_DEVICE,
  kDefault = SHARDREC_PLUGIN_COPY_DEFAULT,
};

// The plugin's runtime services in C++ dress for CUDA-free code (comm staging, accessors,
// tests). A thin value over the table; all methods are thread-safe.
class CudaRuntime {
 public:
  explicit CudaRuntime(const shardrec_cuda_plugin_table_t* table, int device_count)
      : t_(table), count_(device_count) {}

  int DeviceCount() const { return count_; }
  Status Malloc(int device, size_t bytes, void** out) const;
  Status Free(int device, void* ptr) const;
  Status MallocHost(size_t bytes, void** out) const;  // pinned
  // Pinned, with `device` current for the allocation (its context, none created on device 0).
  Status MallocHostOn(int device, size_t bytes, void** out) const;
  Status FreeHost(void* ptr) const;
  Status MemcpyAsync(int device, void* dst, const void* src, size_t bytes, CopyKind kind,
                     Stream stream) const;
  Status MemsetAsync(int device, void* dst, int value, size_t bytes, Stream stream) const;
  // Bounded: kTimeout once `timeout_ms` (> 0) milliseconds pass with work still queued.
  Status StreamWait(int device, Stream stream, int64_t timeout_ms) const;
  // A stream of the caller's on `device` (non-blocking: no implicit order with the legacy default
  // stream; order it with stream_wait_stream or a host wait), to be given back with
  // StreamDestroy.
  Status StreamCreate(int device, Stream* out) const;
  Status StreamDestroy(int device, Stream stream) const;

 private:
  const shardrec_cuda_plugin_table_t* t_;
  int count_;
};

// The runtime of the loaded plugin, once a CUDA device was found. Errors: those of
// GetCudaPlugin, and kNoDevice when the driver reports no device. Lives until process exit.
Status GetCudaRuntime(const CudaRuntime** out);

// Checks that `device` is usable: host is always fine; cuda:n needs the plugin and n <
// DeviceCount(). The message names the device.
Status CheckDevice(const Device& device);

}  // namespace shardrec::core
