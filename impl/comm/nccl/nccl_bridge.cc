// The libshardrec side of the NCCL backend: exchanges the NCCL unique id through the rendezvous
// store and asks the CUDA plugin to build the communicator. No CUDA or NCCL header is used here.
#include <chrono>
#include <vector>

#include "impl/comm/nccl/nccl_backend.h"
#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"
#include "impl/cuda_plugin/plugin_abi.h"

namespace shardrec::comm::nccl {
namespace {

using Clock = std::chrono::steady_clock;

template <typename Fn>
Status Lookup(const char* name, Fn* out) {
  void* sym = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaPluginSymbol(name, &sym));
  *out = reinterpret_cast<Fn>(sym);
  return Status::Ok();
}

Status MakeUniqueId(int device, std::vector<uint8_t>* id) {
  SR_RETURN_IF_ERROR(core::CheckDevice(Device::Cuda(device)));
  cuda_plugin::NcclUniqueIdFn make = nullptr;
  SR_RETURN_IF_ERROR(Lookup(cuda_plugin::kNcclUniqueIdSymbol, &make));
  id->assign(cuda_plugin::kNcclIdBytes, 0);
  Status status;
  make(id->data(), id->size(), &status);
  return status;
}

Status Create(Store* store, const std::string& key_prefix, int world, int rank, int device,
              std::chrono::milliseconds timeout, std::unique_ptr<Communicator>* out) {
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::string key = key_prefix + "/nccl_id";
  std::vector<uint8_t> id;
  if (rank == 0) {
    Status made = MakeUniqueId(device, &id);
    // An empty value tells the other ranks that rank 0 failed, so they fail at once instead of
    // waiting for the timeout.
    Status published = store->Set(key, made.ok() ? id : std::vector<uint8_t>{});
    SR_RETURN_IF_ERROR(made);
    SR_RETURN_IF_ERROR(published);
  } else {
    SR_RETURN_IF_ERROR(core::CheckDevice(Device::Cuda(device)));
    SR_RETURN_IF_ERROR(store->Get(key, timeout, &id));
    if (id.empty()) {
      return Status::Remote("rank 0 could not create the NCCL unique id (see its error)");
    }
    if (id.size() != cuda_plugin::kNcclIdBytes) {
      return Status::Corrupt("the NCCL unique id under store key '", key, "' has ", id.size(),
                             " bytes, expected ", cuda_plugin::kNcclIdBytes);
    }
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) {
    return Status::Timeout("the NCCL unique id exchange used the whole ", timeout.count(),
                           " ms timeout");
  }
  cuda_plugin::NcclCreateFn create = nullptr;
  SR_RETURN_IF_ERROR(Lookup(cuda_plugin::kNcclCreateSymbol, &create));
  Communicator* raw = nullptr;
  Status status;
  create(id.data(), id.size(), world, rank, device, left.count(), &raw, &status);
  SR_RETURN_IF_ERROR(status);
  if (raw == nullptr) return Status::Internal("the CUDA plugin returned no NCCL communicator");
  out->reset(raw);
  return Status::Ok();
}

}  // namespace

Status CreateNcclCommunicator(Store* store, const std::string& key_prefix, int world, int rank,
                              int device, std::chrono::milliseconds timeout,
                              std::unique_ptr<Communicator>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  out->reset();
  if (store == nullptr) return Status::InvalidArgument("store must not be NULL");
  if (world < 1) return Status::InvalidArgument("world size must be >= 1, got ", world);
  if (rank < 0 || rank >= world) {
    return Status::InvalidArgument("rank ", rank, " is outside [0, ", world, ")");
  }
  if (device < 0) return Status::InvalidArgument("CUDA device index must be >= 0, got ", device);
  if (timeout.count() <= 0) {
    return Status::InvalidArgument("timeout must be positive, got ", timeout.count(), " ms");
  }
  Status s = Create(store, key_prefix, world, rank, device, timeout, out);
  if (!s.ok()) return s.WithContext(StrCat("NCCL communicator rank ", rank, " of ", world));
  return s;
}

}  // namespace shardrec::comm::nccl
