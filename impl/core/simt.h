// Teams of lanes in lock-step: the cross-lane vocabulary of the single-source kernels, and its CPU
// implementation. A kernel body is written once as a template over a Warp type; the body runs
// per-lane code through ForEachLane and talks across lanes only through Broadcast and Sum. On a
// GPU (simt_device.cuh) a lane is a thread and Reg<T> one register; here a Reg<T> holds all 32
// lanes' values and ForEachLane runs the lanes one after another, so every cross-lane operation
// sees the values of all lanes exactly as the device's shuffles do (32 lanes in lock-step).
//
// A warp splits into teams of G lanes (G a power of two, 1..32) that work on independent items
// (several small bags per warp); teams of one warp never talk to each other, so running them one
// after another on the CPU gives the results they give side by side on a GPU.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"

namespace shardrec::simt {

inline constexpr int kWarpSize = 32;

// Loops with a constant trip count in device bodies are unrolled, so small per-lane arrays stay
// in registers (the compile gates refuse local memory).
#if defined(__CUDA_ARCH__)
#define SHARDREC_UNROLL _Pragma("unroll")
#else
#define SHARDREC_UNROLL
#endif

// The one order in which per-lane partial sums meet, shared by CPU twins and device teams: a
// butterfly, for off = n/2, ..., 1: a[l] = a[l] + a[l + off], result a[0]. A device team does the
// same with xor shuffles: lane l adds a[l ^ off], i.e. the same two values (fp addition
// commutes), so every lane ends with a[0] bit for bit. n is a power of two <= 32.
SHARDREC_HD float CombineLanes(float* a, int n) {
  for (int off = n / 2; off >= 1; off /= 2)
    for (int l = 0; l < off; ++l) a[l] = a[l] + a[l + off];
  return a[0];
}

// Row reductions (sums over the columns of a row) use one order everywhere: columns go in quads
// of four, quad q to lane q % 32; each lane sums its terms in increasing column order from +0;
// the lanes then meet through CombineLanes(., 32). A team of G lanes gives the same bits when
// every lane holds at most one quad or G = 32 (lanes without a quad add +0, and row statistics
// are sums of squares, never -0): TeamSizeForCols picks such a G.
SHARDREC_HD int LaneOfColumn(int64_t c) { return static_cast<int>((c >> 2) & (kWarpSize - 1)); }

// The smallest power-of-two team with one quad of columns per lane, at most a warp.
SHARDREC_HD int TeamSizeForCols(int64_t cols) {
  const int64_t quads = (cols + 3) / 4;
  int g = 1;
  while (g < kWarpSize && g < quads) g *= 2;
  return g;
}

// ---- CPU implementation ---------------------------------------------------------------------

// G lanes of a host warp. Lane indices run 0..size()-1 inside the team.
class HostTeam {
 public:
  template <class T>
  struct Reg {
    T v[kWarpSize];
    T& operator[](int lane) { return v[lane]; }
    const T& operator[](int lane) const { return v[lane]; }
  };

  HostTeam(int size, int index) : size_(size), index_(index) {}
  int size() const { return size_; }
  // Which team of its warp this is (0 .. 32 / size - 1).
  int index() const { return index_; }

  // Runs per-lane code for every lane of the team, lane 0 first.
  template <class F>
  void ForEachLane(F&& f) {
    for (int l = 0; l < size_; ++l) f(l);
  }
  // The value lane `src` holds, on every lane.
  template <class T>
  T Broadcast(const Reg<T>& r, int src) const {
    return r.v[src];
  }
  // Sum over the team's lanes in CombineLanes order, on every lane.
  float Sum(const Reg<float>& r) const {
    float a[kWarpSize] = {};
    for (int l = 0; l < size_; ++l) a[l] = r.v[l];
    return CombineLanes(a, size_);
  }

 private:
  int size_;
  int index_;
};

// A warp of 32 lanes on the CPU. `id` numbers the warp in its launch (what a device computes from
// blockIdx and threadIdx); kernels use it to pick scratch slots.
class HostWarp {
 public:
  explicit HostWarp(int64_t id = 0) : id_(id) {}
  int64_t id() const { return id_; }
  // Splits the warp into teams of `g` lanes and runs f(team) for each, team 0 first.
  template <class F>
  void ForEachTeam(int g, F&& f) {
    for (int t = 0; t < kWarpSize / g; ++t) {
      HostTeam team(g, t);
      f(team);
    }
  }

 private:
  int64_t id_;
};

}  // namespace shardrec::simt
