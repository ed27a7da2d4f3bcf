// The device implementation of the warp API of simt.h: a lane is a thread, Reg<T> one register,
// Broadcast and Sum are shuffles over the team's lanes (a team is an aligned group of G lanes of
// one warp; its shuffles name only its own lanes, so teams of a warp may diverge). Included by
// .cu files only.
#pragma once

#include <cstdint>

#include "impl/core/simt.h"

namespace shardrec::simt {

class DeviceTeam {
 public:
  template <class T>
  struct Reg {
    T v;
    __device__ __forceinline__ T& operator[](int) { return v; }
    __device__ __forceinline__ const T& operator[](int) const { return v; }
  };

  __device__ __forceinline__ DeviceTeam(int size, int warp_lane)
      : size_(size), lane_(warp_lane & (size - 1)), index_(warp_lane / size) {
    const unsigned group = size == kWarpSize ? 0xffffffffu : ((1u << size) - 1u);
    mask_ = group << (index_ * size);
  }
  __device__ __forceinline__ int size() const { return size_; }
  __device__ __forceinline__ int index() const { return index_; }

  template <class F>
  __device__ __forceinline__ void ForEachLane(F&& f) {
    f(lane_);
  }
  template <class T>
  __device__ __forceinline__ T Broadcast(const Reg<T>& r, int src) const {
    return __shfl_sync(mask_, r.v, src, size_);
  }
  // Butterfly with xor shuffles: the CombineLanes order (see simt.h).
  __device__ __forceinline__ float Sum(const Reg<float>& r) const {
    float v = r.v;
    for (int off = size_ / 2; off >= 1; off /= 2) v = v + __shfl_xor_sync(mask_, v, off, size_);
    return v;
  }

 private:
  int size_;
  int lane_;
  int index_;
  unsigned mask_;
};

class DeviceWarp {
 public:
  __device__ __forceinline__ DeviceWarp(int64_t id, int lane) : id_(id), lane_(lane) {}
  __device__ __forceinline__ int64_t id() const { return id_; }
  template <class F>
  __device__ __forceinline__ void ForEachTeam(int g, F&& f) {
    DeviceTeam team(g, lane_);
    f(team);
  }

 private:
  int64_t id_;
  int lane_;
};

}  // namespace shardrec::simt
