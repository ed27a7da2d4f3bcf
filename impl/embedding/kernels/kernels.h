// CPU embedding kernels (the reference twins of the future CUDA kernels): pooled and sequence
// lookups, and per-row gradient aggregation with duplicate ids summed.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/core/dtype.h"

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

}  // namespace shardrec::embedding::kernels
