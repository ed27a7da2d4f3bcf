// CUDA twin of the input distribution's routing (device_route.h): the steps of simt/route_body.h
// (the code the CPU tests run against RouteBatch) on the device, one thread per item, with CUB's
// exclusive scan in the caller's scratch. Everything is enqueued on the context's stream; nothing
// synchronises and nothing allocates.
//
// Not shared with the CPU: the launch configuration (256-thread blocks, at most kGridBlocks
// blocks, grid-stride loops over items), the CUB scan and its size query, memset, launch checks.
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_scan.cuh>

#include "impl/embedding/kernels/cuda/exec_cuda.cuh"
#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/embedding/kernels/simt/route_body.h"

namespace shardrec::embedding::kernels::cuda {

namespace {

// One thread per item; the op travels as a __grid_constant__ parameter (its tables are indexed
// at run time, which would otherwise copy it into local memory).
template <class Op>
__global__ void __launch_bounds__(kBlockThreads)
    ThreadKernel(const __grid_constant__ Op op, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride)
    op(i);
}

// The executor of RouteCountSteps / RouteFillSteps: StreamExec's scan and memset, and a launch
// of one thread per item.
class RouteExec : public StreamExec {
 public:
  using StreamExec::StreamExec;

  template <class Op>
  void Threads(int64_t count, const Op& op) {
    if (!status_.ok() || count <= 0) return;
    int64_t blocks = (count + kBlockThreads - 1) / kBlockThreads;
    if (blocks > kGridBlocks) blocks = kGridBlocks;
    ThreadKernel<Op><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream_>>>(op, count);
    Check(cudaGetLastError(), "route kernel launch");
  }
};

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
  RouteExec ex(static_cast<cudaStream_t>(ctx.stream()), temp, temp_bytes);
  simt_body::RouteCountSteps(ex, p);
  return ex.status();
}

Status RouteFill(const ExecContext& ctx, const simt_body::RouteParams& p, void* temp,
                 size_t temp_bytes) {
  SR_RETURN_IF_ERROR(CheckScanSize(p));
  RouteExec ex(static_cast<cudaStream_t>(ctx.stream()), temp, temp_bytes);
  simt_body::RouteFillSteps(ex, p);
  return ex.status();
}

}  // namespace shardrec::embedding::kernels::cuda
