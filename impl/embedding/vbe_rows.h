// The row kernels of a VBE batch's expansion (vbe.h, docs/variable-batch.md): a feature whose
// samples read its B_f bags through inverse indices has its bag rows copied to its columns of
// every output sample in the forward, and the gradient's columns of those samples summed back
// into the bags in the backward. Both are bound by memory traffic, so each is one pass over the
// output rows in sample order: ExpandRows writes each expanded element once (streaming the cache
// lines it writes whole, so they are not read first), ReduceRows reads each expanded gradient
// element once and sums a run of samples that read one bag in registers.
#pragma once

#include <cstdint>
#include <span>

namespace shardrec::embedding {

// One expanded feature: sample b's columns [col, col + width) of an output row copy (or sum into)
// bag inverse[b]'s row, at bags + bag_offset + inverse[b] * width in the bag buffer.
struct ExpandedFeature {
  int64_t bag_offset = 0;
  int64_t num_bags = 0;  // B_f
  int64_t width = 0;
  int64_t col = 0;
  const int64_t* inverse = nullptr;  // one entry per output sample, each in [0, B_f)
  // The columns [span_begin, span_end) of an output row that the expanded features of the call
  // cover together, this feature's among them: the cache lines inside a span are written whole
  // by ExpandRows, so it may stream them.
  int64_t span_begin = 0;
  int64_t span_end = 0;
};

// Output rows [b0, b1) (row b at out + b * row_stride): each feature's columns set to its bag's
// row, feature by feature within a row; the other columns are left alone. With `stream`, the
// 16-byte-aligned pieces of the cache lines that lie inside a span are stored with streaming
// (non-temporal) stores, which write a line without reading it first and leave it out of the
// caches (worth it only for an output larger than the caches: VbeStep::Expand decides); the
// stores are fenced before the call returns. The copied bits are the bag rows' in every case.
void ExpandRows(std::span<const ExpandedFeature> features, const float* bags, float* out,
                int64_t row_stride, int64_t b0, int64_t b1, bool stream);

// For each feature, each bag row += the gradient's columns of the rows in [b0, b1) that read it
// (row b at grad + b * row_stride), added one row at a time in ascending b: a run of consecutive
// rows that read one bag is summed in registers starting from the bag's value and stored once,
// which is the same sequence of additions as adding each row into the bag. Called on consecutive
// row ranges in ascending order, a bag that starts at +0 ends as the sum of its rows in
// ascending sample order starting from +0.
void ReduceRows(std::span<const ExpandedFeature> features, const float* grad, int64_t row_stride,
                int64_t b0, int64_t b1, float* bags);

// Asks for floats [0, cols) of rows [b0, b1) (row b at rows + b * row_stride) to be brought into
// the second-level cache: the next tile of a walk whose reads skip from row to row in a way the
// hardware prefetchers do not follow (ReduceRows reads a few columns of each row per feature).
void PrefetchRowsToL2(const float* rows, int64_t row_stride, int64_t cols, int64_t b0, int64_t b1);

}  // namespace shardrec::embedding
