// CUDA twin of the input distribution's routing (route.h): the steps of simt/route_body.h
// (the code the CPU tests run against RouteBatch) on the device, one thread per item, with CUB's
// exclusive scan in the caller's scratch. Everything is enqueued on the context's stream; nothing
// synchronises and nothing allocates.
//
// Not shared with the CPU: the executor (thread_exec.cuh: one thread per item, CUB's scan), the
// scan's size query.
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_scan.cuh>

#include "impl/embedding/kernels/cuda/exec_cuda.cuh"
#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/embedding/kernels/cuda/thread_exec.cuh"
#include "impl/embedding/kernels/simt/route_body.h"

namespace shardrec::embedding::kernels::cuda {

namespace {

// The longest scan of a route: CUB counts items in int.
Status CheckScanSize(const simt_body::RouteParams& p) {
  const int64_t cells = static_cast<int64_t>(p.num_slots) * p.batch_size;
  const int64_t n = (p.num_lengths > cells ? p.num_lengths : cells) + 1;
  if (n > INT_MAX) return Status::InvalidArgument("route: ", n, " scan items, at most ", INT_MAX);
  return Status::Ok();
}

}  // namespace

Status RouteTempBytes(const ExecContext& ctx, int64_t max_items, size_t* bytes) {
  if (max_items < 1 || max_items > INT_MAX)
    return Status::InvalidArgument("route scratch for ", max_items, " items (1 .. ", INT_MAX, ")");
  ScopedDevice dev(ctx.device().index);
  *bytes = 0;
  return CudaError(
      cub::DeviceScan::ExclusiveSum(nullptr, *bytes, static_cast<const int64_t*>(nullptr),
                                    static_cast<int64_t*>(nullptr), static_cast<int>(max_items)),
      "cub::DeviceScan size query");
}

Status RouteCount(const ExecContext& ctx, const simt_body::RouteParams& p, void* temp,
                  size_t temp_bytes) {
  SR_RETURN_IF_ERROR(CheckScanSize(p));
  ThreadExec ex(static_cast<cudaStream_t>(ctx.stream()), temp, temp_bytes);
  simt_body::RouteCountSteps(ex, p);
  return ex.status();
}

Status RouteFill(const ExecContext& ctx, const simt_body::RouteParams& p, void* temp,
                 size_t temp_bytes) {
  SR_RETURN_IF_ERROR(CheckScanSize(p));
  ThreadExec ex(static_cast<cudaStream_t>(ctx.stream()), temp, temp_bytes);
  simt_body::RouteFillSteps(ex, p);
  return ex.status();
}

}  // namespace shardrec::embedding::kernels::cuda
