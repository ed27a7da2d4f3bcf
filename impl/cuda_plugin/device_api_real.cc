// The DeviceApi of production: straight to libcudart and libnccl.
#include "impl/cuda_plugin/device_api.h"

namespace shardrec::cuda_plugin {
namespace {

// cuCtxGetCurrent through the runtime's driver entry point, so the plugin does not link
// libcuda directly. CUresult and CUcontext as their plain representations.
using CtxGetCurrentFn = int (*)(void**);

bool ThreadHasContextReal() {
  static CtxGetCurrentFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<CtxGetCurrentFn>(nullptr);
    }
    return reinterpret_cast<CtxGetCurrentFn>(p);
  }();
  if (fn == nullptr) return false;  // unknown: do not risk creating a context
  void* ctx = nullptr;
  return fn(&ctx) == 0 && ctx != nullptr;
}

// The runtime's overloads and default arguments do not convert to plain pointers; these do.
cudaError_t MallocHostReal(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
cudaError_t EventCreateWithFlagsReal(cudaEvent_t* e, unsigned int flags) {
  return cudaEventCreateWithFlags(e, flags);
}
cudaError_t EventRecordReal(cudaEvent_t e, cudaStream_t s) { return cudaEventRecord(e, s); }
cudaError_t MemcpyAsyncReal(void* dst, const void* src, size_t n, cudaMemcpyKind k,
                            cudaStream_t s) {
  return cudaMemcpyAsync(dst, src, n, k, s);
}
cudaError_t MemsetAsyncReal(void* dst, int v, size_t n, cudaStream_t s) {
  return cudaMemsetAsync(dst, v, n, s);
}
cudaError_t MallocReal(void** p, size_t n) { return cudaMalloc(p, n); }

}  // namespace

const DeviceApi& RealDeviceApi() {
  static const DeviceApi api = {
      &cudaGetDeviceCount,
      &cudaGetDevice,
      &cudaSetDevice,
      &ThreadHasContextReal,
      &cudaGetLastError,
      &cudaGetErrorName,
      &cudaGetErrorString,
      &cudaDriverGetVersion,
      &cudaRuntimeGetVersion,
      &MallocReal,
      &cudaFree,
      &MallocHostReal,
      &cudaFreeHost,
      &MemcpyAsyncReal,
      &MemsetAsyncReal,
      &cudaMemset,
      &cudaStreamQuery,
      &EventCreateWithFlagsReal,
      &cudaEventDestroy,
      &EventRecordReal,
      &cudaEventQuery,
      &ncclGetVersion,
      &ncclGetUniqueId,
      &ncclCommInitRankConfig,
      &ncclCommSplit,
      &ncclCommGetAsyncError,
      &ncclCommFinalize,
      &ncclCommDestroy,
      &ncclCommAbort,
      &ncclCommUserRank,
      &ncclCommCount,
      &ncclGetErrorString,
      &ncclGetLastError,
      &ncclGroupStart,
      &ncclGroupEnd,
      &ncclAllReduce,
      &ncclAllGather,
      &ncclReduceScatter,
      &ncclReduce,
      &ncclBroadcast,
      &ncclAlltoAll,
      &ncclSend,
      &ncclRecv,
      &cudaStreamCreateWithFlags,
      &cudaStreamDestroy,
  };
  return api;
}

}  // namespace shardrec::cuda_plugin
