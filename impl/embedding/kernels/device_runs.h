// One shard's backward runs as a device kernel takes them: the run descriptors live on the host,
// the arrays they point to in device memory, and the counts a device cannot read without a
// synchronisation (ids per run, rows of the shard) come from the host. Shared by the CUDA twins
// (cuda/kernels_cuda.h) and the CUDA-free dispatch through the plugin (dispatch.h).
#pragma once

#include <cstdint>
#include <span>

#include "impl/embedding/kernels/kernels.h"

namespace shardrec::embedding::kernels {

struct DeviceRuns {
  std::span<const BagRun> runs;      // pointers into device memory
  std::span<const int64_t> num_ids;  // ids of each run
  int64_t num_rows = 0;              // rows of the shard (sorts only the bits they need)
};

// A list of rows whose length only the device knows (a compaction's, or 0 when a step's verdict
// shut its gate): the first *count of rows[0, max_rows) and their gradients ([max_rows, cols]);
// `count` is device memory, read by the kernel, so no host synchronisation learns it.
struct CountedRows {
  const int64_t* rows = nullptr;
  const float* grads = nullptr;
  const int64_t* count = nullptr;
  int64_t max_rows = 0;
};

}  // namespace shardrec::embedding::kernels
