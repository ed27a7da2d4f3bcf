// The plugin's runtime services (device and pinned memory, stream-ordered copies, bounded
// stream waits), written over a DeviceApi so CPU tests can run them against a double. The
// plain-C table (plugin_table.cc) serves them with the real CUDA runtime.
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/status.h"
#include "impl/cuda_plugin/device_api.h"

namespace shardrec::cuda_plugin {

// Number of usable devices; kNoDevice (with CUDA's error text) when there is none.
Status CountDevices(const DeviceApi& api, int32_t* count);

Status DeviceAlloc(const DeviceApi& api, int32_t device, size_t bytes, void** out);
Status DeviceFree(const DeviceApi& api, int32_t device, void* ptr);
Status HostAlloc(const DeviceApi& api, size_t bytes, void** out);
// HostAlloc with `device` current for the call (DeviceGuard).
Status HostAllocOn(const DeviceApi& api, int32_t device, size_t bytes, void** out);
Status HostFree(const DeviceApi& api, void* ptr);
// kind: SHARDREC_PLUGIN_COPY_*.
Status MemcpyOnStream(const DeviceApi& api, int32_t device, void* dst, const void* src,
                      size_t bytes, int32_t kind, void* stream);
Status MemsetOnStream(const DeviceApi& api, int32_t device, void* dst, int32_t value, size_t bytes,
                      void* stream);
// Polls the stream until it drains; kTimeout after timeout_ms (> 0).
Status WaitStream(const DeviceApi& api, int32_t device, void* stream, int64_t timeout_ms);
// A new stream on `device` that synchronises with the legacy default stream, and its end.
Status CreateStream(const DeviceApi& api, int32_t device, void** out);
Status DestroyStream(const DeviceApi& api, int32_t device, void* stream);

}  // namespace shardrec::cuda_plugin
