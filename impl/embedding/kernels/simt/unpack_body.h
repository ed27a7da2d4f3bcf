// The owner side of an input distribution whose messages travelled between device buffers
// (impl/embedding/gpu/input.h): the bag lengths of every (source rank, unit) in the received
// messages become that unit's CSR bag offsets (the offsets UnpackInput builds on the host), and
// are checked against the id and bag counts the source announced in the counts exchange. Written
// once for host and device: the CUDA executor (cuda/unpack.cu) runs these steps on the device,
// the CPU tests run them on the host executor against UnpackInput, and the fake plugin runs them
// for the collection tests.
//
// Order: a "cell" is one (run, sample) length; the runs' cells are back to back in run order
// (cell_begin). Two exclusive scans over all cells, of the non-empty flags and of the lengths,
// give every non-empty bag its index in its run and its end offset, so each cell writes its own
// offset once: no atomics except the order-free "first bad run" minimum.
//
// Not shared (the executor's): launch configuration, the scans (CUB on the device, a loop here),
// clearing memory.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"
#include "impl/embedding/kernels/simt/route_body.h"

namespace shardrec::embedding::kernels::simt_body {

// One (source rank, unit) of the received messages.
struct UnpackRun {
  const int32_t* lengths = nullptr;  // the unit's bag lengths in its message, one per sample
  int64_t* offsets = nullptr;        // bags + 1 entries, or null (no bags, or no offsets wanted)
  int64_t ids = 0;                   // ids the source announced for the unit
  int64_t bags = 0;                  // non-empty bags it announced
};

// Everything the steps read and write; pointers live where the steps run. Field for field the
// plugin's shardrec_plugin_unpack_t.
struct UnpackParams {
  int64_t num_runs = 0;
  int64_t num_cells = 0;                // cell_begin[num_runs]
  const UnpackRun* runs = nullptr;      // num_runs
  const int64_t* cell_begin = nullptr;  // num_runs + 1, ascending
  int64_t* wide = nullptr;              // num_cells + 1: scan input
  int64_t* ne_scan = nullptr;           // num_cells + 1: non-empty bags before each cell
  int64_t* id_scan = nullptr;           // num_cells + 1: ids before each cell
  // ~(first run whose lengths disagree with its counts, or hold a negative one); 0 = none.
  unsigned long long* bad = nullptr;
};

// The run holding cell j (runs without cells share their start with the next one).
SHARDREC_HD int64_t UnpackRunOf(const UnpackParams& p, int64_t j) {
  return LastAtOrBefore(p.cell_begin, 0, p.num_runs, j);
}

// Step 1 (num_cells + 1 items): the non-empty flags widened for the scan.
struct UnpackWidenNonEmptyOp {
  UnpackParams p;
  SHARDREC_HD void operator()(int64_t j) const {
    if (j == p.num_cells) {
      p.wide[j] = 0;
      return;
    }
    const int64_t r = UnpackRunOf(p, j);
    p.wide[j] = p.runs[r].lengths[j - p.cell_begin[r]] > 0 ? 1 : 0;
  }
};

// Step 2 (num_cells + 1 items): the lengths widened for the scan; a negative one is reported
// (and counts as empty, so the scans stay sound).
struct UnpackWidenLengthsOp {
  UnpackParams p;
  SHARDREC_HD void operator()(int64_t j) const {
    if (j == p.num_cells) {
      p.wide[j] = 0;
      return;
    }
    const int64_t r = UnpackRunOf(p, j);
    const int32_t len = p.runs[r].lengths[j - p.cell_begin[r]];
    if (len < 0) ReportMin(p.bad, r);
    p.wide[j] = len > 0 ? len : 0;
  }
};

// Step 3 (num_runs items): the run's first offset, and its totals against the announced counts.
struct UnpackRunOp {
  UnpackParams p;
  SHARDREC_HD void operator()(int64_t r) const {
    const UnpackRun& run = p.runs[r];
    const int64_t b0 = p.cell_begin[r], b1 = p.cell_begin[r + 1];
    if (p.id_scan[b1] - p.id_scan[b0] != run.ids || p.ne_scan[b1] - p.ne_scan[b0] != run.bags)
      ReportMin(p.bad, r);
    if (run.offsets != nullptr) run.offsets[0] = 0;
  }
};

// Step 4 (num_cells items): a non-empty bag's end offset. Bags beyond the announced count are
// dropped and offsets clamped to the announced ids, so a malformed message (reported by step 3)
// never sends a lookup outside the run's ids.
struct UnpackScatterOp {
  UnpackParams p;
  SHARDREC_HD void operator()(int64_t j) const {
    const int64_t r = UnpackRunOf(p, j);
    const UnpackRun& run = p.runs[r];
    const int64_t b0 = p.cell_begin[r];
    if (run.offsets == nullptr || run.lengths[j - b0] <= 0) return;
    const int64_t k = p.ne_scan[j] - p.ne_scan[b0];
    if (k >= run.bags) return;
    const int64_t end = p.id_scan[j + 1] - p.id_scan[b0];
    run.offsets[k + 1] = end < run.ids ? end : run.ids;
  }
};

// The executor provides Threads(count, op) (op(item) for item in [0, count)),
// ExclusiveSum(in, out, n) over int64 and Zero(ptr, bytes), all in stream order.
template <class Exec>
void UnpackSteps(Exec& ex, const UnpackParams& p) {
  ex.Zero(p.bad, sizeof(*p.bad));
  if (p.num_runs <= 0) return;
  ex.Threads(p.num_cells + 1, UnpackWidenNonEmptyOp{p});
  ex.ExclusiveSum(p.wide, p.ne_scan, p.num_cells + 1);
  ex.Threads(p.num_cells + 1, UnpackWidenLengthsOp{p});
  ex.ExclusiveSum(p.wide, p.id_scan, p.num_cells + 1);
  ex.Threads(p.num_runs, UnpackRunOp{p});
  ex.Threads(p.num_cells, UnpackScatterOp{p});
}

}  // namespace shardrec::embedding::kernels::simt_body
