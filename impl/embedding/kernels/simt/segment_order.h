// The order in which a unique row's gradient contributions are summed, shared by the CPU twin
// (backward_cpu.cc) and the device kernels: the row's ids, in position order, are cut into chunks
// of kSegmentChunk; each chunk is summed in order (first term assigned, then added); the chunk
// sums meet in a fixed pairwise tree: for s = 1, 2, 4, ...: P[i] = P[i] + P[i + s] for every
// i = 0, 2s, 4s, ... with i + s < m. A row with at most kSegmentChunk ids is one sequential sum.
// On a GPU the chunks of a hot row go to different warps and the tree to one block, so a row in
// every bag is not serialised on one warp, and the result is still the same bits every time.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"

namespace shardrec::embedding::kernels::simt_body {

inline constexpr int64_t kSegmentChunk = 32;

// Chunks of a row with `len` ids (1 for a short row).
SHARDREC_HD int64_t SegmentChunks(int64_t len) {
  return len <= kSegmentChunk ? 1 : (len + kSegmentChunk - 1) / kSegmentChunk;
}

// Chunks that go through the tree: 0 for a short row (summed straight into its destination).
SHARDREC_HD int64_t HotChunks(int64_t len) { return len <= kSegmentChunk ? 0 : SegmentChunks(len); }

// One element of one tree level: P is m chunk sums of `cols` floats; `s` the level's stride.
SHARDREC_HD void TreeAdd(float* p, int64_t cols, int64_t i, int64_t s, int64_t c) {
  p[i * cols + c] = p[i * cols + c] + p[(i + s) * cols + c];
}

// The whole tree, level by level (CPU twin; a device block runs the same levels with a barrier
// between them). The row's sum ends in p[0, cols).
inline void TreeCombine(float* p, int64_t m, int64_t cols) {
  for (int64_t s = 1; s < m; s *= 2)
    for (int64_t i = 0; i + s < m; i += 2 * s)
      for (int64_t c = 0; c < cols; ++c) TreeAdd(p, cols, i, s, c);
}

}  // namespace shardrec::embedding::kernels::simt_body
