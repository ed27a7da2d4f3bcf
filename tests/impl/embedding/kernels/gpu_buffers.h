// Device copies of the kernel fixtures (simt_fixtures.h) for the real-GPU tests: an arena of
// cudaMalloc'ed buffers freed together, runs whose pointers point into device memory, and shard
// parameters (weights + optimizer states) mirrored on the device. Every CUDA error throws, so a
// failing call ends the test case with its name instead of comparing garbage.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "impl/embedding/kernels/kernels.h"
#include "impl/optim/optimizer.h"
#include "tests/impl/embedding/kernels/simt_fixtures.h"

namespace shardrec::embedding::kernels::gpu {

inline void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

// Null when this process can use a CUDA device, else why not (for the skip message).
inline const char* NoDeviceReason() {
  static std::string reason;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return nullptr;
  reason = e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
                                  cudaGetErrorString(e) + ")"
                            : std::string("no CUDA device");
  return reason.c_str();
}

// Device buffers of one test case, freed when it ends.
class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (void* p : ptrs_) (void)cudaFree(p);
  }

  void* Bytes(size_t bytes) {
    void* p = nullptr;
    Check(cudaMalloc(&p, bytes < 1 ? 1 : bytes), "cudaMalloc");
    ptrs_.push_back(p);
    return p;
  }
  template <class T>
  T* Alloc(size_t n) {
    return static_cast<T*>(Bytes(n * sizeof(T)));
  }
  template <class T>
  T* Copy(const T* host, size_t n) {
    T* d = Alloc<T>(n);
    if (n > 0) Check(cudaMemcpy(d, host, n * sizeof(T), cudaMemcpyHostToDevice), "upload");
    return d;
  }
  template <class T>
  T* Copy(const std::vector<T>& host) {
    return Copy(host.data(), host.size());
  }

 private:
  std::vector<void*> ptrs_;
};

template <class T>
std::vector<T> Download(const T* device, size_t n) {
  std::vector<T> host(n);
  if (n > 0)
    Check(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
  return host;
}

// A run whose offsets, ids and per-id weights live on the device.
inline BagRun DeviceRun(Arena& arena, const BagRun& r) {
  BagRun d = r;
  const int64_t ids = r.offsets != nullptr ? r.offsets[r.num_bags] : r.num_bags;
  if (r.offsets != nullptr) d.offsets = arena.Copy(r.offsets, static_cast<size_t>(r.num_bags + 1));
  d.rows = arena.Copy(r.rows, static_cast<size_t>(ids));
  if (r.weights != nullptr) d.weights = arena.Copy(r.weights, static_cast<size_t>(ids));
  return d;
}

// The weights of a fixture table on the device (same dtype and stride).
inline WeightsView DeviceWeights(Arena& arena, const Table& t) {
  WeightsView v = t.View();
  v.data = t.dtype == DType::kFloat32 ? static_cast<const void*>(arena.Copy(t.f32))
                                      : static_cast<const void*>(arena.Copy(t.u16));
  return v;
}

// A fixture shard mirrored on the device: `p` points into device memory.
struct DeviceShard {
  optim::ShardParams p;
  size_t weight_elems = 0;
  std::vector<size_t> state_elems;

  DeviceShard(Arena& arena, const Shard& host) : p(host.p) {
    if (host.p.dtype == DType::kFloat32) {
      p.weights = arena.Copy(host.w32);
      weight_elems = host.w32.size();
    } else {
      p.weights = arena.Copy(host.w16);
      weight_elems = host.w16.size();
    }
    for (size_t i = 0; i < host.states.size(); ++i) {
      p.states[i] = arena.Copy(host.states[i]);
      state_elems.push_back(host.states[i].size());
    }
  }
  // The device's weights and states as a host Shard (a copy of `like` with the values replaced).
  Shard Fetch(const Shard& like) const {
    Shard out = like;
    if (p.dtype == DType::kFloat32) {
      out.w32 = Download(static_cast<const float*>(p.weights), weight_elems);
    } else {
      out.w16 = Download(static_cast<const uint16_t*>(p.weights), weight_elems);
    }
    for (size_t i = 0; i < state_elems.size(); ++i)
      out.states[i] = Download(p.states[i], state_elems[i]);
    out.Rebind();
    return out;
  }
};

}  // namespace shardrec::embedding::kernels::gpu
