// Host backward kernels: ids grouped by row (row_group.h), then each unique row's gradient is the
// sum of its contributions in position order, computed in parallel over unique rows (no atomics).
// The fused variant sums and updates one row at a time in the widest instruction set the host has
// (isa/fused_rows.h), with the same bits at every level.
#include <algorithm>
#include <span>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/dtype.h"
#include "impl/core/prefetch.h"
#include "impl/core/row_format.h"
#include "impl/embedding/kernels/backward_workspace.h"
#include "impl/embedding/kernels/isa/fused_rows.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/row_group.h"
#include "impl/embedding/kernels/simt/segment_order.h"
#include "impl/optim/store_row.h"
#include "impl/optim/update_rules.h"

namespace shardrec::embedding::kernels {

namespace {

using detail::Grouping;
using detail::WorkspaceLayout;

int64_t CountIds(std::span<const BagRun> runs) {
  int64_t n = 0;
  for (const BagRun& r : runs) n += r.num_ids();
  return n;
}

Status CheckHost(const ExecContext& ctx, const char* what) {
  if (!ctx.is_host())
    return Status::Unsupported(what, ": the host kernel got a ", ctx.device().ToString(),
                               " context");
  return Status::Ok();
}

// Where the gradient of the id with index i (a key's low bits: its bag or its position, see
// Grouping) comes from (a row in the io buffer, or where its run's grads_at says) and the factor
// it is scaled by.
struct Source {
  const float* const* rows = nullptr;  // per index: its gradient row
  const float* weight = nullptr;       // per position (keys hold positions), or null
  float scale = 1.0f;

  const float* GradOf(int64_t i) const { return rows[i]; }
  float FactorOf(int64_t i) const { return weight != nullptr ? scale * weight[i] : scale; }
};

// Bag b's gradient row of `run`.
inline const float* RunRow(const BagRun& run, const float* grads, int64_t grad_stride, int64_t b) {
  const GradRowsAt& at = run.grads_at;
  return at.base != nullptr ? at.base + at.index[b] * at.stride
                            : grads + run.io_offset + b * grad_stride;
}

// Fills the gradient rows per bag or per position (and the weights) for `runs`, in parallel
// over runs' bags.
Source MakeSource(const ExecContext& ctx, std::span<const BagRun> runs, const float* grads,
                  int64_t grad_stride, float scale, bool by_bag, void* ws,
                  const WorkspaceLayout& l) {
  const float** rows = detail::At<const float*>(ws, l.grad_rows);
  float* wt = detail::At<float>(ws, l.weight);
  if (by_bag) {
    // Unweighted: one row per bag, numbered across the runs in order.
    int64_t b0 = 0;
    for (const BagRun& run : runs) {
      for (int64_t b = 0; b < run.num_bags; ++b) rows[b0 + b] = RunRow(run, grads, grad_stride, b);
      b0 += run.num_bags;
    }
    return Source{rows, nullptr, scale};
  }
  bool weighted = false;
  for (const BagRun& r : runs) weighted |= r.weights != nullptr;
  int64_t p0 = 0;
  for (const BagRun& run : runs) {
    const int64_t base = run.offsets != nullptr ? run.offsets[0] : 0;
    ctx.ParallelFor(0, run.num_bags, 256, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t begin = run.offsets != nullptr ? run.offsets[b] - base : b;
        const int64_t end = run.offsets != nullptr ? run.offsets[b + 1] - base : b + 1;
        const float* io = RunRow(run, grads, grad_stride, b);
        for (int64_t i = begin; i < end; ++i) {
          rows[p0 + i] = io;
          if (weighted) wt[p0 + i] = run.weights != nullptr ? run.weights[base + i] : 1.0f;
        }
      }
    });
    p0 += run.num_ids();
  }
  return Source{rows, weighted ? wt : nullptr, scale};
}

// Keys ahead whose gradient rows are fetched while the current one is summed: the rows are
// scattered over the io buffer (usually in L2/L3), and the key order gives no pattern a hardware
// prefetcher could follow.
constexpr int64_t kGradAhead = 8;

inline void PrefetchGrad(const detail::RowGroups& g, const Source& src, int32_t cols, int64_t k) {
  if (k + kGradAhead < g.num_keys)
    core::PrefetchSpan(src.GradOf(static_cast<int64_t>(g.keys[k + kGradAhead] & g.index_mask)),
                       int64_t{cols} * 4);
}

// o[c] = sum over the ids keys[k_begin, k_end), in order, of factor * grad (first term assigned).
void SumIds(const detail::RowGroups& g, const Source& src, int32_t cols, int64_t k_begin,
            int64_t k_end, float* __restrict o) {
  int64_t k = k_begin;
  int64_t p = static_cast<int64_t>(g.keys[k] & g.index_mask);
  PrefetchGrad(g, src, cols, k);
  {
    const float f = src.FactorOf(p);
    const float* __restrict gr = src.GradOf(p);
    for (int32_t c = 0; c < cols; ++c) o[c] = f * gr[c];
  }
  for (++k; k < k_end; ++k) {
    p = static_cast<int64_t>(g.keys[k] & g.index_mask);
    PrefetchGrad(g, src, cols, k);
    const float f = src.FactorOf(p);
    const float* __restrict gr = src.GradOf(p);
    for (int32_t c = 0; c < cols; ++c) o[c] += f * gr[c];
  }
}

// out[(u - u_begin) * cols + c] = sum over the row's ids of factor * grad, in the shared segment
// order (simt/segment_order.h: position order, chunked and tree-combined for hot rows). The
// vector kernels (isa/fused_rows.h) sum every other row; they take hot rows from here.
void AggregateRows(const detail::RowGroups& g, const Source& src, int32_t cols, int64_t u_begin,
                   int64_t u_end, float* out) {
  for (int64_t u = u_begin; u < u_end; ++u) {
    float* __restrict o = out + (u - u_begin) * cols;
    const int64_t k_begin = g.segments[u], k_end = g.segments[u + 1];
    const int64_t m = simt_body::HotChunks(k_end - k_begin);
    if (m == 0) {
      SumIds(g, src, cols, k_begin, k_end, o);
      continue;
    }
    // A hot row: chunk sums, then the shared tree (simt/segment_order.h).
    thread_local std::vector<float> chunks;
    chunks.resize(static_cast<size_t>(m) * cols);
    for (int64_t j = 0; j < m; ++j)
      SumIds(g, src, cols, k_begin + j * simt_body::kSegmentChunk,
             std::min(k_end, k_begin + (j + 1) * simt_body::kSegmentChunk),
             chunks.data() + j * cols);
    simt_body::TreeCombine(chunks.data(), m, cols);
    std::copy(chunks.data(), chunks.data() + cols, o);
  }
}

// The grouping left by GroupRows, checked against the runs and context it was made for.
Status LoadGrouping(const ExecContext& ctx, std::span<const BagRun> runs, void* workspace,
                    int32_t cols, int num_row_stats, bool fused, WorkspaceLayout* layout) {
  if (workspace == nullptr) return Status::InvalidArgument("backward: workspace is null");
  const auto* g = static_cast<const Grouping*>(workspace);
  const int64_t n = CountIds(runs);
  if (g->num_ids != n || g->threads != ctx.num_threads())
    return Status::InvalidArgument(
        "backward: the workspace was grouped for other runs or another "
        "context (call GroupRows first)");
  *layout = detail::MakeLayout(n, g->threads, cols, num_row_stats);
  const size_t need = fused ? layout->total : layout->grouping_end;
  if (g->workspace_bytes < need)
    return Status::InvalidArgument("backward: workspace of ", g->workspace_bytes,
                                   " bytes, this call needs ", need);
  return Status::Ok();
}

// The 16-bit weights' rounding, called back by the fused rows kernel for each updated row.
struct StoreContext {
  const optim::OptimizerConfig* config;
  int64_t step;
  const optim::ShardParams* shard;
};

void StoreRow16(void* ctx, int64_t row, const float* values) {
  const auto* c = static_cast<const StoreContext*>(ctx);
  optim::StoreRoundedRow(*c->config, c->step, *c->shard, row, values);
}

void RowBits(void* ctx, int64_t row, int32_t col, int32_t n, uint32_t* bits) {
  const auto* c = static_cast<const StoreContext*>(ctx);
  optim::RowRoundingBits(*c->config, c->step, *c->shard, row, col, n, bits);
}

Status FusedRowsFor(CpuLevel level, isa::FusedRowsFn* fn) {
  const CpuLevel host = HostCpuLevel();
  if (level == CpuLevel::kAuto) level = host;
  if (level > host)
    return Status::Unsupported("FusedBackward: level ", CpuLevelName(level), " above the host's ",
                               CpuLevelName(host));
#if SHARDREC_HAVE_X86_LEVELS
  if (level == CpuLevel::kAvx512) {
    *fn = &isa::FusedRowsAvx512;
    return Status::Ok();
  }
  if (level == CpuLevel::kAvx2) {
    *fn = &isa::FusedRowsAvx2;
    return Status::Ok();
  }
#endif
  *fn = &isa::FusedRowsBaseline;
  return Status::Ok();
}

}  // namespace

size_t BackwardWorkspaceBytes(const ExecContext& ctx, int64_t num_ids, int32_t cols,
                              int num_row_stats) {
  return detail::MakeLayout(num_ids, ctx.num_threads(), cols, num_row_stats).total;
}

Status GroupRows(const ExecContext& ctx, std::span<const BagRun> runs, void* workspace,
                 size_t workspace_bytes, int64_t* num_unique) {
  SR_RETURN_IF_ERROR(CheckHost(ctx, "GroupRows"));
  const int64_t n = CountIds(runs);
  const WorkspaceLayout l = detail::MakeLayout(n, ctx.num_threads(), 0, 0);
  if (workspace == nullptr || workspace_bytes < l.grouping_end)
    return Status::InvalidArgument("GroupRows: workspace of ", workspace_bytes, " bytes, ",
                                   l.grouping_end, " needed for ", n, " ids");
  auto* g = static_cast<Grouping*>(workspace);
  *g = Grouping();
  g->threads = ctx.num_threads();
  g->workspace_bytes = workspace_bytes;
  detail::BuildGroups(ctx, runs, n, l, workspace);
  *num_unique = g->num_unique;
  return Status::Ok();
}

namespace {

Status CheckWeights(const optim::ShardParams& shard, const char* what) {
  if (!IsWeightDType(shard.dtype))
    return Status::InvalidArgument(what, ": weights of dtype ", DTypeName(shard.dtype),
                                   " (fp32, fp16, bf16 or FP8 expected)");
  return Status::Ok();
}

// The shard and optimizer part of the row kernel's arguments (the rows and their gradients are
// the caller's); `store` receives the rounding context of 16-bit weights and must outlive the
// call.
isa::FusedRowsArgs ShardArgs(const optim::OptimizerConfig& config, int64_t step, int32_t full_dim,
                             optim::ShardParams& shard, StoreContext* store) {
  isa::FusedRowsArgs a;
  // Weight rows (and states) fetched 4 unique rows ahead: of 4, 8, 12, 16, 24, 32 and 48 rows
  // ahead, 4 gave the shortest backward on the project's VM (end to end, world 1 and 2; 16 took
  // ~5 % longer, 48 ~8 %); gradient rows 8 keys ahead (4 to 16 made no difference).
  a.rows_ahead = 4;
  a.grads_ahead = 8;
  a.weights = shard.weights;
  a.type = FloatFormatOf(shard.dtype);
  a.stride = shard.stride;
  a.cols = shard.cols;
  a.full_dim = full_dim;
  a.optimizer = static_cast<int32_t>(config.type);
  a.rules = optim::MakeRuleScalars(config, step);
  a.num_stats = optim::NumRowStats(config.type);
  auto specs = optim::StateSpecs(config.type);
  if (!specs.empty()) {
    a.m1 = shard.states[0];
    a.m1_row_wise = specs[0].row_wise;
  }
  if (specs.size() > 1) {
    a.m2 = shard.states[1];
    a.m2_row_wise = specs[1].row_wise;
  }
  a.row_state_stride = shard.row_state_stride;
  *store = StoreContext{&config, step, &shard};
  // FP8 rows are encoded by the kernel itself, with the keyed bits when stochastic (fused_rows.h).
  if (IsFp8DType(shard.dtype)) {
    if (config.stochastic_rounding) a.row_bits = &RowBits;
    a.store_ctx = store;
  } else if (shard.dtype != DType::kFloat32) {
    a.store_row = &StoreRow16;
    a.store_ctx = store;
  }
  return a;
}

// The grouping's part of the arguments: its keys and where each index's gradient comes from.
void GroupArgs(const detail::RowGroups& g, const Source& src, isa::FusedRowsArgs* a) {
  a->keys = g.keys;
  a->index_mask = g.index_mask;
  a->segments = g.segments;
  a->unique_rows = g.unique_rows;
  a->num_keys = g.num_keys;
  a->grad_rows = src.rows;
  a->id_weights = src.weight;
  a->scale = src.scale;
  a->hot_ids = simt_body::kSegmentChunk;
}

// Runs the row kernel over `n` rows in `tasks` contiguous ranges on ctx's threads, each task
// with its own two scratch rows (`scratch`, or rows of the thread's when null) and, for grouped
// rows (`g`), the rare rows with more ids than one segment chunk summed first in the shared
// chunked order (simt/segment_order.h).
void RunRowTasks(const ExecContext& ctx, isa::FusedRowsFn fn, const isa::FusedRowsArgs& base,
                 int64_t n, int64_t tasks, float* scratch, const detail::RowGroups* g,
                 const Source* src) {
  const int32_t cols = base.cols;
  const int64_t per_task = 2 * isa::FusedRowsScratchFloats(cols);
  ctx.ParallelFor(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> own, hot;
    for (int64_t t = t0; t < t1; ++t) {
      isa::FusedRowsArgs a = base;
      a.u_begin = n * t / tasks;
      a.u_end = n * (t + 1) / tasks;
      if (scratch != nullptr) {
        a.scratch = scratch + t * per_task;
      } else {
        if (own.size() < static_cast<size_t>(per_task)) own.resize(per_task);
        a.scratch = own.data();
      }
      hot.clear();
      for (int64_t u = a.u_begin; g != nullptr && u < a.u_end; ++u) {
        if (g->segments[u + 1] - g->segments[u] <= a.hot_ids) continue;
        hot.resize(hot.size() + static_cast<size_t>(cols));
        AggregateRows(*g, *src, cols, u, u + 1, hot.data() + hot.size() - cols);
      }
      a.hot_grads = hot.data();
      fn(a);
    }
  });
}

}  // namespace

Status AggregateGrads(const ExecContext& ctx, std::span<const BagRun> runs, const float* grads,
                      int64_t grad_stride, int32_t cols, float scale, void* workspace,
                      int64_t* unique_rows, float* row_grads, CpuLevel level) {
  SR_RETURN_IF_ERROR(CheckHost(ctx, "AggregateGrads"));
  isa::FusedRowsFn rows_fn = nullptr;
  SR_RETURN_IF_ERROR(FusedRowsFor(level, &rows_fn));
  WorkspaceLayout l;
  SR_RETURN_IF_ERROR(LoadGrouping(ctx, runs, workspace, cols, 0, false, &l));
  const detail::RowGroups g = detail::ReadGroups(workspace, l);
  if (g.num_unique == 0) return Status::Ok();
  const Source src = MakeSource(ctx, runs, grads, grad_stride, scale, g.keyed_by_bag, workspace, l);
  std::copy(g.unique_rows, g.unique_rows + g.num_unique, unique_rows);
  isa::FusedRowsArgs a;
  a.mode = isa::FusedRowsMode::kAggregate;
  a.cols = cols;
  a.grads_out = row_grads;
  a.grads_ahead = 8;
  GroupArgs(g, src, &a);
  RunRowTasks(ctx, rows_fn, a, g.num_unique, std::min<int64_t>(g.num_unique, l.tasks), nullptr, &g,
              &src);
  return Status::Ok();
}

Status AggregateWithRowStats(const ExecContext& ctx, std::span<const BagRun> runs,
                             const float* grads, int64_t grad_stride, float scale,
                             const optim::OptimizerConfig& config, int64_t step,
                             optim::ShardParams& shard, void* workspace, int64_t* unique_rows,
                             float* row_grads, float* row_stats, CpuLevel level) {
  SR_RETURN_IF_ERROR(CheckHost(ctx, "AggregateWithRowStats"));
  SR_RETURN_IF_ERROR(CheckWeights(shard, "AggregateWithRowStats"));
  isa::FusedRowsFn rows_fn = nullptr;
  SR_RETURN_IF_ERROR(FusedRowsFor(level, &rows_fn));
  const int ns = optim::NumRowStats(config.type);
  WorkspaceLayout l;
  SR_RETURN_IF_ERROR(LoadGrouping(ctx, runs, workspace, shard.cols, ns, true, &l));
  const detail::RowGroups g = detail::ReadGroups(workspace, l);
  if (g.num_unique == 0) return Status::Ok();
  const Source src = MakeSource(ctx, runs, grads, grad_stride, scale, g.keyed_by_bag, workspace, l);
  std::copy(g.unique_rows, g.unique_rows + g.num_unique, unique_rows);
  StoreContext store;
  isa::FusedRowsArgs a = ShardArgs(config, step, shard.cols, shard, &store);
  a.mode = isa::FusedRowsMode::kAggregate;
  a.grads_out = row_grads;
  a.stats = ns > 0 ? row_stats : nullptr;
  GroupArgs(g, src, &a);
  const int64_t tasks = std::min<int64_t>(g.num_unique, l.tasks);
  RunRowTasks(ctx, rows_fn, a, g.num_unique, tasks, detail::At<float>(workspace, l.task_grads), &g,
              &src);
  return Status::Ok();
}

Status ApplyRows(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                 int32_t full_dim, optim::ShardParams& shard, std::span<const int64_t> rows,
                 const float* grads, const float* full_stats, CpuLevel level) {
  SR_RETURN_IF_ERROR(CheckHost(ctx, "ApplyRows"));
  SR_RETURN_IF_ERROR(CheckWeights(shard, "ApplyRows"));
  if (full_dim < shard.cols)
    return Status::InvalidArgument("ApplyRows: full_dim ", full_dim, " below the shard's ",
                                   shard.cols, " columns");
  const int ns = optim::NumRowStats(config.type);
  if (ns > 0 && full_stats == nullptr && shard.cols != full_dim)
    return Status::InvalidArgument(
        "ApplyRows: row statistics span column shards (the rows' full statistics are needed)");
  isa::FusedRowsFn rows_fn = nullptr;
  SR_RETURN_IF_ERROR(FusedRowsFor(level, &rows_fn));
  if (rows.empty()) return Status::Ok();
  StoreContext store;
  isa::FusedRowsArgs a = ShardArgs(config, step, full_dim, shard, &store);
  a.mode = isa::FusedRowsMode::kApply;
  a.unique_rows = rows.data();
  a.grads = grads;
  a.stats = ns > 0 ? const_cast<float*>(full_stats) : nullptr;
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t tasks = std::min<int64_t>(n, 4 * int64_t{ctx.num_threads()});
  RunRowTasks(ctx, rows_fn, a, n, tasks, nullptr, nullptr, nullptr);
  return Status::Ok();
}

Status FusedBackward(const ExecContext& ctx, std::span<const BagRun> runs, const float* grads,
                     int64_t grad_stride, float scale, const optim::OptimizerConfig& config,
                     int64_t step, int32_t full_dim, optim::ShardParams& shard, void* workspace,
                     CpuLevel level) {
  SR_RETURN_IF_ERROR(CheckHost(ctx, "FusedBackward"));
  const int ns = optim::NumRowStats(config.type);
  if (ns != 0 && shard.cols != full_dim)
    return Status::InvalidArgument("FusedBackward: row statistics span column shards");
  SR_RETURN_IF_ERROR(CheckWeights(shard, "FusedBackward"));
  isa::FusedRowsFn rows_fn = nullptr;
  SR_RETURN_IF_ERROR(FusedRowsFor(level, &rows_fn));
  WorkspaceLayout l;
  SR_RETURN_IF_ERROR(LoadGrouping(ctx, runs, workspace, shard.cols, ns, true, &l));
  const detail::RowGroups g = detail::ReadGroups(workspace, l);
  if (g.num_unique == 0) return Status::Ok();
  const Source src = MakeSource(ctx, runs, grads, grad_stride, scale, g.keyed_by_bag, workspace, l);
  // Each row is updated right after its gradient is summed, while both are in L1: one pass over
  // the rows, as the gather of the forward, with the weight rows (and states) of the rows
  // rows_ahead further on fetched meanwhile. The tasks take contiguous ranges of rows, each with
  // its own scratch rows. (Summing a block of rows first, then the statistics and the update
  // over the block took three passes and ~10 % longer: BM_C4_StateLayout.)
  StoreContext store;
  isa::FusedRowsArgs a = ShardArgs(config, step, full_dim, shard, &store);
  GroupArgs(g, src, &a);
  const int64_t tasks = std::min<int64_t>(g.num_unique, l.tasks);
  RunRowTasks(ctx, rows_fn, a, g.num_unique, tasks, detail::At<float>(workspace, l.task_grads), &g,
              &src);
  return Status::Ok();
}
}  // namespace shardrec::embedding::kernels
