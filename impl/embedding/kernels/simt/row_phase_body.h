// The optimizer's two phases over a list of rows (optim::PartialRowStats and optim::Apply of the
// CPU twin), one team of TeamSizeForCols(cols) lanes per row, written once for host and device:
// the CUDA twins (cuda/backward.cu: PartialRowStats, Apply and their counted forms) launch it,
// the fake plugin runs it on host warps. The number of rows is either known on the host
// (count null: max_rows) or read from device memory (`count`, at most max_rows), so a row list
// whose length only the device knows (a compaction's, a gated step's 0) needs no host read: the
// launch is sized by max_rows and teams past *count return at once.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"
#include "impl/core/simt.h"
#include "impl/optim/row_body.h"

namespace shardrec::embedding::kernels::simt_body {

struct RowPhaseParams {
  optim::RowParams p;
  const int64_t* rows = nullptr;   // local rows of the shard
  const float* grads = nullptr;    // [rows, cols]
  float* stats = nullptr;          // phase 1 output: ns per row
  const float* full = nullptr;     // phase 2 input: ns per row (null when ns == 0)
  const int64_t* count = nullptr;  // rows to update (device memory), or null: max_rows
  int64_t max_rows = 0;
  int32_t ns = 0;  // optim::NumRowStats
  int32_t phase = 1;
};

SHARDREC_HD int64_t RowPhaseRows(const RowPhaseParams& q) {
  if (q.count == nullptr) return q.max_rows;
  const int64_t n = *q.count;
  return n < 0 ? 0 : (n < q.max_rows ? n : q.max_rows);
}

// Warp item `item`: rows item * (32 / G) .. of the list, a team each.
template <class Warp>
SHARDREC_HD void RowPhaseItem(Warp& w, const RowPhaseParams& q, int64_t item) {
  const int g = simt::TeamSizeForCols(q.p.cols);
  const int64_t n = RowPhaseRows(q);
  w.ForEachTeam(g, [&](auto& t) {
    const int64_t u = item * (simt::kWarpSize / g) + t.index();
    if (u >= n) return;
    const float* gu = q.grads + u * q.p.cols;
    if (q.phase == 1) {
      const optim::RowStats st = optim::RowPhase1(t, q.p, q.rows[u], gu);
      t.ForEachLane([&](int l) {
        if (l != 0) return;
        q.stats[u * q.ns] = st.v0;
        if (q.ns > 1) q.stats[u * q.ns + 1] = st.v1;
      });
    } else {
      optim::RowStats st;
      if (q.ns > 0) st.v0 = q.full[u * q.ns];
      if (q.ns > 1) st.v1 = q.full[u * q.ns + 1];
      optim::RowPhase2(t, q.p, q.rows[u], gu, st);
    }
  });
}

// Warp items a launch over max_rows rows needs.
SHARDREC_HD int64_t RowPhaseItems(const RowPhaseParams& q) {
  const int per_warp = simt::kWarpSize / simt::TeamSizeForCols(q.p.cols);
  return (q.max_rows + per_warp - 1) / per_warp;
}

}  // namespace shardrec::embedding::kernels::simt_body
