// The NCCL entries of the plugin's C table (plugin_abi.h), over NcclCommunicator. The opaque
// shardrec_plugin_nccl_t* is a NcclCommunicator*.
#pragma once

#include "impl/core/plugin_abi.h"

namespace shardrec::cuda_plugin::entry {

int32_t NcclUniqueId(uint8_t* id, size_t len, shardrec_plugin_status_t* st);
int32_t NcclCreate(const uint8_t* id, size_t len, int32_t world, int32_t rank, int32_t device,
                   int64_t timeout_ms, shardrec_plugin_nccl_t** out, shardrec_plugin_status_t* st);
void NcclDestroy(shardrec_plugin_nccl_t* comm);
void NcclSetTimeout(shardrec_plugin_nccl_t* comm, int64_t timeout_ms);
int32_t NcclAllReduce(shardrec_plugin_nccl_t* comm, const void* send, void* recv, size_t count,
                      int32_t dtype, int32_t op, void* stream, int64_t timeout_ms,
                      shardrec_plugin_status_t* st);
int32_t NcclAllToAllV(shardrec_plugin_nccl_t* comm, const void* send, const size_t* send_counts,
                      void* recv, const size_t* recv_counts, int32_t dtype, void* stream,
                      int64_t timeout_ms, shardrec_plugin_status_t* st);
int32_t NcclAllGatherV(shardrec_plugin_nccl_t* comm, const void* send, size_t send_count,
                       void* recv, const size_t* recv_counts, int32_t dtype, void* stream,
                       int64_t timeout_ms, shardrec_plugin_status_t* st);
int32_t NcclReduceScatterV(shardrec_plugin_nccl_t* comm, const void* send, void* recv,
                           const size_t* recv_counts, int32_t dtype, int32_t op, void* stream,
                           int64_t timeout_ms, shardrec_plugin_status_t* st);
int32_t NcclBroadcast(shardrec_plugin_nccl_t* comm, void* buf, size_t count, int32_t dtype,
                      int32_t root, void* stream, int64_t timeout_ms, shardrec_plugin_status_t* st);
int32_t NcclBarrier(shardrec_plugin_nccl_t* comm, void* stream, int64_t timeout_ms,
                    shardrec_plugin_status_t* st);
int32_t NcclSplit(shardrec_plugin_nccl_t* comm, int32_t color, int32_t key,
                  shardrec_plugin_nccl_t** out, int32_t* rank, int32_t* size,
                  shardrec_plugin_status_t* st);
void NcclAbort(shardrec_plugin_nccl_t* comm);
int32_t NcclAsyncError(shardrec_plugin_nccl_t* comm, shardrec_plugin_status_t* st);

}  // namespace shardrec::cuda_plugin::entry
