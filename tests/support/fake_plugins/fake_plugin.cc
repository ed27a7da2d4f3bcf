// Stand-ins for libshardrec_cuda.so, one per FAKE_VARIANT, so the loader's checks and the C
// boundary are tested without CUDA: a wrong ABI, a table with a hole, an old driver, a
// mismatched NCCL, a "good" plugin whose runtime is host memory with two pretend devices (and no
// dense or embedding kernels), and a table of another build's size.
#include <cstdint>
#include <cstring>

#include "impl/core/plugin_abi.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kAbiWrong = 1, kHole = 2, kOldDriver = 3, kOldNccl = 4, kGood = 5, kSize = 6;

int32_t Fail(shardrec_plugin_status_t* st, int32_t code, const char* text) {
  if (st != nullptr) {
    st->code = code;
    std::strncpy(st->message, text, sizeof(st->message) - 1);
    st->message[sizeof(st->message) - 1] = '\0';
  }
  return code;
}
int32_t Ok(shardrec_plugin_status_t* st) {
  if (st != nullptr) {
    st->code = 0;
    st->message[0] = '\0';
  }
  return 0;
}

constexpr int32_t kInvalidArgument = -2;
constexpr int32_t kCuda = -5;
constexpr int32_t kTimeout = -7;

const char* Path() { return "/fake/libshardrec_cuda.so"; }
void Versions(shardrec_plugin_versions_t* v) {
  v->built_cuda_runtime = 13000;
  v->built_nccl = 22809;
  v->cuda_driver = FAKE_VARIANT == kOldDriver ? 12040 : 13010;
  v->cuda_runtime = 13000;
  v->nccl = FAKE_VARIANT == kOldNccl ? 22304 : 22809;
}
int32_t DeviceCount(int32_t* n, shardrec_plugin_status_t* st) {
  *n = 2;
  return Ok(st);
}
int32_t Alloc(int32_t device, size_t bytes, void** out, shardrec_plugin_status_t* st) {
  if (device < 0 || device > 1) return Fail(st, kInvalidArgument, "fake: bad device");
  *out = bytes == 0 ? nullptr : new uint8_t[bytes];
  return Ok(st);
}
int32_t Free(int32_t, void* p, shardrec_plugin_status_t* st) {
  delete[] static_cast<uint8_t*>(p);
  return Ok(st);
}
int32_t HostAlloc(size_t bytes, void** out, shardrec_plugin_status_t* st) {
  return Alloc(0, bytes, out, st);
}
int32_t HostFree(void* p, shardrec_plugin_status_t* st) { return Free(0, p, st); }
int32_t Memcpy(int32_t, void* dst, const void* src, size_t bytes, int32_t, void*,
               shardrec_plugin_status_t* st) {
  std::memcpy(dst, src, bytes);
  return Ok(st);
}
int32_t Memset(int32_t, void* dst, int32_t v, size_t bytes, void*, shardrec_plugin_status_t* st) {
  std::memset(dst, v, bytes);
  return Ok(st);
}
// Reports an error whose message is longer than the status buffer: it must arrive truncated
// and terminated, with its code.
int32_t StreamWait(int32_t, void*, int64_t, shardrec_plugin_status_t* st) {
  char text[4096];
  std::memset(text, 'x', sizeof(text) - 1);
  std::memcpy(text, "fake stream error:", 18);
  text[sizeof(text) - 1] = '\0';
  return Fail(st, kTimeout, text);
}
int32_t NcclUnique(uint8_t*, size_t, shardrec_plugin_status_t* st) {
  return Fail(st, kCuda, "fake: no NCCL here");
}
int32_t NcclCreate(const uint8_t*, size_t, int32_t, int32_t, int32_t, int64_t,
                   shardrec_plugin_nccl_t**, shardrec_plugin_status_t* st) {
  return Fail(st, kCuda, "fake: no NCCL here");
}
void NcclDestroy(shardrec_plugin_nccl_t*) {}
void NcclSetTimeout(shardrec_plugin_nccl_t*, int64_t) {}
int32_t AllReduce(shardrec_plugin_nccl_t*, const void*, void*, size_t, int32_t, int32_t, void*,
                  int64_t, shardrec_plugin_status_t* st) {
  return Fail(st, kCuda, "fake");
}
int32_t AllToAllV(shardrec_plugin_nccl_t*, const void*, const size_t*, void*, const size_t*,
                  int32_t, void*, int64_t, shardrec_plugin_status_t* st) {
  return Fail(st, kCuda, "fake");
}
int32_t AllGatherV(shardrec_plugin_nccl_t*, const void*, size_t, void*, const size_t*, int32_t,
                   void*, int64_t, shardrec_plugin_status_t* st) {
  return Fail(st, kCuda, "fake");
}
int32_t ReduceScatterV(shardrec_plugin_nccl_t*, const void*, void*, const size_t*, int32_t, int32_t,
                       void*, int64_t, shardrec_plugin_status_t* st) {
  return Fail(st, kCuda, "fake");
}
int32_t Broadcast(shardrec_plugin_nccl_t*, void*, size_t, int32_t, int32_t, void*, int64_t,
                  shardrec_plugin_status_t* st) {
  return Fail(st, kCuda, "fake");
}
int32_t Barrier(shardrec_plugin_nccl_t*, void*, int64_t, shardrec_plugin_status_t* st) {
  return Fail(st, kCuda, "fake");
}
int32_t Split(shardrec_plugin_nccl_t*, int32_t, int32_t, shardrec_plugin_nccl_t**, int32_t*,
              int32_t*, shardrec_plugin_status_t* st) {
  return Fail(st, kCuda, "fake");
}
void Abort(shardrec_plugin_nccl_t*) {}
int32_t AsyncError(shardrec_plugin_nccl_t*, shardrec_plugin_status_t* st) { return Ok(st); }
// One pretend stream for every caller: the fake's copies are synchronous.
int32_t StreamCreate(int32_t, void** stream, shardrec_plugin_status_t* st) {
  *stream = nullptr;
  return Ok(st);
}
int32_t StreamDestroy(int32_t, void*, shardrec_plugin_status_t* st) { return Ok(st); }
int32_t StreamWaitStream(int32_t, void*, void*, shardrec_plugin_status_t* st) { return Ok(st); }
int32_t HostAllocOn(int32_t device, size_t bytes, void** out, shardrec_plugin_status_t* st) {
  return Alloc(device, bytes, out, st);
}

// The runtime entries only: the dense and embedding kernels stay NULL, so the loader accepts it
// and only those calls refuse it, naming the entry. kSize reports another build's table size.
shardrec_cuda_plugin_table_t MakeTable() {
  shardrec_cuda_plugin_table_t t = {
      static_cast<uint32_t>(sizeof(shardrec_cuda_plugin_table_t) - (FAKE_VARIANT == kSize ? 8 : 0)),
      SHARDREC_CUDA_PLUGIN_ABI_VERSION,
      &Path,
      &Versions,
      &DeviceCount,
      &Alloc,
      &Free,
      &HostAlloc,
      &HostFree,
      &Memcpy,
      &Memset,
      &StreamWait,
      &NcclUnique,
      &NcclCreate,
      &NcclDestroy,
      &NcclSetTimeout,
      &AllReduce,
      &AllToAllV,
      &AllGatherV,
      &ReduceScatterV,
      &Broadcast,
      &Barrier,
      FAKE_VARIANT == kHole ? nullptr : &Split,
      &Abort,
      &AsyncError,
  };
  t.stream_create = &StreamCreate;
  t.stream_destroy = &StreamDestroy;
  t.stream_wait_stream = &StreamWaitStream;
  t.host_alloc_on = &HostAllocOn;
  return t;
}

const shardrec_cuda_plugin_table_t kTable = MakeTable();

}  // namespace

FAKE_EXPORT uint32_t shardrec_cuda_plugin_abi_version() {
  return FAKE_VARIANT == kAbiWrong ? 99u : SHARDREC_CUDA_PLUGIN_ABI_VERSION;
}

FAKE_EXPORT const shardrec_cuda_plugin_table_t* shardrec_cuda_plugin_table(uint32_t abi) {
  return abi == SHARDREC_CUDA_PLUGIN_ABI_VERSION ? &kTable : nullptr;
}

static_assert(kGood == 5 && kSize == 6, "variant numbers are part of the CMake file");
