// A stand-in for libshardrec_cuda.so whose "device" is host memory and whose linear_forward /
// linear_backward follow the table's contract (plugin_abi.h) with naive loops, so DeviceMlp's
// orchestration (buffers, the dy-is-dz and input-ReLU flags, the ReLU mask hand-over, gradient
// accumulation, ready order) is tested without a GPU. The cuBLASLt execution itself is covered
// only by lt_linear_gpu_test on a GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "impl/core/plugin_abi.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

int32_t Ok(shardrec_plugin_status_t* st) {
  if (st != nullptr) {
    st->code = 0;
    st->message[0] = '\0';
  }
  return 0;
}
int32_t Fail(shardrec_plugin_status_t* st, const char* text) {
  if (st != nullptr) {
    st->code = -5;
    std::strncpy(st->message, text, sizeof(st->message) - 1);
    st->message[sizeof(st->message) - 1] = '\0';
  }
  return -5;
}

const char* Path() { return "/fake/dense/libshardrec_cuda.so"; }
void Versions(shardrec_plugin_versions_t* v) {
  v->built_cuda_runtime = 13000;
  v->built_nccl = 22809;
  v->cuda_driver = 13010;
  v->cuda_runtime = 13000;
  v->nccl = 22809;
}
int32_t DeviceCount(int32_t* n, shardrec_plugin_status_t* st) {
  *n = 1;
  return Ok(st);
}
int32_t Alloc(int32_t, size_t bytes, void** out, shardrec_plugin_status_t* st) {
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
  if (bytes > 0) std::memmove(dst, src, bytes);
  return Ok(st);
}
int32_t Memset(int32_t, void* dst, int32_t v, size_t bytes, void*, shardrec_plugin_status_t* st) {
  if (bytes > 0) std::memset(dst, v, bytes);
  return Ok(st);
}
int32_t StreamWait(int32_t, void*, int64_t, shardrec_plugin_status_t* st) { return Ok(st); }
int32_t NcclUnique(uint8_t*, size_t, shardrec_plugin_status_t* st) { return Fail(st, "fake"); }
int32_t NcclCreate(const uint8_t*, size_t, int32_t, int32_t, int32_t, int64_t,
                   shardrec_plugin_nccl_t**, shardrec_plugin_status_t* st) {
  return Fail(st, "fake");
}
void NcclDestroy(shardrec_plugin_nccl_t*) {}
void NcclSetTimeout(shardrec_plugin_nccl_t*, int64_t) {}
int32_t AllReduce(shardrec_plugin_nccl_t*, const void*, void*, size_t, int32_t, int32_t, void*,
                  int64_t, shardrec_plugin_status_t* st) {
  return Fail(st, "fake");
}
int32_t AllToAllV(shardrec_plugin_nccl_t*, const void*, const size_t*, void*, const size_t*,
                  int32_t, void*, int64_t, shardrec_plugin_status_t* st) {
  return Fail(st, "fake");
}
int32_t AllGatherV(shardrec_plugin_nccl_t*, const void*, size_t, void*, const size_t*, int32_t,
                   void*, int64_t, shardrec_plugin_status_t* st) {
  return Fail(st, "fake");
}
int32_t ReduceScatterV(shardrec_plugin_nccl_t*, const void*, void*, const size_t*, int32_t, int32_t,
                       void*, int64_t, shardrec_plugin_status_t* st) {
  return Fail(st, "fake");
}
int32_t Broadcast(shardrec_plugin_nccl_t*, void*, size_t, int32_t, int32_t, void*, int64_t,
                  shardrec_plugin_status_t* st) {
  return Fail(st, "fake");
}
int32_t Barrier(shardrec_plugin_nccl_t*, void*, int64_t, shardrec_plugin_status_t* st) {
  return Fail(st, "fake");
}
int32_t Split(shardrec_plugin_nccl_t*, int32_t, int32_t, shardrec_plugin_nccl_t**, int32_t*,
              int32_t*, shardrec_plugin_status_t* st) {
  return Fail(st, "fake");
}
void Abort(shardrec_plugin_nccl_t*) {}
int32_t AsyncError(shardrec_plugin_nccl_t*, shardrec_plugin_status_t* st) { return Ok(st); }

// The mask layout of lt::ReluAuxLayout: one bit per output element, column (sample) j starting
// at bit j * ld, ld = rows rounded up to 128.
int64_t MaskLd(int64_t rows) { return (rows + 127) / 128 * 128; }
void SetBit(void* aux, int64_t bit, bool v) {
  auto* b = static_cast<uint8_t*>(aux);
  if (v) {
    b[bit / 8] = static_cast<uint8_t>(b[bit / 8] | (1u << (bit % 8)));
  } else {
    b[bit / 8] = static_cast<uint8_t>(b[bit / 8] & ~(1u << (bit % 8)));
  }
}
bool GetBit(const void* aux, int64_t bit) {
  return (static_cast<const uint8_t*>(aux)[bit / 8] >> (bit % 8)) & 1u;
}

int32_t LinearForward(int32_t, const shardrec_plugin_linear_t* a, const float* w, const float* b,
                      const float* x, float* y, void* aux, int32_t* aux_written, void*,
                      shardrec_plugin_status_t* st) {
  const int64_t ld = MaskLd(a->out);
  for (int64_t r = 0; r < a->batch; ++r) {
    for (int64_t o = 0; o < a->out; ++o) {
      double z = b[o];
      for (int64_t i = 0; i < a->in; ++i) z += double(x[r * a->in + i]) * w[o * a->in + i];
      float v = static_cast<float>(z);
      if (a->activation == 1) {
        v = v > 0.0f ? v : 0.0f;
        if (aux != nullptr) SetBit(aux, r * ld + o, v > 0.0f);
      } else if (a->activation == 2) {
        v = 1.0f / (1.0f + std::exp(-v));
      }
      y[r * a->out + o] = v;
    }
  }
  *aux_written = a->activation == 1 && aux != nullptr ? 1 : 0;
  return Ok(st);
}

int32_t LinearBackward(int32_t, const shardrec_plugin_linear_t* a, const float* w, const float* x,
                       const float* y, const float* dy, const void* input_aux, float* dw, float* db,
                       float* dx, void*, shardrec_plugin_status_t* st) {
  std::vector<float> dz(static_cast<size_t>(a->batch * a->out));
  const bool dy_is_dz = (a->flags & SHARDREC_PLUGIN_LINEAR_DY_IS_DZ) != 0;
  for (int64_t k = 0; k < a->batch * a->out; ++k) {
    float d = dy[k];
    if (!dy_is_dz && a->activation == 1) d = y[k] > 0.0f ? d : 0.0f;
    if (!dy_is_dz && a->activation == 2) d = d * y[k] * (1.0f - y[k]);
    dz[k] = d;
  }
  for (int64_t o = 0; o < a->out; ++o) {
    double sb = 0;
    for (int64_t r = 0; r < a->batch; ++r) sb += dz[r * a->out + o];
    db[o] += static_cast<float>(sb);
    for (int64_t i = 0; i < a->in; ++i) {
      double s = 0;
      for (int64_t r = 0; r < a->batch; ++r) s += double(dz[r * a->out + o]) * x[r * a->in + i];
      dw[o * a->in + i] += static_cast<float>(s);
    }
  }
  if (dx == nullptr) return Ok(st);
  const bool aux_valid = (a->flags & SHARDREC_PLUGIN_LINEAR_INPUT_AUX_VALID) != 0;
  if (a->input_activation == 1 && aux_valid && input_aux == nullptr) {
    return Fail(st, "fake: INPUT_AUX_VALID with a NULL mask");
  }
  const int64_t ld = MaskLd(a->in);
  for (int64_t r = 0; r < a->batch; ++r) {
    for (int64_t i = 0; i < a->in; ++i) {
      double s = 0;
      for (int64_t o = 0; o < a->out; ++o) s += double(dz[r * a->out + o]) * w[o * a->in + i];
      float v = static_cast<float>(s);
      if (a->input_activation == 1) {
        const bool on = aux_valid ? GetBit(input_aux, r * ld + i) : x[r * a->in + i] > 0.0f;
        v = on ? v : 0.0f;
      }
      dx[r * a->in + i] = v;
    }
  }
  return Ok(st);
}

int32_t StreamCreate(int32_t, void** stream, shardrec_plugin_status_t* st) {
  *stream = nullptr;  // the fake's copies are synchronous: one pretend stream serves all
  return Ok(st);
}
int32_t StreamDestroy(int32_t, void*, shardrec_plugin_status_t* st) { return Ok(st); }
int32_t StreamWaitStream(int32_t, void*, void*, shardrec_plugin_status_t* st) { return Ok(st); }
int32_t HostAllocOn(int32_t device, size_t bytes, void** out, shardrec_plugin_status_t* st) {
  return Alloc(device, bytes, out, st);
}

// The runtime and dense entries; the embedding kernels stay NULL (the embedding dispatch test
// uses it as a plugin that serves none).
shardrec_cuda_plugin_table_t MakeTable() {
  shardrec_cuda_plugin_table_t t = {
      static_cast<uint32_t>(sizeof(shardrec_cuda_plugin_table_t)),
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
      &Split,
      &Abort,
      &AsyncError,
      &LinearForward,
      &LinearBackward,
  };
  t.stream_create = &StreamCreate;
  t.stream_destroy = &StreamDestroy;
  t.stream_wait_stream = &StreamWaitStream;
  t.host_alloc_on = &HostAllocOn;
  return t;
}

const shardrec_cuda_plugin_table_t kTable = MakeTable();

}  // namespace

FAKE_EXPORT uint32_t shardrec_cuda_plugin_abi_version() { return SHARDREC_CUDA_PLUGIN_ABI_VERSION; }

FAKE_EXPORT const shardrec_cuda_plugin_table_t* shardrec_cuda_plugin_table(uint32_t abi) {
  return abi == SHARDREC_CUDA_PLUGIN_ABI_VERSION ? &kTable : nullptr;
}
