// Every CUDA runtime and NCCL function the plugin calls, behind one table of function pointers.
// The plugin uses RealDeviceApi(); CPU tests hand the same code a test double and so exercise
// its control flow (init timeouts, the watchdog, aborts, poisoning, device choice) on machines
// without a GPU. Only types come from the CUDA/NCCL headers; nothing here links them.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

namespace shardrec::cuda_plugin {

struct DeviceApi {
  // CUDA runtime.
  cudaError_t (*GetDeviceCount)(int*);
  cudaError_t (*GetDevice)(int*);
  cudaError_t (*SetDevice)(int);
  // True when the calling thread has a current CUDA context (cuCtxGetCurrent != NULL). A guard
  // restores the caller's device only then: "restoring" device 0 on a thread that never chose
  // one would create a context there (hundreds of MiB since CUDA 12).
  bool (*ThreadHasContext)();
  cudaError_t (*GetLastError)();
  const char* (*GetErrorName)(cudaError_t);
  const char* (*GetErrorString)(cudaError_t);
  cudaError_t (*DriverGetVersion)(int*);
  cudaError_t (*RuntimeGetVersion)(int*);
  cudaError_t (*Malloc)(void**, size_t);
  cudaError_t (*Free)(void*);
  cudaError_t (*MallocHost)(void**, size_t);
  cudaError_t (*FreeHost)(void*);
  cudaError_t (*MemcpyAsync)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
  cudaError_t (*MemsetAsync)(void*, int, size_t, cudaStream_t);
  cudaError_t (*Memset)(void*, int, size_t);
  cudaError_t (*StreamQuery)(cudaStream_t);
  cudaError_t (*EventCreateWithFlags)(cudaEvent_t*, unsigned int);
  cudaError_t (*EventDestroy)(cudaEvent_t);
  cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*EventQuery)(cudaEvent_t);

  // NCCL.
  ncclResult_t (*NcclGetVersion)(int*);
  ncclResult_t (*NcclGetUniqueId)(ncclUniqueId*);
  ncclResult_t (*NcclCommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*NcclCommSplit)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*);
  ncclResult_t (*NcclCommGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*NcclCommFinalize)(ncclComm_t);
  ncclResult_t (*NcclCommDestroy)(ncclComm_t);
  ncclResult_t (*NcclCommAbort)(ncclComm_t);
  ncclResult_t (*NcclCommUserRank)(ncclComm_t, int*);
  ncclResult_t (*NcclCommCount)(ncclComm_t, int*);
  const char* (*NcclGetErrorString)(ncclResult_t);
  const char* (*NcclGetLastError)(ncclComm_t);
  ncclResult_t (*NcclGroupStart)();
  ncclResult_t (*NcclGroupEnd)();
  ncclResult_t (*NcclAllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*NcclAllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*NcclReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                    ncclComm_t, cudaStream_t);
  ncclResult_t (*NcclReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int,
                             ncclComm_t, cudaStream_t);
  ncclResult_t (*NcclBroadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*NcclAllToAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
  ncclResult_t (*NcclSend)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*NcclRecv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);

  // CUDA runtime, appended (doubles that leave them out get null and never reach them).
  cudaError_t (*StreamCreateWithFlags)(cudaStream_t*, unsigned int);
  cudaError_t (*StreamDestroy)(cudaStream_t);
};

// The real CUDA runtime and NCCL (defined in device_api_real.cc, linked into the plugin only).
const DeviceApi& RealDeviceApi();

}  // namespace shardrec::cuda_plugin
