// C API for communicators (shardrec/comm.h): argument checks, option conversion, handles.
#include "shardrec/comm.h"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/src/comm_create.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "impl/comm/agree.h"
#include "impl/comm/factory.h"
#include "impl/comm/mpi/mpi_communicator.h"
#include "impl/comm/rendezvous/host_identity.h"
#include "impl/comm/rendezvous/stores.h"
#include "impl/core/check.h"
#include "impl/core/numa_binding.h"

static_assert(sizeof(shardrec_unique_id_t) == shardrec::comm::kUniqueIdBytes);
static_assert(SHARDREC_BACKEND_GLOO == static_cast<int>(shardrec::comm::Backend::kGloo));
static_assert(SHARDREC_BACKEND_NCCL == static_cast<int>(shardrec::comm::Backend::kNccl));
static_assert(SHARDREC_REDUCE_AVG == static_cast<int>(shardrec::comm::ReduceOp::kAvg));
static_assert(SHARDREC_REDUCE_MIN == static_cast<int>(shardrec::comm::ReduceOp::kMin));

namespace shardrec::capi {
namespace {

constexpr int32_t kMaxLocalGroup = SHARDREC_LOCAL_GROUP_MAX;

// The longest wait a timeout gives (10^12 ms, about 31.7 years): a larger value (INT64_MAX as
// "for ever") waits this long instead of overflowing the clock's arithmetic, which made such a
// timeout expire at once.
constexpr int64_t kMaxTimeoutMs = 1'000'000'000'000;
std::chrono::milliseconds Bounded(int64_t ms) {
  return std::chrono::milliseconds(std::min(ms, kMaxTimeoutMs));
}

}  // namespace

Status ToOptions(const shardrec_comm_options_t* in, comm::CommOptions* out) {
  *out = comm::CommOptions{};
  if (in == nullptr) return Status::Ok();
  SR_RETURN_IF_ERROR(CheckStructVersion(in->version, SHARDREC_COMM_OPTIONS_VERSION, "options"));
  if (in->timeout_ms < 0)
    return Status::InvalidArgument("options->timeout_ms ", in->timeout_ms, " must be >= 0");
  if (in->backend == SHARDREC_BACKEND_MPI) {
    return Status::InvalidArgument(
        "options->backend is MPI: create MPI communicators with shardrec_comm_create_mpi()");
  }
  if (in->backend < SHARDREC_BACKEND_AUTO || in->backend > SHARDREC_BACKEND_NCCL) {
    return Status::InvalidArgument("options->backend ", in->backend,
                                   " is not a SHARDREC_BACKEND_* value");
  }
  if (in->device_type != SHARDREC_DEVICE_HOST && in->device_type != SHARDREC_DEVICE_CUDA) {
    return Status::InvalidArgument("options->device_type ", in->device_type,
                                   " is not a shardrec_device_type_t value");
  }
  if (in->device_index < 0)
    return Status::InvalidArgument("options->device_index ", in->device_index, " must be >= 0");
  if (in->backend == SHARDREC_BACKEND_NCCL && in->device_type != SHARDREC_DEVICE_CUDA) {
    return Status::InvalidArgument("options->backend is NCCL but options->device_type is not CUDA");
  }
  out->backend = static_cast<comm::Backend>(in->backend);
  out->device =
      in->device_type == SHARDREC_DEVICE_CUDA ? Device::Cuda(in->device_index) : Device::Host();
  out->timeout = Bounded(in->timeout_ms);
  if (in->bind_address != nullptr) {
    out->bind_address = in->bind_address;
    if (!out->bind_address.empty()) {
      comm::net::Endpoint e;
      Status s = comm::net::ParseHost(out->bind_address, &e);
      if (!s.ok()) return s.WithContext("options->bind_address");
    }
  }
  if (in->version >= 2) {
    if (in->store_grace_ms < 0) {
      return Status::InvalidArgument("options->store_grace_ms ", in->store_grace_ms,
                                     " must be >= 0");
    }
    out->store_grace = Bounded(in->store_grace_ms);
  }
  return Status::Ok();
}

namespace {

Status CheckWorld(int32_t world, int32_t rank) {
  if (world < 1) return Status::InvalidArgument("world_size ", world, " must be >= 1");
  if (rank < 0 || rank >= world)
    return Status::InvalidArgument("rank ", rank, " is outside [0, ", world, ")");
  return Status::Ok();
}

Status CheckDType(int32_t dtype) {
  if (!IsValidDType(dtype))
    return Status::InvalidArgument("dtype ", dtype, " is not a shardrec_dtype_t value");
  return Status::Ok();
}

// The raw collectives' sizes come from the caller: agreed first (comm/agree.h), so ranks given
// different sizes fail together instead of corrupting buffers or aborting the process, and a
// rank refusing its own arguments (`local`) still joins the agreement, so its peers fail at once
// instead of waiting out their timeout.
Status AgreeOnRawCall(comm::Communicator& c, const char* what, int64_t kind, size_t count,
                      int32_t dtype, int32_t op_or_root, Status local) {
  if (local.ok() && count > static_cast<size_t>(INT64_MAX))
    local = Status::InvalidArgument("count ", count, " is too large for any buffer");
  // The transports move count x element-size bytes (world x that into an all-gather's recv): a
  // count whose bytes wrap around would move a few bytes and return OK.
  if (local.ok() && IsValidDType(dtype)) {
    const size_t elem = DTypeSize(static_cast<DType>(dtype));
    const size_t most = static_cast<size_t>(INT64_MAX) / elem / static_cast<size_t>(c.Size());
    if (count > most)
      local = Status::InvalidArgument("count ", count, " of ", elem,
                                      "-byte elements is too large for any buffer");
  }
  comm::CallSignature call;
  call.kind = kind;
  call.args = {local.ok() ? static_cast<int64_t>(count) : 0, dtype, op_or_root};
  call.what = what;
  call.sized = kind != 4;
  return comm::AgreeOnCall(c, call, local);
}

}  // namespace

Status Wrap(std::unique_ptr<comm::Communicator> impl, shardrec_comm_t** out, int32_t local_rank,
            int32_t local_size) {
  if ((local_rank < 0 || local_size < 0) && impl->device().is_host()) {
    SR_RETURN_IF_ERROR(comm::DeriveLocalPosition(*impl, &local_rank, &local_size));
  }
  auto* handle = new shardrec_comm;
  handle->impl = std::move(impl);
  handle->local_rank = local_rank;
  handle->local_size = local_size;
  *out = handle;
  return Status::Ok();
}

namespace {

comm::CallOptions StreamOptions(void* stream) {
  comm::CallOptions o;
  o.stream = stream;
  return o;
}

}  // namespace
}  // namespace shardrec::capi

using shardrec::BindToLocalNumaNode;
using shardrec::Status;
using shardrec::capi::AgreeOnRawCall;
using shardrec::capi::CheckDType;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Handle;
using shardrec::capi::NotNull;
namespace comm = shardrec::comm;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_comm_options_init(shardrec_comm_options_t* options,
                                                          uint32_t version) {
  const shardrec_comm_options_t d = SHARDREC_COMM_OPTIONS_INIT;
  return shardrec::capi::InitStruct(
      options, version, SHARDREC_COMM_OPTIONS_VERSION, d, "options",
      {offsetof(shardrec_comm_options_t, store_grace_ms), sizeof(shardrec_comm_options_t)});
}

SHARDREC_API shardrec_status_t shardrec_store_callbacks_init(shardrec_store_callbacks_t* callbacks,
                                                             uint32_t version) {
  const shardrec_store_callbacks_t d = SHARDREC_STORE_CALLBACKS_INIT;
  return shardrec::capi::InitStruct(callbacks, version, SHARDREC_STORE_CALLBACKS_VERSION, d,
                                    "callbacks");
}

SHARDREC_API shardrec_status_t shardrec_comm_unique_id_create(shardrec_unique_id_t* out) {
  return Enter({NotNull(out, "out")}, [&] {
    comm::UniqueId id;
    SR_RETURN_IF_ERROR(comm::CreateUniqueId(&id));
    std::memcpy(out->internal, id.bytes, sizeof(id.bytes));
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_create(shardrec_comm_t** out,
                                                    const shardrec_unique_id_t* id,
                                                    int32_t world_size, int32_t rank,
                                                    const shardrec_comm_options_t* options) {
  return Enter({NotNull(out, "out")}, [&] {
    *out = nullptr;
    SR_RETURN_IF_ERROR(CheckNotNull(id, "id"));
    SR_RETURN_IF_ERROR(shardrec::capi::CheckWorld(world_size, rank));
    comm::CommOptions opts;
    SR_RETURN_IF_ERROR(shardrec::capi::ToOptions(options, &opts));
    comm::UniqueId uid;
    std::memcpy(uid.bytes, id->internal, sizeof(uid.bytes));
    std::unique_ptr<comm::Communicator> impl;
    SR_RETURN_IF_ERROR(comm::CreateCommunicatorFromUniqueId(uid, world_size, rank, opts, &impl));
    return shardrec::capi::Wrap(std::move(impl), out);
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_create_with_store(
    shardrec_comm_t** out, const shardrec_store_callbacks_t* callbacks, int32_t world_size,
    int32_t rank, const shardrec_comm_options_t* options) {
  return Enter({NotNull(out, "out")}, [&] {
    *out = nullptr;
    SR_RETURN_IF_ERROR(CheckNotNull(callbacks, "callbacks"));
    SR_RETURN_IF_ERROR(shardrec::capi::CheckStructVersion(
        callbacks->version, SHARDREC_STORE_CALLBACKS_VERSION, "callbacks"));
    if (callbacks->set == nullptr)
      return Status::InvalidArgument("callbacks->set must not be NULL");
    if (callbacks->get == nullptr)
      return Status::InvalidArgument("callbacks->get must not be NULL");
    SR_RETURN_IF_ERROR(shardrec::capi::CheckWorld(world_size, rank));
    comm::CommOptions opts;
    SR_RETURN_IF_ERROR(shardrec::capi::ToOptions(options, &opts));
    comm::StoreCallbacks cb;
    cb.set = callbacks->set;
    cb.get = callbacks->get;
    cb.wait = callbacks->wait;
    cb.payload = callbacks->payload;
    std::unique_ptr<comm::Communicator> impl;
    SR_RETURN_IF_ERROR(comm::CreateCommunicator(std::make_shared<comm::CallbackStore>(cb),
                                                "shardrec", world_size, rank, opts, &impl));
    return shardrec::capi::Wrap(std::move(impl), out);
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_create_local_group(
    shardrec_comm_t** comms_out, int32_t n, const shardrec_comm_options_t* options) {
  return Enter({NotNull(comms_out, "comms_out")}, [&] {
    if (n < 1 || n > shardrec::capi::kMaxLocalGroup) {
      return Status::InvalidArgument("n ", n, " must be in [1, ", shardrec::capi::kMaxLocalGroup,
                                     "]");
    }
    comm::CommOptions opts;
    SR_RETURN_IF_ERROR(shardrec::capi::ToOptions(options, &opts));
    std::vector<std::unique_ptr<comm::Communicator>> group;
    SR_RETURN_IF_ERROR(comm::CreateLocalGroup(n, opts, &group));
    std::vector<std::unique_ptr<shardrec_comm>> handles;
    for (size_t r = 0; r < group.size(); ++r) {
      handles.push_back(std::make_unique<shardrec_comm>());
      handles.back()->impl = std::move(group[r]);
      handles.back()->local_rank = static_cast<int32_t>(r);  // threads of this process
      handles.back()->local_size = n;
    }
    for (int32_t i = 0; i < n; ++i) comms_out[i] = handles[static_cast<size_t>(i)].release();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_split(shardrec_comm_t** out,
                                                   shardrec_comm_t* comm_handle, int32_t color,
                                                   int32_t key) {
  return Enter({Handle(comm_handle, "comm")}, [&] {
    // A NULL out still takes part in the split's first exchange (as a refusal), so the other
    // members fail at once instead of waiting out their timeout.
    if (out == nullptr) return comm_handle->impl->Split(color, key, nullptr);
    *out = nullptr;
    std::unique_ptr<comm::Communicator> impl;
    SR_RETURN_IF_ERROR(comm_handle->impl->Split(color, key, &impl));
    if (!impl) return Status::Ok();
    return shardrec::capi::Wrap(std::move(impl), out);
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_rank(int32_t* out,
                                                  const shardrec_comm_t* comm_handle) {
  return Enter({NotNull(out, "out"), Handle(comm_handle, "comm")}, [&] {
    *out = comm_handle->impl->Rank();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_size(int32_t* out,
                                                  const shardrec_comm_t* comm_handle) {
  return Enter({NotNull(out, "out"), Handle(comm_handle, "comm")}, [&] {
    *out = comm_handle->impl->Size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_set_timeout(shardrec_comm_t* comm_handle,
                                                         int64_t timeout_ms) {
  return Enter({Handle(comm_handle, "comm")}, [&] {
    if (timeout_ms <= 0) return Status::InvalidArgument("timeout_ms ", timeout_ms, " must be > 0");
    comm_handle->impl->set_timeout(shardrec::capi::Bounded(timeout_ms));
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_abort(shardrec_comm_t* comm_handle) {
  return Enter({Handle(comm_handle, "comm")}, [&] {
    comm_handle->impl->Abort();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_async_error(const shardrec_comm_t* comm_handle) {
  return Enter({Handle(comm_handle, "comm")}, [&] { return comm_handle->impl->AsyncError(); });
}

SHARDREC_API void shardrec_comm_destroy(shardrec_comm_t* comm_handle) {
  (void)Enter({}, [&] {
    delete comm_handle;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_allreduce(shardrec_comm_t* comm_handle,
                                                       const void* send, void* recv, size_t count,
                                                       int32_t dtype, int32_t op, void* stream) {
  return Enter({Handle(comm_handle, "comm")}, [&] {
    const Status local = [&]() -> Status {
      SR_RETURN_IF_ERROR(CheckDType(dtype));
      if (op < SHARDREC_REDUCE_SUM || op > SHARDREC_REDUCE_MIN)
        return Status::InvalidArgument("op ", op, " is not a SHARDREC_REDUCE_* value");
      if (count > 0 && send == nullptr)
        return Status::InvalidArgument("send must not be NULL when count is ", count);
      if (count > 0 && recv == nullptr)
        return Status::InvalidArgument("recv must not be NULL when count is ", count);
      return Status::Ok();
    }();
    SR_RETURN_IF_ERROR(AgreeOnRawCall(*comm_handle->impl, "allreduce", 1, count, dtype, op, local));
    return comm_handle->impl->AllReduce(send, recv, count, static_cast<shardrec::DType>(dtype),
                                        static_cast<comm::ReduceOp>(op),
                                        shardrec::capi::StreamOptions(stream));
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_broadcast(shardrec_comm_t* comm_handle, void* buf,
                                                       size_t count, int32_t dtype, int32_t root,
                                                       void* stream) {
  return Enter({Handle(comm_handle, "comm")}, [&] {
    const Status local = [&]() -> Status {
      SR_RETURN_IF_ERROR(CheckDType(dtype));
      const int size = comm_handle->impl->Size();
      if (root < 0 || root >= size)
        return Status::InvalidArgument("root ", root, " is outside [0, ", size, ")");
      if (count > 0 && buf == nullptr)
        return Status::InvalidArgument("buf must not be NULL when count is ", count);
      return Status::Ok();
    }();
    SR_RETURN_IF_ERROR(
        AgreeOnRawCall(*comm_handle->impl, "broadcast", 2, count, dtype, root, local));
    return comm_handle->impl->Broadcast(buf, count, static_cast<shardrec::DType>(dtype), root,
                                        shardrec::capi::StreamOptions(stream));
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_allgather(shardrec_comm_t* comm_handle,
                                                       const void* send, void* recv, size_t count,
                                                       int32_t dtype, void* stream) {
  return Enter({Handle(comm_handle, "comm")}, [&] {
    const Status local = [&]() -> Status {
      SR_RETURN_IF_ERROR(CheckDType(dtype));
      if (count > 0 && send == nullptr)
        return Status::InvalidArgument("send must not be NULL when count is ", count);
      if (count > 0 && recv == nullptr)
        return Status::InvalidArgument("recv must not be NULL when count is ", count);
      if (count > 0 && send == recv)
        return Status::InvalidArgument("recv must not be the same buffer as send");
      return Status::Ok();
    }();
    SR_RETURN_IF_ERROR(AgreeOnRawCall(*comm_handle->impl, "allgather", 3, count, dtype, 0, local));
    const size_t size = static_cast<size_t>(comm_handle->impl->Size());
    std::vector<size_t> counts(size, count);
    return comm_handle->impl->AllGatherV(send, count, recv, counts,
                                         static_cast<shardrec::DType>(dtype),
                                         shardrec::capi::StreamOptions(stream));
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_barrier(shardrec_comm_t* comm_handle) {
  return Enter({Handle(comm_handle, "comm")}, [&] {
    // Over a host communicator the agreement's all-reduce is itself the barrier: every rank
    // contributes before any returns.
    if (comm_handle->impl->device().is_host())
      return AgreeOnRawCall(*comm_handle->impl, "barrier", 4, 0, 0, 0, Status::Ok());
    return comm_handle->impl->Barrier();
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_create_mpi(shardrec_comm_t** out,
                                                        int64_t mpi_comm_fortran,
                                                        const shardrec_comm_options_t* options) {
  return Enter({NotNull(out, "out")}, [&] {
    *out = nullptr;
    comm::CommOptions opts;
    if (options != nullptr) {
      shardrec_comm_options_t o = *options;
      if (o.backend != SHARDREC_BACKEND_AUTO && o.backend != SHARDREC_BACKEND_MPI) {
        return Status::InvalidArgument("options->backend ", o.backend,
                                       " must be SHARDREC_BACKEND_MPI or AUTO here");
      }
      o.backend = SHARDREC_BACKEND_AUTO;
      o.bind_address = nullptr;
      SR_RETURN_IF_ERROR(shardrec::capi::ToOptions(&o, &opts));
    }
    std::unique_ptr<comm::Communicator> impl;
    SR_RETURN_IF_ERROR(
        comm::mpi::CreateMpiCommunicator(mpi_comm_fortran, opts.device, opts.timeout, &impl));
    return shardrec::capi::Wrap(std::move(impl), out);
  });
}

SHARDREC_API shardrec_status_t
shardrec_comm_create_from_env(shardrec_comm_t** out, const shardrec_comm_options_t* options) {
  return Enter({NotNull(out, "out")}, [&] {
    *out = nullptr;
    comm::CommOptions opts;
    SR_RETURN_IF_ERROR(shardrec::capi::ToOptions(options, &opts));
    std::unique_ptr<comm::Communicator> impl;
    comm::LaunchEnv launch;
    SR_RETURN_IF_ERROR(comm::CreateCommunicatorFromEnv(comm::ProcessEnv(), opts, &impl, &launch));
    const bool known = launch.local_rank >= 0 && launch.local_size > 0;
    return shardrec::capi::Wrap(std::move(impl), out, known ? launch.local_rank : -1,
                                known ? launch.local_size : -1);
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_local_rank(int32_t* out,
                                                        const shardrec_comm_t* comm_handle) {
  return Enter({NotNull(out, "out"), Handle(comm_handle, "comm")}, [&] {
    if (comm_handle->local_rank < 0) {
      return Status::Unsupported(
          "the local rank of a device communicator is known only when it "
          "was created from a launcher's environment");
    }
    *out = comm_handle->local_rank;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_local_size(int32_t* out,
                                                        const shardrec_comm_t* comm_handle) {
  return Enter({NotNull(out, "out"), Handle(comm_handle, "comm")}, [&] {
    if (comm_handle->local_size < 0) {
      return Status::Unsupported(
          "the local size of a device communicator is known only when it "
          "was created from a launcher's environment");
    }
    *out = comm_handle->local_size;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_comm_bind_local_numa(int32_t* out,
                                                             shardrec_comm_t* comm_handle) {
  return Enter({Handle(comm_handle, "comm")}, [&] {
    if (!comm_handle->impl->device().is_host()) {
      return Status::Unsupported("NUMA binding is for host communicators only");
    }
    return BindToLocalNumaNode(comm_handle->local_rank, comm_handle->local_size, out);
  });
}

}  // extern "C"
