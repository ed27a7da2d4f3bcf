// An in-process double of the CUDA plugin's NCCL communicator (impl/cuda_plugin/nccl_*), for the
// fake embedding plugin: the ranks of a communicator are threads of one test process, their
// buffers blocks of the fake device memory (fake_device_memory.h), and every collective is a
// rendezvous of all members that moves the bytes between those blocks. It keeps the contract
// of the real plugin's entries (plugin_abi.h, nccl_communicator.h) where a caller can tell:
//   - creation meets by the unique-id bytes, bounded by the timeout (kTimeout when ranks are
//     missing, kInvalidUsage for a rank claimed twice, kInvalidArgument for bad arguments);
//   - collectives of one communicator run in call order, each a rendezvous of every member
//     bounded by the call's timeout (or the communicator's): a member that never arrives gives
//     the waiting members kTimeout and poisons them, after which every call returns
//     kInvalidUsage naming the error (Abort poisons with kRemote); nccl_async_error reports it;
//   - every buffer must be fake device memory (a host pointer is refused, as a GPU would fault);
//   - stream order: a collective runs behind the work queued before it on its stream (with
//     SHARDREC_FAKE_DEFER_COPIES, the deferred copies), as NCCL kernels run on the stream.
// Where it differs, on purpose: a collective completes before its entry returns (the real one
// is asynchronous on the stream and reports a later failure at the next call), so a dead peer
// surfaces at the call that waited for it; and several ranks may share the one fake device (a
// real NCCL communicator wants one GPU per rank).
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/plugin_abi.h"
#include "tests/support/fake_plugins/fake_device_memory.h"

namespace shardrec::fake {

// Provided by fake_embedding_plugin.cc: the fake device's memory, and "the stream has got
// here" (runs the work queued on `stream` before a kernel, as BeforeKernel does).
DeviceMemory& FakeDeviceMemory();
void FakeStreamReached(void* stream);
// The plugin's conversion of a Status to its C boundary.
int32_t FakeReport(const Status& s, shardrec_plugin_status_t* out);

namespace nccl {

// Counters (shardrec_fake_nccl_calls): collectives run (all kinds), payload bytes received into
// device memory, communicators created (including splits) and still alive.
enum : int32_t { kCollectives = 0, kBytes, kCreated, kLive, kNumCounters };
int64_t Counter(int32_t which);

int32_t UniqueId(uint8_t* id, size_t len, shardrec_plugin_status_t* st);
int32_t Create(const uint8_t* id, size_t len, int32_t world, int32_t rank, int32_t device,
               int64_t timeout_ms, shardrec_plugin_nccl_t** out, shardrec_plugin_status_t* st);
void Destroy(shardrec_plugin_nccl_t* comm);
void SetTimeout(shardrec_plugin_nccl_t* comm, int64_t timeout_ms);
int32_t AllReduce(shardrec_plugin_nccl_t* comm, const void* send, void* recv, size_t count,
                  int32_t dtype, int32_t op, void* stream, int64_t timeout_ms,
                  shardrec_plugin_status_t* st);
int32_t AllToAllV(shardrec_plugin_nccl_t* comm, const void* send, const size_t* send_counts,
                  void* recv, const size_t* recv_counts, int32_t dtype, void* stream,
                  int64_t timeout_ms, shardrec_plugin_status_t* st);
int32_t AllGatherV(shardrec_plugin_nccl_t* comm, const void* send, size_t send_count, void* recv,
                   const size_t* recv_counts, int32_t dtype, void* stream, int64_t timeout_ms,
                   shardrec_plugin_status_t* st);
int32_t ReduceScatterV(shardrec_plugin_nccl_t* comm, const void* send, void* recv,
                       const size_t* recv_counts, int32_t dtype, int32_t op, void* stream,
                       int64_t timeout_ms, shardrec_plugin_status_t* st);
int32_t Broadcast(shardrec_plugin_nccl_t* comm, void* buf, size_t count, int32_t dtype,
                  int32_t root, void* stream, int64_t timeout_ms, shardrec_plugin_status_t* st);
int32_t Barrier(shardrec_plugin_nccl_t* comm, void* stream, int64_t timeout_ms,
                shardrec_plugin_status_t* st);
int32_t Split(shardrec_plugin_nccl_t* comm, int32_t color, int32_t key,
              shardrec_plugin_nccl_t** out, int32_t* rank, int32_t* size,
              shardrec_plugin_status_t* st);
void Abort(shardrec_plugin_nccl_t* comm);
int32_t AsyncError(shardrec_plugin_nccl_t* comm, shardrec_plugin_status_t* st);

}  // namespace nccl
}  // namespace shardrec::fake
