// Embedding kernels: pooled and sequence lookups, and the backward (gradients grouped per unique
// row, duplicates summed, optionally fused with the optimizer update). This header is the
// signature every backend serves: the host twins live in *_cpu.cc; CUDA twins take the same
// arguments with a CUDA ExecContext. A kernel never allocates: outputs go to caller buffers, and
// scratch memory is a caller-owned workspace whose size a query function gives (CUB's two-phase
// convention), so a collection sizes its arenas once and reuses them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "impl/core/dtype.h"
#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/optim/optimizer.h"

namespace shardrec::embedding::kernels {

// A local shard's weights: rows x cols of `dtype` (fp32, fp16, bf16 or FP8), row stride `stride`
// (elements; an FP8 row's bytes, its scale included).
struct WeightsView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t rows = 0;
  int32_t cols = 0;
  int64_t stride = 0;
};

// Where a run's gradient rows lie when they are not in the io buffer (host backward kernels):
// bag b's row at base + index[b] * stride. The sample side's output gradient read in place, where
// copying it into the io buffer first would only move the same bits (backward.h PackGradients).
struct GradRowsAt {
  const float* base = nullptr;  // null: the run's rows are in the io buffer
  const int64_t* index = nullptr;
  int64_t stride = 0;
};

// A run of bags: bag b holds the ids rows[offsets[b] .. offsets[b+1]) (local row indices,
// already validated to lie in [0, rows)), or, when `offsets` is null, id b alone (sequence
// lookups: one output row per id). `weights` holds one weight per id or is null. The bags'
// output (forward) or gradient (backward) rows are contiguous in the caller's io buffer: bag b
// at element io_offset + b * io_stride, unless `grads_at` says where the backward reads them
// (lookups and device kernels ignore it). A shard's ids usually arrive as several runs (one per
// sending rank and feature), so kernels take lists of runs.
struct BagRun {
  const int64_t* offsets = nullptr;
  int64_t num_bags = 0;
  const int64_t* rows = nullptr;
  const float* weights = nullptr;
  int64_t io_offset = 0;
  GradRowsAt grads_at = {};

  int64_t num_ids() const { return offsets != nullptr ? offsets[num_bags] - offsets[0] : num_bags; }
};

// One shard's part of a batched lookup: its weights, one run of its bags, and the io buffer.
struct LookupJob {
  WeightsView weights;
  BagRun run;
  float* out = nullptr;  // io buffer; bag b's row starts at out + run.io_offset + b * out_stride
  int64_t out_stride = 0;
  // Optional, host kernels only: the rows go encoded for the wire to out16 instead (same element
  // offsets; `out` unused), each fp32 row (the same values) passed through `encode` as it is
  // produced, so no fp32 copy of the message is written and read again.
  uint16_t* out16 = nullptr;
  void (*encode)(const float* src, size_t n, uint16_t* dst) = nullptr;
};

// One MEAN pair's columns [col, col + cols) of a pooled output and its per-row divisors (0: an
// empty bag, whose columns become 0): the device MEAN divide's job (DivideMeans of
// dispatch.h; the host divides in output_dist.h's DivideMeans).
struct MeanJob {
  int64_t col = 0;
  int32_t cols = 0;
  const float* div = nullptr;
};

// The instruction set a host kernel runs with. Every level gives bit-identical results (same
// summation order, no contraction), so the choice is about speed only.
enum class CpuLevel : int32_t { kAuto = -1, kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };
// The widest level this host supports, capped by SHARDREC_CPU_LEVEL (baseline|avx2|avx512).
CpuLevel HostCpuLevel();
const char* CpuLevelName(CpuLevel level);

// Tuning of the lookups. prefetch_distance: ids ahead whose rows are software-prefetched (0 =
// off); the default suits DRAM-resident tables. level: kAuto is HostCpuLevel(); a level above it
// is refused (kUnsupported).
struct LookupOptions {
  int32_t prefetch_distance = 12;
  CpuLevel level = CpuLevel::kAuto;
};

// Every job of a rank in one call (all tables, all runs): pooled bags are written as
// out[c] = sum over the bag's ids, in id order, of weight * W[row][c] (an empty bag gives
// zeros; MEAN is a divide the caller does later); sequence runs (offsets null) write
// weight * W[row][c] per id. Only the first cols floats of each output row are written.
// Results do not depend on the thread count. Errors: kUnsupported for a non-host context,
// kInvalidArgument for a weight dtype other than fp32/fp16/bf16.
Status Lookup(const ExecContext& ctx, std::span<const LookupJob> jobs,
              const LookupOptions& options = {});

// ---- Backward ------------------------------------------------------------------------------

// Bytes of workspace GroupRows and the aggregation kernels need for `num_ids` ids of one shard
// with `cols` columns and `num_row_stats` row statistics (optim::NumRowStats), on `ctx`.
size_t BackwardWorkspaceBytes(const ExecContext& ctx, int64_t num_ids, int32_t cols,
                              int num_row_stats);

// Step 1 of every backward: groups the ids of `runs` by row inside `workspace` (a stable radix
// sort of (row, position) keys, then run-length encoding), and returns the number of unique
// rows, so the caller can size the outputs of step 2. Positions number the ids of all runs in
// order; each row's ids stay in position order, which fixes the summation order. (The host twin
// keys unweighted ids by (row, bag) instead: bags grow with positions, so the order is the same
// and step 2 finds each gradient row in a small per-bag table.) The workspace
// keeps the grouping for the following AggregateGrads / FusedBackward call on the same runs.
// Errors: kInvalidArgument when workspace_bytes is below BackwardWorkspaceBytes.
Status GroupRows(const ExecContext& ctx, std::span<const BagRun> runs, void* workspace,
                 size_t workspace_bytes, int64_t* num_unique);

// Step 2: for every unique row (ascending), row_grads[u * cols + c] = sum over its ids, in
// position order, of scale * weight * grad(bag)[c], where grad(bag) starts at element
// run.io_offset + b * grad_stride of `grads` (or where run.grads_at says). unique_rows receives
// num_unique rows and row_grads num_unique * cols floats.
Status AggregateGrads(const ExecContext& ctx, std::span<const BagRun> runs, const float* grads,
                      int64_t grad_stride, int32_t cols, float scale, void* workspace,
                      int64_t* unique_rows, float* row_grads, CpuLevel level = CpuLevel::kAuto);

// Step 2 of a shard whose rows are updated later (column shards whose row statistics are summed
// with their sibling shards'): AggregateGrads over shard.cols columns, and each row's statistics
// over this shard's columns into row_stats (optim::NumRowStats(config.type) per row; none
// written when 0; LAMB advances its moments here), as optim::PartialRowStats does. The weights
// stay as they are. The workspace must hold BackwardWorkspaceBytes. Bit-identical at every level.
Status AggregateWithRowStats(const ExecContext& ctx, std::span<const BagRun> runs,
                             const float* grads, int64_t grad_stride, float scale,
                             const optim::OptimizerConfig& config, int64_t step,
                             optim::ShardParams& shard, void* workspace, int64_t* unique_rows,
                             float* row_grads, float* row_stats, CpuLevel level = CpuLevel::kAuto);

// The update of aggregated rows: rows[u] (local, unique) takes grads[u * cols, (u + 1) * cols)
// and, when the optimizer has row statistics, full_stats[u * NumRowStats, ...) summed over the
// whole row -- or, with full_stats null, statistics taken from the row itself (the shard holds
// whole rows: cols == full_dim); optim::PartialRowStats + optim::Apply's bits, in the host's
// widest instruction set (or `level`), in parallel over rows. Errors: kInvalidArgument (dtype,
// full_dim below cols, statistics missing for a column shard), kUnsupported (a level above the
// host's, a non-host context).
Status ApplyRows(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                 int32_t full_dim, optim::ShardParams& shard, std::span<const int64_t> rows,
                 const float* grads, const float* full_stats, CpuLevel level = CpuLevel::kAuto);

// Step 2, fused with the optimizer: each unique row is aggregated and updated at once while its
// gradient is in L1 (vector registers of `level`: kAuto is HostCpuLevel()), so aggregated
// gradients never travel through memory. Only valid when no statistic has to be summed across
// column shards: NumRowStats(config.type) == 0 or shard.cols == full_dim. Bit-identical to
// AggregateGrads followed by optim::PartialRowStats and optim::Apply, at every level. Errors:
// kInvalidArgument (workspace, dtype, statistics across shards), kUnsupported for a level above
// the host's or a non-host context.
Status FusedBackward(const ExecContext& ctx, std::span<const BagRun> runs, const float* grads,
                     int64_t grad_stride, float scale, const optim::OptimizerConfig& config,
                     int64_t step, int32_t full_dim, optim::ShardParams& shard, void* workspace,
                     CpuLevel level = CpuLevel::kAuto);

}  // namespace shardrec::embedding::kernels
