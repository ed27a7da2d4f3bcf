// The pooled and sequence lookups written once for a warp of lanes (impl/core/simt.h): the CUDA
// forward kernel runs LookupItem on device warps, the CPU tests run it on host warps against
// Lookup's CPU twin (lookup_cpu.cc), bit for bit. Every job of a rank goes into one launch.
//
// Work split: a job of `cols` columns uses teams of G = TeamSizeForCols(cols) lanes (one quad of
// columns per lane), so a warp sums 32 / G bags side by side (several small bags per warp); wider
// rows are cut into slices of kSliceCols columns and each slice of a bag is a warp of its own
// (large dims across warps). A team loads G ids of its bag at once, one per lane, broadcasts each
// and every lane adds its columns of that row, four rows in flight, in id order: each element is
// ((0 + w0 * x0) + w1 * x1) + ..., what the CPU twin computes. Rows are widened to fp32 on load.
#pragma once

#include <cstdint>
#include <cstring>

#include "impl/core/dtype.h"
#include "impl/core/half.h"
#include "impl/core/host_device.h"
#include "impl/core/simt.h"
#include "impl/embedding/kernels/simt/device_status.h"

namespace shardrec::embedding::kernels::simt_body {

inline constexpr int64_t kSliceCols = 256;  // columns per warp for G = 32
inline constexpr int kQuadsPerLane = kSliceCols / 4 / simt::kWarpSize;  // 2
inline constexpr int kMaxLookupJobs = 128;  // per launch (kernel parameter)

// One job as the kernel sees it (LookupJob flattened; pointers live where the kernel runs).
struct LookupJobDesc {
  const void* weights = nullptr;
  int64_t rows = 0;
  int64_t stride = 0;
  const int64_t* offsets = nullptr;  // null: sequence run
  const int64_t* ids = nullptr;
  const float* id_weights = nullptr;
  float* out = nullptr;
  int64_t io_offset = 0;
  int64_t out_stride = 0;
  int64_t num_bags = 0;
  int32_t cols = 0;
  int32_t dtype = 0;  // DType value
  int32_t team = 32;  // lanes per bag
  int32_t slices = 1;
  // Every row's quads of columns [4q, 4q + 4) are aligned to their size (LoadQuad): the weights
  // are, and the stride is a multiple of 4.
  bool quads = false;
};

// Up to kMaxLookupJobs jobs and the first warp item of each (items of job j are
// [first_item[j], first_item[j + 1])). Passed by value as the kernel parameter.
struct LookupParams {
  int32_t num_jobs = 0;
  int64_t first_item[kMaxLookupJobs + 1] = {};
  LookupJobDesc jobs[kMaxLookupJobs];
  DeviceStatus* status = nullptr;  // out-of-range rows are reported here
};

// Fills the derived fields of `d` and returns its number of warp items.
SHARDREC_HD int64_t PrepareJob(LookupJobDesc& d) {
  d.team = simt::TeamSizeForCols(d.cols);
  d.slices = d.cols <= 4 * simt::kWarpSize
                 ? 1
                 : static_cast<int32_t>((d.cols + kSliceCols - 1) / kSliceCols);
  const uintptr_t quad_bytes = d.dtype == static_cast<int32_t>(DType::kFloat32) ? 16 : 8;
  d.quads = d.stride % 4 == 0 && reinterpret_cast<uintptr_t>(d.weights) % quad_bytes == 0;
  const int64_t bags_per_warp = simt::kWarpSize / d.team;
  return (d.num_bags + bags_per_warp - 1) / bags_per_warp * d.slices;
}

SHARDREC_HD float LoadAsFloat(const void* base, int32_t dtype, int64_t at) {
  if (dtype == static_cast<int32_t>(DType::kFloat16))
    return HalfToFloat(static_cast<const uint16_t*>(base)[at]);
  if (dtype == static_cast<int32_t>(DType::kBFloat16))
    return BFloat16ToFloat(static_cast<const uint16_t*>(base)[at]);
  return static_cast<const float*>(base)[at];
}

// The four columns [at, at + 4) of `base` widened to fp32, as LoadAsFloat gives them, in one
// 16-byte (fp32) or 8-byte (16-bit) load: `at` must be a multiple of 4 and `base` aligned to the
// quad's size (LookupJobDesc::quads). A lane loading elements one by one issued four memory
// instructions per quad, which kept the 16-bit lookup (half the bytes of fp32 per instruction)
// far below the gather roof on an H200.
SHARDREC_HD void LoadQuad(const void* base, int32_t dtype, int64_t at, float x[4]) {
  if (dtype == static_cast<int32_t>(DType::kFloat32)) {
#if defined(__CUDA_ARCH__)
    const float4 v = reinterpret_cast<const float4*>(base)[at / 4];
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
#else
    std::memcpy(x, static_cast<const float*>(base) + at, 16);
#endif
    return;
  }
  uint32_t lo, hi;
#if defined(__CUDA_ARCH__)
  const uint2 v = reinterpret_cast<const uint2*>(base)[at / 4];
  lo = v.x, hi = v.y;
#else
  std::memcpy(&lo, static_cast<const uint16_t*>(base) + at, 4);
  std::memcpy(&hi, static_cast<const uint16_t*>(base) + at + 2, 4);
#endif
  const uint16_t h[4] = {static_cast<uint16_t>(lo), static_cast<uint16_t>(lo >> 16),
                         static_cast<uint16_t>(hi), static_cast<uint16_t>(hi >> 16)};
  const bool half = dtype == static_cast<int32_t>(DType::kFloat16);
  SHARDREC_UNROLL
  for (int e = 0; e < 4; ++e) x[e] = half ? HalfToFloat(h[e]) : BFloat16ToFloat(h[e]);
}

// Per-lane accumulators: kQuadsPerLane quads of four columns.
struct LaneAcc {
  float v[kQuadsPerLane * 4];
};

// The columns [c0, c1) of bag b of job d, by one team.
template <class Team>
SHARDREC_HD void PooledBag(Team& t, const LookupJobDesc& d, int64_t b, int64_t c0, int64_t c1,
                           DeviceStatus* status) {
  const int g = t.size();
  const int64_t begin = d.offsets[b], end = d.offsets[b + 1];
  const bool weighted = d.id_weights != nullptr;
  typename Team::template Reg<LaneAcc> acc;
  typename Team::template Reg<int64_t> idx;
  typename Team::template Reg<float> wt;
  t.ForEachLane([&](int l) {
    for (int k = 0; k < kQuadsPerLane * 4; ++k) acc[l].v[k] = 0.0f;
  });
  for (int64_t base = begin; base < end; base += g) {
    const int n = end - base < g ? static_cast<int>(end - base) : g;
    t.ForEachLane([&](int l) {
      idx[l] = l < n ? d.ids[base + l] : 0;
      wt[l] = weighted && l < n ? d.id_weights[base + l] : 1.0f;
    });
    for (int k0 = 0; k0 < n; k0 += 4) {
      // Up to four rows in flight: all loads first, then the adds in id order.
      int64_t r[4];
      float s[4];
      bool ok[4];
      SHARDREC_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int k = k0 + j < n ? k0 + j : n - 1;
        r[j] = t.Broadcast(idx, k);
        s[j] = t.Broadcast(wt, k);
        ok[j] = k0 + j < n && r[j] >= 0 && r[j] < d.rows;
        // Same on every lane of the team: the row is left out and the step fails.
        if (k0 + j < n && !ok[j] && status != nullptr)
          ReportError(status, kStatusRowOutOfRange, base + k);
      }
      t.ForEachLane([&](int l) {
        SHARDREC_UNROLL
        for (int qi = 0; qi < kQuadsPerLane; ++qi) {
          const int64_t c = c0 + 4 * (l + static_cast<int64_t>(qi) * g);
          if (c < c1) {
            float x[4][4];
            SHARDREC_UNROLL
            for (int j = 0; j < 4; ++j) {
              if (d.quads && ok[j] && c + 4 <= c1) {
                LoadQuad(d.weights, d.dtype, r[j] * d.stride + c, x[j]);
              } else {
                SHARDREC_UNROLL
                for (int e = 0; e < 4; ++e)
                  x[j][e] = ok[j] && c + e < c1
                                ? LoadAsFloat(d.weights, d.dtype, r[j] * d.stride + c + e)
                                : 0.0f;
              }
            }
            SHARDREC_UNROLL
            for (int j = 0; j < 4; ++j) {
              if (!ok[j]) continue;
              SHARDREC_UNROLL
              for (int e = 0; e < 4; ++e) {
                float& a = acc[l].v[qi * 4 + e];
                a = weighted ? a + s[j] * x[j][e] : a + x[j][e];
              }
            }
          }
        }
      });
    }
  }
  float* o = d.out + d.io_offset + b * d.out_stride;
  t.ForEachLane([&](int l) {
    SHARDREC_UNROLL
    for (int qi = 0; qi < kQuadsPerLane; ++qi) {
      const int64_t c = c0 + 4 * (l + static_cast<int64_t>(qi) * g);
      SHARDREC_UNROLL
      for (int e = 0; e < 4; ++e)
        if (c + e < c1) o[c + e] = acc[l].v[qi * 4 + e];
    }
  });
}

// Id i of a sequence run: out row i = weight * W[row] (or W[row]), columns [c0, c1).
template <class Team>
SHARDREC_HD void SequenceRow(Team& t, const LookupJobDesc& d, int64_t i, int64_t c0, int64_t c1,
                             DeviceStatus* status) {
  const int64_t row = d.ids[i];
  if (row < 0 || row >= d.rows) {
    if (status != nullptr) ReportError(status, kStatusRowOutOfRange, i);
    return;
  }
  const int g = t.size();
  float* o = d.out + d.io_offset + i * d.out_stride;
  const bool weighted = d.id_weights != nullptr;
  const float s = weighted ? d.id_weights[i] : 1.0f;
  t.ForEachLane([&](int l) {
    for (int64_t c = c0 + 4 * l; c < c1; c += 4 * static_cast<int64_t>(g)) {
      if (d.quads && c + 4 <= c1) {
        float x[4];
        LoadQuad(d.weights, d.dtype, row * d.stride + c, x);
        SHARDREC_UNROLL
        for (int e = 0; e < 4; ++e) o[c + e] = weighted ? s * x[e] : x[e];
        continue;
      }
      for (int64_t e = c; e < c + 4 && e < c1; ++e) {
        const float x = LoadAsFloat(d.weights, d.dtype, row * d.stride + e);
        o[e] = weighted ? s * x : x;
      }
    }
  });
}

// Warp item `item` of the launch: finds its job, then each team of the warp takes one bag.
template <class Warp>
SHARDREC_HD void LookupItem(Warp& w, const LookupParams& p, int64_t item) {
  int lo = 0, hi = p.num_jobs;  // last job whose first item <= item
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (p.first_item[mid] <= item) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const LookupJobDesc& d = p.jobs[lo];
  const int64_t local = item - p.first_item[lo];
  const int64_t slice = local % d.slices;
  const int64_t group = local / d.slices;
  const int64_t c0 = slice * kSliceCols;
  const int64_t c1 = c0 + kSliceCols < d.cols ? c0 + kSliceCols : d.cols;
  w.ForEachTeam(d.team, [&](auto& t) {
    const int64_t b = group * (simt::kWarpSize / d.team) + t.index();
    if (b >= d.num_bags) return;
    if (d.offsets != nullptr) {
      PooledBag(t, d, b, c0, c1, p.status);
    } else {
      SequenceRow(t, d, b, c0, c1, p.status);
    }
  });
}

}  // namespace shardrec::embedding::kernels::simt_body
