// The fake CUDA runtime and NCCL behind FakeDeviceApi(). NCCL communicators, events and streams
// are opaque pointers to the library, so the double defines their structs itself.
#include "tests/impl/cuda_plugin/device_api_double.h"

#include <cstdlib>
#include <cstring>
#include <memory>

// The handle types NCCL and CUDA only forward-declare.
struct ncclComm {
  std::atomic<bool> ready{false};
  std::atomic<bool> aborted{false};
  std::atomic<int> in_progress_once{0};
  int rank = 0;
  int size = 1;
};
struct CUevent_st {
  std::atomic<bool> done{false};
  ncclComm* watched = nullptr;  // the communicator whose work it follows
};

namespace shardrec::testing {
namespace {

thread_local std::string tl_name = "unnamed";
thread_local int tl_device = 0;
thread_local bool tl_context = false;

// The communicator of the collective enqueued last, so that a recorded event follows it.
thread_local ncclComm* tl_last_comm = nullptr;

cudaError_t GetDeviceCount(int* n) {
  *n = 4;
  return cudaSuccess;
}
cudaError_t GetDevice(int* d) {
  *d = tl_device;
  return cudaSuccess;
}
cudaError_t SetDevice(int d) {
  {
    std::lock_guard<std::mutex> lock(Fake().mu);
    Fake().set_device_calls[tl_name].push_back(d);
  }
  tl_device = d;
  tl_context = true;
  return cudaSuccess;
}
bool ThreadHasContext() { return tl_context; }
cudaError_t GetLastError() { return cudaSuccess; }
const char* ErrorName(cudaError_t) { return "cudaErrorFake"; }
const char* ErrorString(cudaError_t) { return "fake CUDA error"; }
cudaError_t DriverVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t RuntimeVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t Malloc(void** p, size_t n) {
  *p = std::malloc(n);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t FreeFn(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t MemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
cudaError_t MemsetAsync(void* d, int v, size_t n, cudaStream_t) {
  std::memset(d, v, n);
  return cudaSuccess;
}
cudaError_t Memset(void* d, int v, size_t n) {
  std::memset(d, v, n);
  return cudaSuccess;
}
// A stream drains when work completes, or once the communicator was aborted (its kernels exit).
cudaError_t StreamQuery(cudaStream_t) {
  if (Fake().work_completes.load()) return cudaSuccess;
  if (tl_last_comm != nullptr && tl_last_comm->aborted.load()) return cudaSuccess;
  return cudaErrorNotReady;
}
// The communicator never creates streams; a caller of the double that does gets a clean error.
cudaError_t StreamCreate(cudaStream_t* s, unsigned int flags) {
  Fake().stream_flags = static_cast<int>(flags);
  *s = nullptr;
  return cudaErrorNotSupported;
}
cudaError_t StreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t EventCreate(cudaEvent_t* e, unsigned int) {
  *e = new CUevent_st();
  Fake().events_created.fetch_add(1);
  return cudaSuccess;
}
cudaError_t EventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t EventRecord(cudaEvent_t e, cudaStream_t) {
  e->done.store(Fake().work_completes.load());
  e->watched = tl_last_comm;
  return cudaSuccess;
}
cudaError_t EventQuery(cudaEvent_t e) {
  if (e->done.load() || Fake().work_completes.load()) return cudaSuccess;
  if (e->watched != nullptr && e->watched->aborted.load()) return cudaSuccess;
  return cudaErrorNotReady;
}

ncclResult_t GetVersion(int* v) {
  *v = 22809;
  return ncclSuccess;
}
ncclResult_t GetUniqueId(ncclUniqueId* id) {
  std::memset(id, 7, sizeof(*id));
  return ncclSuccess;
}
ncclResult_t InitRank(ncclComm_t* comm, int n, ncclUniqueId, int rank, ncclConfig_t*) {
  auto* c = new ncclComm();
  c->rank = rank;
  c->size = n;
  c->ready.store(Fake().init_completes.load());
  *comm = c;
  return ncclInProgress;
}
ncclResult_t Split(ncclComm_t parent, int color, int, ncclComm_t* out, ncclConfig_t*) {
  if (color == NCCL_SPLIT_NOCOLOR) {
    *out = nullptr;
    return ncclSuccess;
  }
  auto* c = new ncclComm();
  c->rank = parent->rank;
  c->size = parent->size;
  c->ready.store(Fake().init_completes.load());
  *out = c;
  return ncclInProgress;
}
ncclResult_t AsyncError(ncclComm_t c, ncclResult_t* state) {
  if (c->aborted.load()) {
    *state = ncclInvalidUsage;
    return ncclSuccess;
  }
  const auto injected = static_cast<ncclResult_t>(Fake().async_error.load());
  if (injected != ncclSuccess) {
    *state = injected;
  } else if (!c->ready.load()) {
    const auto init_error = static_cast<ncclResult_t>(Fake().init_error.load());
    *state = init_error != ncclSuccess ? init_error : ncclInProgress;
  } else if (c->in_progress_once.exchange(0) != 0) {
    *state = ncclInProgress;
  } else {
    *state = ncclSuccess;
  }
  return ncclSuccess;
}
ncclResult_t Finalize(ncclComm_t) {
  Fake().finalizes.fetch_add(1);
  return ncclSuccess;
}
ncclResult_t Destroy(ncclComm_t c) {
  Fake().destroys.fetch_add(1);
  if (tl_last_comm == c) tl_last_comm = nullptr;
  delete c;
  return ncclSuccess;
}
// Aborted communicators outlive the abort (events and streams may still point at them, as
// real ones may still have kernels draining) and are freed at exit.
ncclResult_t Abort(ncclComm_t c) {
  Fake().aborts.fetch_add(1);
  c->aborted.store(true);
  static std::mutex mu;
  static std::vector<std::unique_ptr<ncclComm>> graveyard;
  std::lock_guard<std::mutex> lock(mu);
  graveyard.emplace_back(c);
  return ncclSuccess;
}
ncclResult_t UserRank(ncclComm_t c, int* r) {
  *r = c->rank;
  return ncclSuccess;
}
ncclResult_t Count(ncclComm_t c, int* n) {
  *n = c->size;
  return ncclSuccess;
}
const char* NcclErrorString(ncclResult_t) { return "fake NCCL error"; }
const char* NcclLastError(ncclComm_t) { return "fake last error"; }
ncclResult_t GroupStart() { return ncclSuccess; }
ncclResult_t GroupEnd() { return ncclSuccess; }

ncclResult_t Enqueued(ncclComm_t c) {
  tl_last_comm = c;
  if (Fake().enqueue_in_progress.exchange(false)) {
    c->in_progress_once.store(1);
    return ncclInProgress;
  }
  return ncclSuccess;
}
ncclResult_t AllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t,
                       ncclComm_t c, cudaStream_t) {
  Fake().all_reduces.fetch_add(1);
  // World 1: the sum is the input.
  if (s != r && n > 0) std::memcpy(r, s, n * (t == ncclFloat32 || t == ncclInt32 ? 4 : 8));
  return Enqueued(c);
}
ncclResult_t AllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t c, cudaStream_t) {
  return Enqueued(c);
}
ncclResult_t ReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t c,
                           cudaStream_t) {
  return Enqueued(c);
}
ncclResult_t Reduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t c,
                    cudaStream_t) {
  return Enqueued(c);
}
ncclResult_t Broadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t c,
                       cudaStream_t) {
  return Enqueued(c);
}
ncclResult_t AllToAll(const void*, void*, size_t, ncclDataType_t, ncclComm_t c, cudaStream_t) {
  Fake().all_to_all.fetch_add(1);
  return Enqueued(c);
}
ncclResult_t Send(const void*, size_t, ncclDataType_t, int, ncclComm_t c, cudaStream_t) {
  Fake().sends.fetch_add(1);
  return Enqueued(c);
}
ncclResult_t Recv(void*, size_t, ncclDataType_t, int, ncclComm_t c, cudaStream_t) {
  return Enqueued(c);
}

}  // namespace

void FakeDevices::Reset() {
  init_completes = true;
  init_error = ncclSuccess;
  work_completes = true;
  async_error = ncclSuccess;
  enqueue_in_progress = false;
  aborts = 0;
  finalizes = 0;
  destroys = 0;
  events_created = 0;
  all_to_all = 0;
  sends = 0;
  all_reduces = 0;
  stream_flags = -1;
  std::lock_guard<std::mutex> lock(mu);
  set_device_calls.clear();
}

FakeDevices& Fake() {
  static FakeDevices fake;
  return fake;
}

void FakeThread(const std::string& name, bool has_context, int device) {
  tl_name = name;
  tl_context = has_context;
  tl_device = device;
}

const shardrec::cuda_plugin::DeviceApi& FakeDeviceApi() {
  static const shardrec::cuda_plugin::DeviceApi api = {
      &GetDeviceCount, &GetDevice,     &SetDevice,    &ThreadHasContext,
      &GetLastError,   &ErrorName,     &ErrorString,  &DriverVersion,
      &RuntimeVersion, &Malloc,        &FreeFn,       &Malloc,
      &FreeFn,         &MemcpyAsync,   &MemsetAsync,  &Memset,
      &StreamQuery,    &EventCreate,   &EventDestroy, &EventRecord,
      &EventQuery,     &GetVersion,    &GetUniqueId,  &InitRank,
      &Split,          &AsyncError,    &Finalize,     &Destroy,
      &Abort,          &UserRank,      &Count,        &NcclErrorString,
      &NcclLastError,  &GroupStart,    &GroupEnd,     &AllReduce,
      &AllGather,      &ReduceScatter, &Reduce,       &Broadcast,
      &AllToAll,       &Send,          &Recv,         &StreamCreate,
      &StreamDestroy,
  };
  return api;
}

}  // namespace shardrec::testing
