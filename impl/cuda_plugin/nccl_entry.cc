// The plugin's NCCL entry points, called by the CUDA-free bridge in impl/comm/nccl: a fresh
// unique id, and a communicator built from one.
#include <cstring>
#include <new>

#include "impl/cuda_plugin/cuda_util.h"
#include "impl/cuda_plugin/nccl_communicator.h"
#include "impl/cuda_plugin/nccl_util.h"
#include "impl/cuda_plugin/plugin_abi.h"

namespace cp = shardrec::cuda_plugin;
using shardrec::Status;
using shardrec::StrCat;

static_assert(sizeof(ncclUniqueId) == cp::kNcclIdBytes, "NCCL unique id size changed");

SHARDREC_CUDA_EXPORT void shardrec_cuda_nccl_unique_id_v1(uint8_t* id, size_t len,
                                                          Status* status) noexcept {
  if (status == nullptr) return;
  try {
    if (id == nullptr || len != cp::kNcclIdBytes) {
      *status = Status::InvalidArgument("NCCL unique id buffer must hold ", cp::kNcclIdBytes,
                                        " bytes, got ", len);
      return;
    }
    ncclUniqueId unique{};
    const ncclResult_t r = ncclGetUniqueId(&unique);
    if (r != ncclSuccess) {
      *status = cp::NcclStatus(r, "ncclGetUniqueId", nullptr);
      return;
    }
    std::memcpy(id, unique.internal, cp::kNcclIdBytes);
    *status = Status::Ok();
  } catch (const std::bad_alloc&) {
    *status = Status::OutOfMemory("out of host memory in ncclGetUniqueId");
  } catch (...) {
    *status = Status::Internal("unexpected exception in ncclGetUniqueId");
  }
}

SHARDREC_CUDA_EXPORT void shardrec_cuda_nccl_comm_create_v1(const uint8_t* id, size_t len,
                                                            int32_t world, int32_t rank,
                                                            int32_t device, int64_t timeout_ms,
                                                            shardrec::comm::Communicator** out,
                                                            Status* status) noexcept {
  if (status == nullptr) return;
  try {
    if (out == nullptr) {
      *status = Status::InvalidArgument("out must not be NULL");
      return;
    }
    *out = nullptr;
    if (id == nullptr || len != cp::kNcclIdBytes) {
      *status = Status::InvalidArgument("NCCL unique id must have ", cp::kNcclIdBytes,
                                        " bytes, got ", len);
      return;
    }
    if (world < 1 || rank < 0 || rank >= world || device < 0 || timeout_ms <= 0) {
      *status =
          Status::InvalidArgument("invalid NCCL communicator arguments: world ", world, ", rank ",
                                  rank, ", device ", device, ", timeout ", timeout_ms, " ms");
      return;
    }
    ncclUniqueId unique{};
    std::memcpy(unique.internal, id, cp::kNcclIdBytes);
    std::unique_ptr<cp::NcclCommunicator> comm;
    *status = cp::NcclCommunicator::Create(unique, world, rank, device,
                                           std::chrono::milliseconds(timeout_ms), &comm);
    if (status->ok()) *out = comm.release();
  } catch (const shardrec::StatusError& e) {
    *status = e.status();
  } catch (const std::bad_alloc&) {
    *status = Status::OutOfMemory("out of host memory creating the NCCL communicator");
  } catch (...) {
    *status = Status::Internal("unexpected exception creating the NCCL communicator");
  }
}

[[maybe_unused]] static constexpr cp::NcclUniqueIdFn kCheckId = &shardrec_cuda_nccl_unique_id_v1;
[[maybe_unused]] static constexpr cp::NcclCreateFn kCheckCreate =
    &shardrec_cuda_nccl_comm_create_v1;
