// The plugin's two exports: its ABI version and its table of plain-C entry points
// (impl/core/plugin_abi.h). The runtime entries serve runtime_services.h with the real CUDA
// runtime; the NCCL entries live in nccl_entry.cc, the embedding kernels' in embedding_entries.cc.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <string>

#include "impl/core/plugin_abi.h"
#include "impl/cuda_plugin/embedding_entries.h"
#include "impl/cuda_plugin/lt_linear.h"
#include "impl/cuda_plugin/nccl_entry.h"
#include "impl/cuda_plugin/plugin_status.h"
#include "impl/cuda_plugin/runtime_services.h"

// Marks the two symbols the loader finds with dlsym; everything else in the plugin stays hidden
// (and the version script keeps only shardrec_cuda_*).
#define SHARDREC_CUDA_EXPORT extern "C" __attribute__((visibility("default")))

namespace shardrec::cuda_plugin {
namespace {

const DeviceApi& Api() { return RealDeviceApi(); }

const char* PluginPath() {
  static const std::string path = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&PluginPath), &info) != 0 && info.dli_fname != nullptr) {
      return std::string(info.dli_fname);
    }
    return std::string();
  }();
  return path.c_str();
}

void Versions(shardrec_plugin_versions_t* v) {
  if (v == nullptr) return;
  *v = shardrec_plugin_versions_t{};
  v->built_cuda_runtime = CUDART_VERSION;
  v->built_nccl = NCCL_VERSION_CODE;
  int n = 0;
  if (Api().DriverGetVersion(&n) == cudaSuccess) v->cuda_driver = n;
  n = 0;
  if (Api().RuntimeGetVersion(&n) == cudaSuccess) v->cuda_runtime = n;
  n = 0;
  if (Api().NcclGetVersion(&n) == ncclSuccess) v->nccl = n;
  (void)Api().GetLastError();
}

// The driver's answer does not change within a process: probe once.
int32_t DeviceCount(int32_t* count, shardrec_plugin_status_t* st) {
  return Reported(st, "the CUDA device probe", [&]() -> Status {
    if (count == nullptr) return Status::InvalidArgument("count must not be NULL");
    struct Probe {
      int32_t count = 0;
      Status status;
    };
    static const Probe probe = [] {
      Probe p;
      p.status = CountDevices(Api(), &p.count);
      return p;
    }();
    *count = probe.count;
    return probe.status;
  });
}

int32_t DeviceAllocEntry(int32_t device, size_t bytes, void** out, shardrec_plugin_status_t* st) {
  return Reported(st, "cudaMalloc", [&] { return DeviceAlloc(Api(), device, bytes, out); });
}
int32_t DeviceFreeEntry(int32_t device, void* ptr, shardrec_plugin_status_t* st) {
  return Reported(st, "cudaFree", [&] { return DeviceFree(Api(), device, ptr); });
}
int32_t HostAllocEntry(size_t bytes, void** out, shardrec_plugin_status_t* st) {
  return Reported(st, "cudaMallocHost", [&] { return HostAlloc(Api(), bytes, out); });
}
int32_t HostAllocOnEntry(int32_t device, size_t bytes, void** out, shardrec_plugin_status_t* st) {
  return Reported(st, "cudaMallocHost", [&] { return HostAllocOn(Api(), device, bytes, out); });
}
int32_t HostFreeEntry(void* ptr, shardrec_plugin_status_t* st) {
  return Reported(st, "cudaFreeHost", [&] { return HostFree(Api(), ptr); });
}
int32_t MemcpyEntry(int32_t device, void* dst, const void* src, size_t bytes, int32_t kind,
                    void* stream, shardrec_plugin_status_t* st) {
  return Reported(st, "cudaMemcpyAsync",
                  [&] { return MemcpyOnStream(Api(), device, dst, src, bytes, kind, stream); });
}
int32_t MemsetEntry(int32_t device, void* dst, int32_t value, size_t bytes, void* stream,
                    shardrec_plugin_status_t* st) {
  return Reported(st, "cudaMemsetAsync",
                  [&] { return MemsetOnStream(Api(), device, dst, value, bytes, stream); });
}
int32_t StreamWaitEntry(int32_t device, void* stream, int64_t timeout_ms,
                        shardrec_plugin_status_t* st) {
  return Reported(st, "a stream wait",
                  [&] { return WaitStream(Api(), device, stream, timeout_ms); });
}

int32_t StreamCreateEntry(int32_t device, void** stream, shardrec_plugin_status_t* st) {
  return Reported(st, "a stream creation", [&] { return CreateStream(Api(), device, stream); });
}
int32_t StreamDestroyEntry(int32_t device, void* stream, shardrec_plugin_status_t* st) {
  return Reported(st, "a stream destruction", [&] { return DestroyStream(Api(), device, stream); });
}

int32_t LinearForwardEntry(int32_t device, const shardrec_plugin_linear_t* args, const float* w,
                           const float* b, const float* x, float* y, void* aux,
                           int32_t* aux_written, void* stream, shardrec_plugin_status_t* st) {
  return Reported(st, "a cuBLASLt linear forward", [&]() -> Status {
    if (args == nullptr) return Status::InvalidArgument("args must not be NULL");
    return lt::LinearForward(device, *args, w, b, x, y, aux, aux_written,
                             static_cast<cudaStream_t>(stream));
  });
}

int32_t LinearBackwardEntry(int32_t device, const shardrec_plugin_linear_t* args, const float* w,
                            const float* x, const float* y, const float* dy, const void* input_aux,
                            float* dw, float* db, float* dx, void* stream,
                            shardrec_plugin_status_t* st) {
  return Reported(st, "a cuBLASLt linear backward", [&]() -> Status {
    if (args == nullptr) return Status::InvalidArgument("args must not be NULL");
    return lt::LinearBackward(device, *args, w, x, y, dy, input_aux, dw, db, dx,
                              static_cast<cudaStream_t>(stream));
  });
}

const shardrec_cuda_plugin_table_t kTable = {
    sizeof(shardrec_cuda_plugin_table_t),
    SHARDREC_CUDA_PLUGIN_ABI_VERSION,
    &PluginPath,
    &Versions,
    &DeviceCount,
    &DeviceAllocEntry,
    &DeviceFreeEntry,
    &HostAllocEntry,
    &HostFreeEntry,
    &MemcpyEntry,
    &MemsetEntry,
    &StreamWaitEntry,
    &entry::NcclUniqueId,
    &entry::NcclCreate,
    &entry::NcclDestroy,
    &entry::NcclSetTimeout,
    &entry::NcclAllReduce,
    &entry::NcclAllToAllV,
    &entry::NcclAllGatherV,
    &entry::NcclReduceScatterV,
    &entry::NcclBroadcast,
    &entry::NcclBarrier,
    &entry::NcclSplit,
    &entry::NcclAbort,
    &entry::NcclAsyncError,
    &LinearForwardEntry,
    &LinearBackwardEntry,
    &entry::EmbStatusBytes,
    &entry::EmbReadStatus,
    &entry::EmbLookup,
    &entry::EmbBackwardWorkspaceBytes,
    &entry::EmbGroupRows,
    &entry::EmbAggregateGrads,
    &entry::EmbFusedBackward,
    &entry::EmbPartialRowStats,
    &entry::EmbApply,
    &entry::EmbRouteTempBytes,
    &entry::EmbRoute,
    &StreamCreateEntry,
    &StreamDestroyEntry,
    &entry::EmbDivideMeans,
    &entry::EmbUnpack,
    &entry::StreamWaitStream,
    &entry::EmbCheckFinite,
    &entry::EmbPackGrads,
    &entry::EmbDpWorkspaceBytes,
    &entry::EmbDpStep,
    &entry::EmbRowPhaseCounted,
    &entry::EmbGroupRowsGated,
    &entry::EmbSumSources,
    &HostAllocOnEntry,
};

}  // namespace
}  // namespace shardrec::cuda_plugin

SHARDREC_CUDA_EXPORT uint32_t shardrec_cuda_plugin_abi_version() {
  return SHARDREC_CUDA_PLUGIN_ABI_VERSION;
}

SHARDREC_CUDA_EXPORT const shardrec_cuda_plugin_table_t* shardrec_cuda_plugin_table(
    uint32_t abi_version) {
  return abi_version == SHARDREC_CUDA_PLUGIN_ABI_VERSION ? &shardrec::cuda_plugin::kTable : nullptr;
}

// The exported definitions must keep the shapes the loader casts dlsym results to.
[[maybe_unused]] static constexpr shardrec_cuda_plugin_abi_version_fn kCheckAbi =
    &shardrec_cuda_plugin_abi_version;
[[maybe_unused]] static constexpr shardrec_cuda_plugin_table_fn kCheckTable =
    &shardrec_cuda_plugin_table;
