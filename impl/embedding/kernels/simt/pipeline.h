// The backward's sequence of steps, written once over an executor: the CUDA executor
// (cuda/exec_cuda.cuh: CUB device-wide steps, kernels on a stream, no synchronisation) and the
// host executor of the tests (Thrust's CPU backend, warps run one after another). An executor
// provides:
//   Warps(count, op)            op(warp, item) for item in [0, count)
//   SortPairs(kin, kout, vin, vout, n, end_bit)   stable sort by key bits [0, end_bit)
//   RunLengthEncode(keys, unique, counts, num_runs, n)
//   ExclusiveSum(in, out, n)    int64
//   HotFinish(op, max_rows)     per hot row: the tree of op.Partials(u), then op.Finish
//   Zero(ptr, bytes)
// Counts that only the device knows (unique rows, hot chunks) never come back to the host:
// launches are sized by upper bounds known from n and the ops stop at the device's count.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/embedding/kernels/simt/backward_body.h"

namespace shardrec::embedding::kernels::simt_body {

// A shard's runs, any number of them (source ranks x features of the shard), as run tables of
// at most kMaxRuns each: the per-id steps launch once per table, and the ids keep their
// positions across tables, so the grouping and the sums that follow see one shard.
class RunSlices {
 public:
  // Appends a run of `num_ids` ids, opening a new table when the last one is full.
  void Add(const RunTable::Run& run, int64_t num_ids) {
    if (tables_.empty() || tables_.back().num_runs == kMaxRuns) {
      tables_.emplace_back();
      tables_.back().first_pos[0] = num_ids_;
    }
    RunTable& t = tables_.back();
    const int r = t.num_runs++;
    t.runs[r] = run;
    t.first_bag[r + 1] = t.first_bag[r] + run.num_bags;
    t.first_pos[r + 1] = t.first_pos[r] + num_ids;
    num_ids_ += num_ids;
  }
  int64_t num_ids() const { return num_ids_; }
  const std::vector<RunTable>& tables() const { return tables_; }

 private:
  std::vector<RunTable> tables_;
  int64_t num_ids_ = 0;
};

// FillKeysOp over every run: one launch per run table.
template <class Exec>
void FillKeysSteps(Exec& ex, const RunSlices& rs, FillKeysOp op) {
  for (const RunTable& rt : rs.tables()) {
    op.rt = rt;
    const int64_t bags = rt.first_bag[rt.num_runs];
    ex.Warps((bags + simt::kWarpSize - 1) / simt::kWarpSize, op);
  }
}

// Upper bound of the hot chunks of n ids (every hot row has more than kSegmentChunk ids).
inline int64_t MaxHotChunks(int64_t n) { return 2 * (n / kSegmentChunk) + 1; }

inline int BitWidth(uint64_t v) {
  int b = 0;
  while (v != 0) {
    ++b;
    v >>= 1;
  }
  return b;
}

// Step 1: keys, sort, run-length encoding, segment starts and hot chunk offsets.
template <class Exec>
void GroupSteps(Exec& ex, const RunSlices& rs, const BackwardArrays& a, int64_t num_rows) {
  const int64_t n = a.n;
  ex.Zero(a.counts, sizeof(int64_t) * static_cast<size_t>(n + 1));
  ex.Zero(a.num_unique, sizeof(int64_t));
  if (n == 0) {
    ex.Zero(a.seg, sizeof(int64_t) * 1);
    ex.Zero(a.hot, sizeof(int64_t) * 1);
    ex.Zero(a.hot_off, sizeof(int64_t) * 1);
    return;
  }
  FillKeysSteps(ex, rs, FillKeysOp{RunTable{}, a, true, 0, 1.0f});
  const int end_bit = BitWidth(static_cast<uint64_t>(num_rows > 0 ? num_rows - 1 : 0));
  ex.SortPairs(a.keys, a.keys_sorted, a.pos, a.pos_sorted, n, end_bit < 1 ? 1 : end_bit);
  ex.RunLengthEncode(a.keys_sorted, a.unique, a.counts, a.num_unique, n);
  ex.ExclusiveSum(a.counts, a.seg, n + 1);
  HotCountOp hot{a};
  ex.Warps((n + 1 + simt::kWarpSize - 1) / simt::kWarpSize, hot);
  ex.ExclusiveSum(a.hot, a.hot_off, n + 1);
}

// Step 1b (one item): a shut gate (the step's agreed verdict, not 0) empties the grouping: no
// unique row and no hot chunk, so the row steps that follow update nothing and aggregate nothing.
// The count (0 when shut) is copied to count_out for kernels that read it from device memory.
struct GateGroupOp {
  BackwardArrays a;
  const int64_t* gate = nullptr;  // or null
  int64_t* count_out = nullptr;   // or null
  template <class Warp>
  SHARDREC_HD void operator()(Warp& w, int64_t) const {
    w.ForEachTeam(1, [&](auto& t) {
      if (t.index() != 0) return;
      if (gate != nullptr && *gate != 0) {
        *a.num_unique = 0;
        a.hot_off[a.n] = 0;
      }
      if (count_out != nullptr) *count_out = *a.num_unique;
    });
  }
};

template <class Exec>
void GateSteps(Exec& ex, const BackwardArrays& a, const int64_t* gate, int64_t* count_out) {
  if (gate == nullptr && count_out == nullptr) return;
  ex.Warps(1, GateGroupOp{a, gate, count_out});
}

// Step 2: every unique row's gradient in the shared order, then `sink` (the fused update or the
// aggregated outputs).
template <class Exec>
void RowSteps(Exec& ex, const RunSlices& rs, const BackwardArrays& a, const float* grads,
              int64_t grad_stride, float scale, const RowSink& sink) {
  const int64_t n = a.n;
  if (n == 0) return;
  FillKeysSteps(ex, rs, FillKeysOp{RunTable{}, a, false, grad_stride, scale});
  const int per_warp = simt::kWarpSize / simt::TeamSizeForCols(a.cols);
  ShortRowsOp rows{a, sink, grads};
  ex.Warps((n + per_warp - 1) / per_warp, rows);
  HotPartialOp partial{a, grads};
  ex.Warps((MaxHotChunks(n) + per_warp - 1) / per_warp, partial);
  HotFinishOp finish{a, sink};
  ex.HotFinish(finish, n / kSegmentChunk + 1);
}

}  // namespace shardrec::embedding::kernels::simt_body
