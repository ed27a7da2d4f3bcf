// The plugin's NCCL entries: argument checks that need no NCCL, then the communicator. Plain C
// in, plain C out; nothing thrown crosses.
#include "impl/cuda_plugin/nccl_entry.h"

#include <cstring>
#include <span>

#include "impl/cuda_plugin/cuda_util.h"
#include "impl/cuda_plugin/nccl_communicator.h"
#include "impl/cuda_plugin/nccl_util.h"
#include "impl/cuda_plugin/plugin_status.h"

namespace shardrec::cuda_plugin::entry {
namespace {

static_assert(sizeof(ncclUniqueId) == SHARDREC_PLUGIN_NCCL_ID_BYTES, "NCCL unique id size changed");

NcclCommunicator* From(shardrec_plugin_nccl_t* comm) {
  return reinterpret_cast<NcclCommunicator*>(comm);
}

shardrec_plugin_nccl_t* To(NcclCommunicator* comm) {
  return reinterpret_cast<shardrec_plugin_nccl_t*>(comm);
}

comm::CallOptions Options(void* stream, int64_t timeout_ms) {
  comm::CallOptions o;
  o.stream = stream;
  o.timeout = std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 0);
  return o;
}

Status CheckComm(shardrec_plugin_nccl_t* comm) {
  if (comm == nullptr) return Status::InvalidArgument("NCCL communicator must not be NULL");
  return Status::Ok();
}

Status CheckCounts(const size_t* counts, const char* what) {
  if (counts == nullptr) return Status::InvalidArgument(what, " must not be NULL");
  return Status::Ok();
}

}  // namespace

int32_t NcclUniqueId(uint8_t* id, size_t len, shardrec_plugin_status_t* st) {
  return Reported(st, "ncclGetUniqueId", [&]() -> Status {
    if (id == nullptr || len != SHARDREC_PLUGIN_NCCL_ID_BYTES) {
      return Status::InvalidArgument("NCCL unique id buffer must hold ",
                                     SHARDREC_PLUGIN_NCCL_ID_BYTES, " bytes, got ", len);
    }
    const DeviceApi& api = RealDeviceApi();
    ncclUniqueId unique{};
    const ncclResult_t r = api.NcclGetUniqueId(&unique);
    if (r != ncclSuccess) return NcclStatus(api, r, "ncclGetUniqueId", nullptr);
    std::memcpy(id, unique.internal, SHARDREC_PLUGIN_NCCL_ID_BYTES);
    return Status::Ok();
  });
}

int32_t NcclCreate(const uint8_t* id, size_t len, int32_t world, int32_t rank, int32_t device,
                   int64_t timeout_ms, shardrec_plugin_nccl_t** out, shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL communicator creation", [&]() -> Status {
    if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
    *out = nullptr;
    if (id == nullptr || len != SHARDREC_PLUGIN_NCCL_ID_BYTES) {
      return Status::InvalidArgument("NCCL unique id must have ", SHARDREC_PLUGIN_NCCL_ID_BYTES,
                                     " bytes, got ", len);
    }
    if (world < 1 || rank < 0 || rank >= world || device < 0 || timeout_ms <= 0) {
      return Status::InvalidArgument("invalid NCCL communicator arguments: world ", world,
                                     ", rank ", rank, ", device ", device, ", timeout ", timeout_ms,
                                     " ms");
    }
    ncclUniqueId unique{};
    std::memcpy(unique.internal, id, SHARDREC_PLUGIN_NCCL_ID_BYTES);
    std::unique_ptr<NcclCommunicator> comm;
    SR_RETURN_IF_ERROR(NcclCommunicator::Create(RealDeviceApi(), unique, world, rank, device,
                                                std::chrono::milliseconds(timeout_ms), &comm));
    *out = To(comm.release());
    return Status::Ok();
  });
}

void NcclDestroy(shardrec_plugin_nccl_t* comm) {
  try {
    delete From(comm);
  } catch (...) {
    // A destructor that throws has nowhere to report; the communicator is gone either way.
  }
}

void NcclSetTimeout(shardrec_plugin_nccl_t* comm, int64_t timeout_ms) {
  if (comm != nullptr && timeout_ms > 0) {
    From(comm)->set_timeout(std::chrono::milliseconds(timeout_ms));
  }
}

int32_t NcclAllReduce(shardrec_plugin_nccl_t* comm, const void* send, void* recv, size_t count,
                      int32_t dtype, int32_t op, void* stream, int64_t timeout_ms,
                      shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL allreduce", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckComm(comm));
    return From(comm)->AllReduce(send, recv, count, static_cast<DType>(dtype),
                                 static_cast<comm::ReduceOp>(op), Options(stream, timeout_ms));
  });
}

int32_t NcclAllToAllV(shardrec_plugin_nccl_t* comm, const void* send, const size_t* send_counts,
                      void* recv, const size_t* recv_counts, int32_t dtype, void* stream,
                      int64_t timeout_ms, shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL alltoallv", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckComm(comm));
    SR_RETURN_IF_ERROR(CheckCounts(send_counts, "send_counts"));
    SR_RETURN_IF_ERROR(CheckCounts(recv_counts, "recv_counts"));
    const auto n = static_cast<size_t>(From(comm)->Size());
    return From(comm)->AllToAllV(send, std::span<const size_t>(send_counts, n), recv,
                                 std::span<const size_t>(recv_counts, n), static_cast<DType>(dtype),
                                 Options(stream, timeout_ms));
  });
}

int32_t NcclAllGatherV(shardrec_plugin_nccl_t* comm, const void* send, size_t send_count,
                       void* recv, const size_t* recv_counts, int32_t dtype, void* stream,
                       int64_t timeout_ms, shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL allgatherv", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckComm(comm));
    SR_RETURN_IF_ERROR(CheckCounts(recv_counts, "recv_counts"));
    const auto n = static_cast<size_t>(From(comm)->Size());
    return From(comm)->AllGatherV(send, send_count, recv, std::span<const size_t>(recv_counts, n),
                                  static_cast<DType>(dtype), Options(stream, timeout_ms));
  });
}

int32_t NcclReduceScatterV(shardrec_plugin_nccl_t* comm, const void* send, void* recv,
                           const size_t* recv_counts, int32_t dtype, int32_t op, void* stream,
                           int64_t timeout_ms, shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL reducescatterv", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckComm(comm));
    SR_RETURN_IF_ERROR(CheckCounts(recv_counts, "recv_counts"));
    const auto n = static_cast<size_t>(From(comm)->Size());
    return From(comm)->ReduceScatterV(send, recv, std::span<const size_t>(recv_counts, n),
                                      static_cast<DType>(dtype), static_cast<comm::ReduceOp>(op),
                                      Options(stream, timeout_ms));
  });
}

int32_t NcclBroadcast(shardrec_plugin_nccl_t* comm, void* buf, size_t count, int32_t dtype,
                      int32_t root, void* stream, int64_t timeout_ms,
                      shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL broadcast", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckComm(comm));
    return From(comm)->Broadcast(buf, count, static_cast<DType>(dtype), root,
                                 Options(stream, timeout_ms));
  });
}

int32_t NcclBarrier(shardrec_plugin_nccl_t* comm, void* stream, int64_t timeout_ms,
                    shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL barrier", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckComm(comm));
    return From(comm)->Barrier(Options(stream, timeout_ms));
  });
}

int32_t NcclSplit(shardrec_plugin_nccl_t* comm, int32_t color, int32_t key,
                  shardrec_plugin_nccl_t** out, int32_t* rank, int32_t* size,
                  shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL split", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckComm(comm));
    if (out == nullptr || rank == nullptr || size == nullptr) {
      return Status::InvalidArgument("split outputs must not be NULL");
    }
    *out = nullptr;
    *rank = -1;
    *size = 0;
    std::unique_ptr<comm::Communicator> child;
    SR_RETURN_IF_ERROR(From(comm)->Split(color, key, &child));
    if (child != nullptr) {
      *rank = child->Rank();
      *size = child->Size();
      // Split of a NcclCommunicator yields a NcclCommunicator.
      *out = To(static_cast<NcclCommunicator*>(child.release()));
    }
    return Status::Ok();
  });
}

void NcclAbort(shardrec_plugin_nccl_t* comm) {
  if (comm != nullptr) From(comm)->Abort();
}

int32_t NcclAsyncError(shardrec_plugin_nccl_t* comm, shardrec_plugin_status_t* st) {
  return Reported(st, "NCCL async error query", [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckComm(comm));
    return From(comm)->AsyncError();
  });
}

}  // namespace shardrec::cuda_plugin::entry
