// CUDA twin of the full row statistics' sum of a column shard (simt/stats_body.h, the code the CPU
// tests run against the host's order), one thread per element. Everything is enqueued on the
// context's stream; nothing synchronises and nothing allocates.
//
// Not shared with the CPU: the executor (thread_exec.cuh), argument checks.
#include <cuda_runtime.h>

#include <cstdint>

#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/embedding/kernels/cuda/thread_exec.cuh"
#include "impl/embedding/kernels/simt/stats_body.h"

namespace shardrec::embedding::kernels::cuda {

Status SumSources(const ExecContext& ctx, const simt_body::SumSourcesParams& p) {
  if (p.num_sources < 0 || p.num_sources > simt_body::kMaxSumSources || p.row_floats < 0 ||
      p.max_rows < 0)
    return Status::InvalidArgument("SumSources: ", p.num_sources, " sources (at most ",
                                   simt_body::kMaxSumSources, "), or negative sizes");
  if (p.count == nullptr) return Status::InvalidArgument("SumSources: no row count");
  ScopedDevice dev(ctx.device().index);
  if (!dev.ok()) return Status::Cuda("cannot select ", ctx.device().ToString());
  ThreadExec ex(static_cast<cudaStream_t>(ctx.stream()), nullptr, 0);
  simt_body::SumSourcesSteps(ex, p);
  return ex.status();
}

}  // namespace shardrec::embedding::kernels::cuda
