// The full row statistics of a column shard, summed on the device from its own partial ones and
// its sibling column shards' (received), written once for host and device: per element, from +0,
// one source after another in the row block's column order, as SparseUpdater::FullRowStats adds
// them on the host, so the same bits. The number of rows is read from device memory (a unique-row
// count only the device knows), the launch sized by its bound. The CUDA executor (cuda/stats.cu)
// runs it on the device, the CPU tests run it on the host executor, and the fake plugin runs it
// for the collection tests.
//
// Not shared (the executor's): launch configuration.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"

namespace shardrec::embedding::kernels::simt_body {

// Sources per launch (a kernel parameter); more are summed by further launches with `accumulate`,
// which continue the same order.
inline constexpr int kMaxSumSources = 16;

// Field for field the plugin's shardrec_plugin_sum_sources_t.
struct SumSourcesParams {
  const float* sources[kMaxSumSources] = {};  // [max_rows, row_floats] each, in adding order
  int32_t num_sources = 0;
  int32_t accumulate = 0;  // 1: add onto what dst holds (the sources before these), 0: from +0
  int64_t row_floats = 0;
  int64_t max_rows = 0;
  const int64_t* count = nullptr;  // rows to sum (device memory), at most max_rows
  float* dst = nullptr;            // [max_rows, row_floats]
};

// Item k (max_rows * row_floats of them): element k of the first *count rows.
struct SumSourcesOp {
  SumSourcesParams p;
  SHARDREC_HD void operator()(int64_t k) const {
    int64_t rows = *p.count;
    rows = rows < 0 ? 0 : (rows < p.max_rows ? rows : p.max_rows);
    if (k >= rows * p.row_floats) return;
    float acc = p.accumulate != 0 ? p.dst[k] : 0.0f;
    for (int32_t s = 0; s < p.num_sources; ++s) acc = acc + p.sources[s][k];
    p.dst[k] = acc;
  }
};

// The executor provides Threads(count, op), in stream order.
template <class Exec>
void SumSourcesSteps(Exec& ex, const SumSourcesParams& p) {
  ex.Threads(p.max_rows * p.row_floats, SumSourcesOp{p});
}

}  // namespace shardrec::embedding::kernels::simt_body
