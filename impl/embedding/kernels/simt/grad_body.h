// The sample side of a backward whose output gradient is in device memory (step.h),
// written once for host and device: the non-finite check of the gradient (the host's
// CheckGradFinite: the first non-finite element, found through an order-free minimum) and the
// gradient message's packing (the host's PackGradients: each returned row's slice of the
// gradient, divided by its bag's divisor for MEAN, one IEEE division per element or 0 for an
// empty bag, else copied bit for bit). The CUDA executor (cuda/grad.cu) runs them on the device,
// the CPU tests run them on the host executors against the host functions, and the fake plugin
// runs them for the collection tests.
//
// Not shared (the executors'): launch configuration, clearing memory.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"
#include "impl/core/simt.h"
#include "impl/embedding/kernels/simt/route_body.h"

namespace shardrec::embedding::kernels::simt_body {

// What the check leaves: the first non-finite element (~index: all-zero bytes are the clear
// state), its value, and `flag` = flag_value when there is one, else 0 (the caller's verdict
// word, all-reduced with the other ranks' right behind the check).
struct FiniteResult {
  unsigned long long inv_first = 0;
  float value = 0.0f;
  int32_t pad = 0;
};

struct FiniteParams {
  const float* x = nullptr;
  int64_t n = 0;
  int64_t flag_value = 0;
  int64_t* flag = nullptr;
  FiniteResult* result = nullptr;
};

// Step 1 (n items): a non-finite element reports its index.
struct FiniteCheckOp {
  FiniteParams p;
  SHARDREC_HD void operator()(int64_t i) const {
    if (!RouteFinite(p.x[i])) ReportMin(&p.result->inv_first, i);
  }
};

// Step 2 (one item): the first one's value, and the verdict word.
struct FiniteExplainOp {
  FiniteParams p;
  SHARDREC_HD void operator()(int64_t) const {
    const bool bad = HasMin(p.result->inv_first);
    if (bad) p.result->value = p.x[MinOf(p.result->inv_first)];
    *p.flag = bad ? p.flag_value : 0;
  }
};

// The executor provides Threads(count, op) and Zero(ptr, bytes), in stream order.
template <class Exec>
void FiniteSteps(Exec& ex, const FiniteParams& p) {
  ex.Zero(p.result, sizeof(FiniteResult));
  ex.Threads(p.n, FiniteCheckOp{p});
  ex.Threads(1, FiniteExplainOp{p});
}

// One unit's returned rows: row k (0 <= k < count) is output row targets[k]'s columns
// [col, col + cols) of the gradient, written to dst + k * cols, divided by div[targets[k]] when
// div is not null (a MEAN pair).
struct PackJob {
  const int64_t* targets = nullptr;
  float* dst = nullptr;
  const float* div = nullptr;
  int64_t count = 0;
  int64_t col = 0;
  int64_t cols = 0;
};

// Field for field the plugin's shardrec_plugin_pack_t.
struct PackParams {
  const float* grad = nullptr;  // [rows, stride]
  int64_t stride = 0;
  int64_t num_jobs = 0;
  const PackJob* jobs = nullptr;       // num_jobs
  const int64_t* first_row = nullptr;  // num_jobs + 1: the jobs' rows back to back
};

// Warp item `item` (first_row[num_jobs] of them): one returned row, its columns over the lanes.
template <class Warp>
SHARDREC_HD void PackItem(Warp& w, const PackParams& p, int64_t item) {
  const int64_t j = LastAtOrBefore(p.first_row, 0, p.num_jobs, item);
  const PackJob& job = p.jobs[j];
  const int64_t k = item - p.first_row[j];
  const int64_t target = job.targets[k];
  const float* g = p.grad + target * p.stride + job.col;
  float* dst = job.dst + k * job.cols;
  const bool mean = job.div != nullptr;
  const float div = mean ? job.div[target] : 1.0f;
  w.ForEachTeam(simt::kWarpSize, [&](auto& t) {
    t.ForEachLane([&](int l) {
      for (int64_t c = l; c < job.cols; c += simt::kWarpSize)
        dst[c] = mean ? (div != 0.0f ? g[c] / div : 0.0f) : g[c];
    });
  });
}

}  // namespace shardrec::embedding::kernels::simt_body
