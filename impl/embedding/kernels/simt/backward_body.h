// The backward written once for warps of lanes (impl/core/simt.h), step by step: FillKeys (one
// (row, position) key per id, each id's gradient row and factor), then, after a stable sort by
// row and a run-length encoding (device-wide steps, pipeline.h), ShortRows (a team per unique
// row of at most kSegmentChunk ids: sum in position order, then the fused update or the row's
// aggregated gradient), HotPartial (a team per chunk of a longer row) and HotFinish (after the
// chunk sums met in the shared tree: the update or the gradient). The order of every sum is the
// CPU twin's (segment_order.h, simt.h), so results equal backward_cpu.cc + apply.cc bit for bit.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"
#include "impl/core/simt.h"
#include "impl/embedding/kernels/simt/device_status.h"
#include "impl/embedding/kernels/simt/segment_order.h"
#include "impl/optim/row_body.h"

namespace shardrec::embedding::kernels::simt_body {

inline constexpr int kMaxRuns = 128;  // runs per launch (kernel parameter)

// One launch's slice of a shard's runs (BagRun flattened): a kernel parameter, so at most
// kMaxRuns; a shard with more runs is described by several (pipeline.h RunSlices). first_bag
// counts bags from the slice's first run, first_pos counts ids from the shard's first id.
struct RunTable {
  struct Run {
    const int64_t* offsets = nullptr;  // null: one id per bag
    const int64_t* ids = nullptr;
    const float* weights = nullptr;
    int64_t io_offset = 0;
    int64_t num_bags = 0;
  };
  int32_t num_runs = 0;
  int64_t first_bag[kMaxRuns + 1] = {};
  int64_t first_pos[kMaxRuns + 1] = {};
  Run runs[kMaxRuns];
};

// The workspace arrays of one backward (where they live is the executor's business).
struct BackwardArrays {
  int64_t n = 0;  // ids
  int32_t cols = 0;
  uint64_t* keys = nullptr;  // [n] rows in position order
  uint32_t* pos = nullptr;   // [n] positions 0..n-1
  uint64_t* keys_sorted = nullptr;
  uint32_t* pos_sorted = nullptr;  // [n] positions grouped by row, in position order per row
  int64_t* grad_off = nullptr;     // [n] per position: element offset of its gradient row
  float* factor = nullptr;         // [n] per position: scale * weight
  uint64_t* unique = nullptr;      // [n] unique rows, ascending
  int64_t* counts = nullptr;       // [n + 1] ids per unique row (0 past the last)
  int64_t* num_unique = nullptr;   // [1]
  int64_t* seg = nullptr;          // [n + 1] first sorted index of each unique row
  int64_t* hot = nullptr;          // [n + 1] HotChunks per unique row (0 past the last)
  int64_t* hot_off = nullptr;      // [n + 1] exclusive scan of hot: first chunk of each hot row
  float* partials = nullptr;       // [hot chunks, cols]
  float* scratch = nullptr;        // [teams, cols]: a short row's gradient before its update
  DeviceStatus* status = nullptr;
};

// One bag of a run per lane (team of 1): the keys and positions of its ids (GroupRows), or their
// gradient rows and factors (step 2, which knows the gradient's layout).
struct FillKeysOp {
  RunTable rt;
  BackwardArrays a;
  bool keys = true;  // else sources
  int64_t grad_stride = 0;
  float scale = 1.0f;

  template <class Warp>
  SHARDREC_HD void operator()(Warp& w, int64_t item) const {
    w.ForEachTeam(1, [&](auto& t) {
      const int64_t gb = item * simt::kWarpSize + t.index();
      if (gb >= rt.first_bag[rt.num_runs]) return;
      int lo = 0, hi = rt.num_runs;
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (rt.first_bag[mid] <= gb) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      const RunTable::Run& r = rt.runs[lo];
      const int64_t b = gb - rt.first_bag[lo];
      const int64_t base = r.offsets != nullptr ? r.offsets[0] : 0;
      const int64_t i0 = r.offsets != nullptr ? r.offsets[b] : b;
      const int64_t i1 = r.offsets != nullptr ? r.offsets[b + 1] : b + 1;
      const int64_t p0 = rt.first_pos[lo] - base;
      if (keys) {
        for (int64_t i = i0; i < i1; ++i) {
          a.keys[p0 + i] = static_cast<uint64_t>(r.ids[i]);
          a.pos[p0 + i] = static_cast<uint32_t>(p0 + i);
        }
      } else {
        const int64_t off = r.io_offset + b * grad_stride;
        for (int64_t i = i0; i < i1; ++i) {
          a.grad_off[p0 + i] = off;
          a.factor[p0 + i] = r.weights != nullptr ? scale * r.weights[i] : scale;
        }
      }
    });
  }
};

// HotChunks of every unique row (0 past the last), one per lane.
struct HotCountOp {
  BackwardArrays a;
  template <class Warp>
  SHARDREC_HD void operator()(Warp& w, int64_t item) const {
    w.ForEachTeam(1, [&](auto& t) {
      const int64_t u = item * simt::kWarpSize + t.index();
      if (u > a.n) return;
      a.hot[u] = u < *a.num_unique ? HotChunks(a.counts[u]) : 0;
    });
  }
};

struct SumAcc {
  float v[4 * 4];
};

// dest[c] = sum over sorted ids [k0, k1), in order, of factor * grad (first term assigned), by
// one team, in column blocks of 16 per lane.
template <class Team>
SHARDREC_HD void SumIdsTeam(Team& t, const BackwardArrays& a, const float* grads, int64_t k0,
                            int64_t k1, float* dest) {
  const int g = t.size();
  const int64_t block = 16 * static_cast<int64_t>(g);
  typename Team::template Reg<SumAcc> acc;
  typename Team::template Reg<int64_t> off;
  typename Team::template Reg<float> fac;
  for (int64_t cb = 0; cb < a.cols; cb += block) {
    for (int64_t base = k0; base < k1; base += g) {
      const int n = k1 - base < g ? static_cast<int>(k1 - base) : g;
      t.ForEachLane([&](int l) {
        const uint32_t p = l < n ? a.pos_sorted[base + l] : 0u;
        off[l] = l < n ? a.grad_off[p] : 0;
        fac[l] = l < n ? a.factor[p] : 0.0f;
      });
      for (int k = 0; k < n; ++k) {
        const int64_t o = t.Broadcast(off, k);
        const float f = t.Broadcast(fac, k);
        const bool first = base + k == k0;
        t.ForEachLane([&](int l) {
          SHARDREC_UNROLL
          for (int j = 0; j < 16; ++j) {
            // Lane l holds quads l, l + g, l + 2g, l + 3g of the block.
            const int64_t c = cb + 4 * (l + static_cast<int64_t>(j / 4) * g) + (j % 4);
            if (c < a.cols) {
              const float x = f * grads[o + c];
              acc[l].v[j] = first ? x : acc[l].v[j] + x;
            }
          }
        });
      }
    }
    t.ForEachLane([&](int l) {
      SHARDREC_UNROLL
      for (int j = 0; j < 16; ++j) {
        const int64_t c = cb + 4 * (l + static_cast<int64_t>(j / 4) * g) + (j % 4);
        if (c < a.cols) dest[c] = acc[l].v[j];
      }
    });
  }
}

// What happens to a unique row's gradient: the fused update, or (aggregate mode) the row and its
// gradient written to the caller's outputs.
struct RowSink {
  bool fused = false;
  optim::RowParams params;
  int64_t* unique_out = nullptr;  // aggregate mode
  float* grads_out = nullptr;     // aggregate mode: [num_unique, cols]

  template <class Team>
  SHARDREC_HD void Finish(Team& t, const BackwardArrays& a, int64_t u, const float* g) const {
    const int64_t row = static_cast<int64_t>(a.unique[u]);
    if (fused) {
      optim::RowFused(t, params, row, g);
      return;
    }
    float* out = grads_out + u * a.cols;
    const int gs = t.size();
    t.ForEachLane([&](int l) {
      if (l == 0) unique_out[u] = row;
      if (g != out)
        for (int64_t c = l; c < a.cols; c += gs) out[c] = g[c];
    });
  }
};

// Teams of G = TeamSizeForCols(cols) lanes, 32 / G unique rows per warp item: short rows only.
struct ShortRowsOp {
  BackwardArrays a;
  RowSink sink;
  const float* grads = nullptr;

  template <class Warp>
  SHARDREC_HD void operator()(Warp& w, int64_t item) const {
    const int g = simt::TeamSizeForCols(a.cols);
    const int per_warp = simt::kWarpSize / g;
    w.ForEachTeam(g, [&](auto& t) {
      const int64_t u = item * per_warp + t.index();
      if (u >= *a.num_unique) return;
      const int64_t k0 = a.seg[u], k1 = a.seg[u + 1];
      if (HotChunks(k1 - k0) != 0) return;
      float* dest = sink.fused ? a.scratch + (w.id() * per_warp + t.index()) * a.cols
                               : sink.grads_out + u * a.cols;
      SumIdsTeam(t, a, grads, k0, k1, dest);
      sink.Finish(t, a, u, dest);
    });
  }
};

// The unique row that hot chunk k belongs to: the last u with hot_off[u] <= k.
SHARDREC_HD int64_t HotRowOf(const BackwardArrays& a, int64_t k) {
  int64_t lo = 0, hi = a.n + 1;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (a.hot_off[mid] <= k) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// One team per chunk of a hot row: its sum into partials[k].
struct HotPartialOp {
  BackwardArrays a;
  const float* grads = nullptr;

  template <class Warp>
  SHARDREC_HD void operator()(Warp& w, int64_t item) const {
    const int g = simt::TeamSizeForCols(a.cols);
    const int per_warp = simt::kWarpSize / g;
    w.ForEachTeam(g, [&](auto& t) {
      const int64_t k = item * per_warp + t.index();
      if (k >= a.hot_off[a.n]) return;
      const int64_t u = HotRowOf(a, k);
      const int64_t j = k - a.hot_off[u];
      const int64_t k0 = a.seg[u] + j * kSegmentChunk;
      const int64_t k1 = k0 + kSegmentChunk < a.seg[u + 1] ? k0 + kSegmentChunk : a.seg[u + 1];
      SumIdsTeam(t, a, grads, k0, k1, a.partials + k * a.cols);
    });
  }
};

// A hot row after its chunk sums: the tree (TreeAdd per element and level, run by the executor
// with a barrier between levels), then Finish by one team.
struct HotFinishOp {
  BackwardArrays a;
  RowSink sink;

  SHARDREC_HD bool IsHot(int64_t u) const { return u < *a.num_unique && a.hot[u] != 0; }
  SHARDREC_HD int64_t Chunks(int64_t u) const { return a.hot[u]; }
  SHARDREC_HD float* Partials(int64_t u) const { return a.partials + a.hot_off[u] * a.cols; }
  template <class Team>
  SHARDREC_HD void Finish(Team& t, int64_t u) const {
    sink.Finish(t, a, u, Partials(u));
  }
};

}  // namespace shardrec::embedding::kernels::simt_body
