// CPU backward kernels: ids grouped by row (row_group.h), then each unique row's gradient is the
// sum of its contributions in position order, computed in parallel over unique rows (no atomics).
// The fused variant runs the optimizer on cache-sized blocks of rows right after aggregating them.
#include <algorithm>
#include <functional>
#include <span>

#include "impl/core/check.h"
#include "impl/core/thread_pool.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/row_group.h"
#include "impl/embedding/kernels/row_load.h"

namespace shardrec::embedding::kernels {

namespace {

// Where the gradient of the id at position p comes from: its bag's row (pooled) or its own row
// (sequence), times its per-id weight.
struct Source {
  const float* grads = nullptr;
  int64_t stride = 0;
  const int32_t* bag_of = nullptr;  // null for sequence lookups
  const float* weights = nullptr;
  float scale = 1.0f;

  const float* GradOf(int64_t p) const {
    return grads + (bag_of != nullptr ? bag_of[p] : p) * stride;
  }
  float FactorOf(int64_t p) const { return weights != nullptr ? scale * weights[p] : scale; }
};

// out[(u - u_begin) * cols + c] = sum over the row's ids, in position order, of factor * grad.
void AggregateRows(const detail::RowGroups& g, const Source& src, int32_t cols, int64_t u_begin,
                   int64_t u_end, float* out) {
  for (int64_t u = u_begin; u < u_end; ++u) {
    float* __restrict o = out + (u - u_begin) * cols;
    const int64_t k_end = g.segments[u + 1];
    int64_t k = g.segments[u];
    int64_t p = static_cast<int64_t>(g.keys[k] & g.pos_mask);
    {
      const float f = src.FactorOf(p);
      const float* __restrict gr = src.GradOf(p);
      for (int32_t c = 0; c < cols; ++c) o[c] = f * gr[c];
    }
    for (++k; k < k_end; ++k) {
      p = static_cast<int64_t>(g.keys[k] & g.pos_mask);
      const float f = src.FactorOf(p);
      const float* __restrict gr = src.GradOf(p);
      for (int32_t c = 0; c < cols; ++c) o[c] += f * gr[c];
    }
  }
}

const int32_t* BagOf(const Bags& bags, Workspace* ws, ThreadPool* pool) {
  const int64_t base = bags.offsets[0];
  const int64_t n = bags.offsets[bags.num_bags] - base;
  SR_CHECK(bags.num_bags < (int64_t{1} << 31));
  ws->bag_of.resize(n);
  auto fill = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      std::fill(ws->bag_of.begin() + (bags.offsets[b] - base),
                ws->bag_of.begin() + (bags.offsets[b + 1] - base), static_cast<int32_t>(b));
  };
  if (pool != nullptr)
    pool->ParallelFor(0, bags.num_bags, 256, fill);
  else
    fill(0, bags.num_bags);
  return ws->bag_of.data();
}

void ForUnique(ThreadPool* pool, int64_t n, int64_t grain,
               const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    fn(0, n);
  } else {
    pool->ParallelFor(0, n, grain, fn);
  }
}

void AggregateAll(const detail::RowGroups& g, const Source& src, int32_t cols,
                  std::vector<int64_t>* unique_rows, std::vector<float>* row_grads,
                  ThreadPool* pool) {
  unique_rows->assign(g.unique_rows, g.unique_rows + g.num_unique);
  row_grads->resize(static_cast<size_t>(g.num_unique) * cols);
  float* out = row_grads->data();
  ForUnique(pool, g.num_unique, 64,
            [&](int64_t b, int64_t e) { AggregateRows(g, src, cols, b, e, out + b * cols); });
}

}  // namespace

void AggregatePooledGrads(const Bags& bags, const float* bag_grads, int64_t grad_stride,
                          int32_t cols, float scale, std::vector<int64_t>* unique_rows,
                          std::vector<float>* row_grads, ThreadPool* pool, Workspace* ws) {
  Workspace local;
  if (ws == nullptr) ws = &local;
  const int64_t base = bags.num_bags > 0 ? bags.offsets[0] : 0;
  const int64_t n = bags.num_bags > 0 ? bags.offsets[bags.num_bags] - base : 0;
  detail::RowGroups g = detail::GroupByRow(bags.rows + base, n, ws, pool);
  Source src{bag_grads, grad_stride, BagOf(bags, ws, pool),
             bags.weights ? bags.weights + base : nullptr, scale};
  AggregateAll(g, src, cols, unique_rows, row_grads, pool);
}

void AggregatePooledGrads(const Bags& bags, const float* bag_grads, int64_t grad_stride,
                          int32_t cols, float scale, std::vector<int64_t>* unique_rows,
                          std::vector<float>* row_grads, ThreadPool* pool) {
  AggregatePooledGrads(bags, bag_grads, grad_stride, cols, scale, unique_rows, row_grads, pool,
                       nullptr);
}

void AggregateSequenceGrads(const int64_t* rows, const float* weights, int64_t n,
                            const float* id_grads, int64_t grad_stride, int32_t cols, float scale,
                            std::vector<int64_t>* unique_rows, std::vector<float>* row_grads,
                            ThreadPool* pool, Workspace* ws) {
  Workspace local;
  if (ws == nullptr) ws = &local;
  detail::RowGroups g = detail::GroupByRow(rows, n, ws, pool);
  Source src{id_grads, grad_stride, nullptr, weights, scale};
  AggregateAll(g, src, cols, unique_rows, row_grads, pool);
}

void AggregateSequenceGrads(const int64_t* rows, const float* weights, int64_t n,
                            const float* id_grads, int64_t grad_stride, int32_t cols, float scale,
                            std::vector<int64_t>* unique_rows, std::vector<float>* row_grads,
                            ThreadPool* pool) {
  AggregateSequenceGrads(rows, weights, n, id_grads, grad_stride, cols, scale, unique_rows,
                         row_grads, pool, nullptr);
}

int64_t PooledBackwardFused(const Bags& bags, const float* bag_grads, int64_t grad_stride,
                            float scale, const optim::OptimizerConfig& config, int64_t step,
                            int32_t full_dim, optim::ShardParams& shard, ThreadPool* pool,
                            Workspace* ws) {
  const int ns = optim::NumRowStats(config.type);
  SR_CHECK(ns == 0 || shard.cols == full_dim);
  Workspace local;
  if (ws == nullptr) ws = &local;
  const int64_t base = bags.num_bags > 0 ? bags.offsets[0] : 0;
  const int64_t n = bags.num_bags > 0 ? bags.offsets[bags.num_bags] - base : 0;
  detail::RowGroups g = detail::GroupByRow(bags.rows + base, n, ws, pool);
  Source src{bag_grads, grad_stride, BagOf(bags, ws, pool),
             bags.weights ? bags.weights + base : nullptr, scale};

  // Blocks of rows small enough that their gradients stay in L1/L2 between the phases; a fixed
  // set of tasks, each with its own slice of scratch.
  constexpr int64_t kBlockRows = 32;
  const int32_t cols = shard.cols;
  const int64_t num_blocks = (g.num_unique + kBlockRows - 1) / kBlockRows;
  const int64_t tasks =
      std::min<int64_t>(num_blocks, pool != nullptr ? int64_t{pool->num_threads()} * 4 : 1);
  if (tasks == 0) return 0;
  ws->block_grads.resize(static_cast<size_t>(tasks * kBlockRows * cols));
  ws->block_stats.resize(static_cast<size_t>(tasks * kBlockRows * std::max(ns, 1)));
  const int64_t elem = static_cast<int64_t>(DTypeSize(shard.dtype));
  const int64_t row_bytes = cols * elem;
  const int64_t row_stride_bytes = shard.stride * elem;
  const char* weights = static_cast<const char*>(shard.weights);
  // The first row-wise state (row-wise Adagrad's sum), if any, is touched once per row too.
  const float* row_state = nullptr;
  auto specs = optim::StateSpecs(config.type);
  if (!specs.empty() && specs[0].row_wise) row_state = shard.states[0];
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* grads = ws->block_grads.data() + t * kBlockRows * cols;
      float* stats = ws->block_stats.data() + t * kBlockRows * std::max(ns, 1);
      const int64_t blk_begin = num_blocks * t / tasks, blk_end = num_blocks * (t + 1) / tasks;
      // The weight rows are scattered: fetch the next block's rows while this block is summed
      // and updated, so the misses overlap with work.
      auto prefetch_block = [&](int64_t blk) {
        const int64_t u_end = std::min(g.num_unique, (blk + 1) * kBlockRows);
        for (int64_t u = blk * kBlockRows; u < u_end; ++u) {
          detail::PrefetchRowForWrite(weights + g.unique_rows[u] * row_stride_bytes, row_bytes);
          if (row_state != nullptr) __builtin_prefetch(row_state + g.unique_rows[u], 1, 3);
        }
      };
      if (blk_begin < blk_end) prefetch_block(blk_begin);
      for (int64_t blk = blk_begin; blk < blk_end; ++blk) {
        const int64_t u0 = blk * kBlockRows;
        const int64_t u1 = std::min(g.num_unique, u0 + kBlockRows);
        if (blk + 1 < blk_end) prefetch_block(blk + 1);
        AggregateRows(g, src, cols, u0, u1, grads);
        optim::RowUpdate update{
            std::span<const int64_t>(g.unique_rows + u0, static_cast<size_t>(u1 - u0)), grads};
        if (ns > 0) optim::PartialRowStats(config, step, shard, update, stats, nullptr);
        optim::Apply(config, step, full_dim, shard, update, ns > 0 ? stats : nullptr, nullptr);
      }
    }
  };
  if (pool != nullptr)
    pool->ParallelFor(0, tasks, 1, run);
  else
    run(0, tasks);
  return g.num_unique;
}

}  // namespace shardrec::embedding::kernels
