// CPU embedding kernels (the reference twins of the future CUDA kernels): pooled and sequence
// lookups, and per-row gradient aggregation with duplicate ids summed.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/core/dtype.h"
#include "impl/optim/optimizer.h"

namespace shardrec {
class ThreadPool;
}

namespace shardrec::embedding::kernels {

// A local shard's weights: rows x cols of `dtype`, row stride `stride` elements.
struct WeightsView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t rows = 0;
  int32_t cols = 0;
  int64_t stride = 0;
};

// Bags in CSR form: bag b holds ids [offsets[b], offsets[b+1]); `rows` are local row indices
// (already validated to be in [0, rows)); `weights` are per-id weights or nullptr.
struct Bags {
  const int64_t* offsets = nullptr;  // num_bags + 1 entries
  int64_t num_bags = 0;
  const int64_t* rows = nullptr;
  const float* weights = nullptr;
};

// out[b * out_stride + c] = sum over ids i of bag b of weight_i * W[rows[i]][c], c < cols.
// Always a SUM (MEAN is a divide done by the caller). Empty bags give zeros. `pool` may be null
// (single-threaded).
void PooledLookup(const WeightsView& w, const Bags& bags, float* out, int64_t out_stride,
                  ThreadPool* pool);

// out[i * out_stride + c] = W[rows[i]][c] (times weights[i] when weights != nullptr).
void SequenceLookup(const WeightsView& w, const int64_t* rows, const float* weights, int64_t n,
                    float* out, int64_t out_stride, ThreadPool* pool);

// Gradient of a pooled lookup, aggregated per unique row: for every id i in bag b,
// grad[row_i] += scale * weight_i * bag_grads[b * grad_stride + c]. Writes the sorted unique
// rows and their gradients (unique_rows.size() x cols, row-major).
void AggregatePooledGrads(const Bags& bags, const float* bag_grads, int64_t grad_stride,
                          int32_t cols, float scale, std::vector<int64_t>* unique_rows,
                          std::vector<float>* row_grads, ThreadPool* pool);

// Gradient of a sequence lookup: grad[rows[i]] += scale * weight_i * id_grads[i * stride + c].
void AggregateSequenceGrads(const int64_t* rows, const float* weights, int64_t n,
                            const float* id_grads, int64_t grad_stride, int32_t cols, float scale,
                            std::vector<int64_t>* unique_rows, std::vector<float>* row_grads,
                            ThreadPool* pool);

// Tuning knobs of the lookups. prefetch_distance: how many ids ahead rows are software-
// prefetched (0 = off); the default suits DRAM-resident tables.
struct LookupOptions {
  int32_t prefetch_distance = 12;
};
void PooledLookup(const WeightsView& w, const Bags& bags, float* out, int64_t out_stride,
                  ThreadPool* pool, const LookupOptions& options);

// Scratch memory of the backward kernels (sorted row keys, segment bounds, bag of each id, per-
// thread gradient blocks). Keep one per table (or per concurrent call) and pass it on every step:
// after the first step of a given size no allocation happens. Contents are internal.
struct Workspace {
  std::vector<uint64_t> keys;
  std::vector<uint64_t> keys_tmp;
  std::vector<int64_t> segments;  // unique rows + 1 segment starts into `keys`
  std::vector<int32_t> bag_of;
  std::vector<int64_t> unique_rows;
  std::vector<float> block_grads;  // fused path: per-block aggregated gradients and statistics
  std::vector<float> block_stats;
};

// The same kernels with caller-held scratch (`ws` may be null: a temporary is used). Results are
// bit-identical to the overloads above and independent of the pool's thread count.
void AggregatePooledGrads(const Bags& bags, const float* bag_grads, int64_t grad_stride,
                          int32_t cols, float scale, std::vector<int64_t>* unique_rows,
                          std::vector<float>* row_grads, ThreadPool* pool, Workspace* ws);
void AggregateSequenceGrads(const int64_t* rows, const float* weights, int64_t n,
                            const float* id_grads, int64_t grad_stride, int32_t cols, float scale,
                            std::vector<int64_t>* unique_rows, std::vector<float>* row_grads,
                            ThreadPool* pool, Workspace* ws);

// Backward of a pooled lookup fused with the optimizer update: unique rows are processed in
// blocks whose gradients stay in cache (aggregate, PartialRowStats, Apply), so the aggregated
// gradients never travel through memory. Only valid when no statistic has to be summed across
// column shards: NumRowStats(config.type) == 0 or shard.cols == full_dim. The result equals
// AggregatePooledGrads followed by PartialRowStats and Apply (bit-identical for fp32).
// Returns the number of unique rows updated.
int64_t PooledBackwardFused(const Bags& bags, const float* bag_grads, int64_t grad_stride,
                            float scale, const optim::OptimizerConfig& config, int64_t step,
                            int32_t full_dim, optim::ShardParams& shard, ThreadPool* pool,
                            Workspace* ws);

}  // namespace shardrec::embedding::kernels
