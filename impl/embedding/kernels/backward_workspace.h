// Internal: how the host backward kernels carve their caller-owned workspace. The first bytes
// hold the grouping that GroupRows computed, so step 2 (AggregateGrads / FusedBackward) can
// find it; the arrays follow, each 64-byte aligned. Sizes depend only on the id count, the
// thread count of the context and, for the fused blocks, on cols and the row statistics.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "impl/embedding/kernels/isa/fused_rows.h"

namespace shardrec::embedding::kernels::detail {

inline constexpr int kRadixBits = 11;
inline constexpr int kRadixBuckets = 1 << kRadixBits;
// Digits of a 64-bit key: the sort counts all of them in one pass, so each has its histograms.
inline constexpr int kRadixDigits = (64 + kRadixBits - 1) / kRadixBits;

// Written by GroupRows at the start of the workspace. A key's low bits (index_mask) hold the
// bag of the id when every run is unweighted (its gradient row is all step 2 needs, and the
// per-bag table of gradient offsets is small enough to stay in cache), else its position (which
// also finds its weight). Bags are numbered across the runs in order, so either index grows with
// the position and the stable sort keeps each row's ids in position order.
struct Grouping {
  int64_t num_ids = 0;
  int64_t num_unique = 0;
  int64_t num_bags = 0;     // bags of all runs (the bag index range)
  uint64_t index_mask = 0;  // index bits of a key; all ones when keys hold bare positions
  int32_t index_bits = 0;
  int32_t keyed_by_bag = 0;  // 1: the index is the bag, 0: the position
  int32_t threads = 1;
  size_t workspace_bytes = 0;
};

struct WorkspaceLayout {
  size_t keys = 0;          // uint64[n]: (row << index_bits | bag or position), sorted
  size_t keys_tmp = 0;      // uint64[n]: radix ping-pong buffer
  size_t segments = 0;      // int64[n + 1]: start of each unique row's keys
  size_t unique_rows = 0;   // int64[n]
  size_t grad_rows = 0;     // 8-byte[n]: each bag's (or position's) gradient row (a pointer)
  size_t weight = 0;        // float[n]: per-position weight (weighted runs only)
  size_t histograms = 0;    // uint32[kRadixDigits * parts * kRadixBuckets]
  size_t task_grads = 0;    // float[tasks * 2 * FusedRowsScratchFloats(cols)]: each fused task's
                            // summed gradient row and widened 16-bit row
  size_t grouping_end = 0;  // bytes needed without the fused tasks' rows
  size_t total = 0;         // bytes needed with them
  int64_t tasks = 1;        // fused tasks
};

inline size_t AlignUp(size_t n) { return (n + 63) & ~size_t{63}; }

// The fused update computes a row's statistics inside its update (isa/fused_rows.h), so
// `num_row_stats` takes no room here; it stays in the signature, as in BackwardWorkspaceBytes'.
inline WorkspaceLayout MakeLayout(int64_t n, int threads, int32_t cols,
                                  [[maybe_unused]] int num_row_stats) {
  WorkspaceLayout l;
  const size_t un = static_cast<size_t>(std::max<int64_t>(n, 0));
  size_t off = AlignUp(sizeof(Grouping));
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = AlignUp(off + bytes);
    return at;
  };
  l.keys = take(8 * un);
  l.keys_tmp = take(8 * un);
  l.segments = take(8 * (un + 1));
  l.unique_rows = take(8 * un);
  l.grad_rows = take(8 * un);
  l.weight = take(4 * un);
  l.histograms = take(4 * static_cast<size_t>(kRadixDigits) *
                      static_cast<size_t>(std::max(threads, 1)) * kRadixBuckets);
  l.grouping_end = off;
  l.tasks = std::max<int64_t>(1, int64_t{std::max(threads, 1)} * 4);
  l.task_grads = take(4 * static_cast<size_t>(l.tasks) * 2 *
                      static_cast<size_t>(isa::FusedRowsScratchFloats(std::max(cols, 0))));
  l.total = off;
  return l;
}

template <typename T>
T* At(void* workspace, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(workspace) + offset);
}

}  // namespace shardrec::embedding::kernels::detail
