// The MEAN divide of a pooled output combined on the device, written once for a warp of lanes
// (impl/core/simt.h): the CUDA kernel runs MeanItem on device warps, the CPU tests run it on host
// warps against DivideMeans (output_dist.h), bit for bit: one IEEE division per element, x / div,
// or 0 where the bag was empty (div == 0), with no other arithmetic to contract.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"
#include "impl/core/simt.h"

namespace shardrec::embedding::kernels::simt_body {

inline constexpr int kMaxMeanJobs = 128;  // per launch (kernel parameter)

// One MEAN pair's columns [col, col + cols) of every output row, and its per-row divisors.
struct MeanJobDesc {
  int64_t col = 0;
  int32_t cols = 0;
  const float* div = nullptr;
};

// Up to kMaxMeanJobs jobs over an output of `rows` rows of `stride` floats. Passed by value as
// the kernel parameter.
struct MeanParams {
  float* out = nullptr;
  int64_t rows = 0;
  int64_t stride = 0;
  int32_t num_jobs = 0;
  MeanJobDesc jobs[kMaxMeanJobs];
};

// Warp item `item` (num_jobs * rows of them): row item % rows of job item / rows, its columns
// spread over the lanes.
template <class Warp>
SHARDREC_HD void MeanItem(Warp& w, const MeanParams& p, int64_t item) {
  const MeanJobDesc& j = p.jobs[item / p.rows];
  const int64_t r = item % p.rows;
  const float div = j.div[r];
  float* o = p.out + r * p.stride + j.col;
  w.ForEachTeam(simt::kWarpSize, [&](auto& t) {
    t.ForEachLane([&](int l) {
      for (int64_t c = l; c < j.cols; c += simt::kWarpSize) o[c] = div != 0.0f ? o[c] / div : 0.0f;
    });
  });
}

}  // namespace shardrec::embedding::kernels::simt_body
