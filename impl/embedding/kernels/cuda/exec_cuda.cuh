// The CUDA executor of the single-source kernels (simt/pipeline.h): generic kernels that run an
// op per warp item on device warps, the hot-row kernel (one block per row: the tree's levels with
// a barrier between them, then one team finishes the row), and CUB's device-wide steps with the
// caller's workspace (CUB's two-phase size query; nothing is allocated). Everything is enqueued on
// one stream; nothing synchronises.
//
// Not shared with the CPU (kept here, thin): launch configuration (256-thread blocks, at most
// kGridBlocks blocks, grid-stride loops over items), the block barrier of the hot-row tree, the
// CUB calls, error checking of launches.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include "impl/core/check.h"
#include "impl/core/simt_device.cuh"
#include "impl/core/status.h"
#include "impl/embedding/kernels/simt/pipeline.h"

namespace shardrec::embedding::kernels::cuda {

inline constexpr int kBlockThreads = 256;
inline constexpr int kWarpsPerBlock = kBlockThreads / simt::kWarpSize;
inline constexpr int64_t kGridBlocks = 1024;

inline Status CudaError(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Cuda(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

// Makes `device` current for the scope of a call and puts the previous one back.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device)
      ok_ = cudaSetDevice(device) == cudaSuccess;
    else
      previous_ = -1;
  }
  ~ScopedDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  bool ok() const { return ok_; }

 private:
  int previous_ = -1;
  bool ok_ = true;
};

inline int64_t GridFor(int64_t warp_items) {
  const int64_t blocks = (warp_items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return blocks < 1 ? 1 : (blocks > kGridBlocks ? kGridBlocks : blocks);
}

// Scratch teams a launch can have at once (fused short rows keep their gradient in a slot each).
inline int64_t MaxTeams(int32_t cols) {
  return kGridBlocks * kWarpsPerBlock * (simt::kWarpSize / simt::TeamSizeForCols(cols));
}

template <class Op>
__global__ void __launch_bounds__(kBlockThreads)
    WarpKernel(const __grid_constant__ Op op, int64_t count) {
  const int lane = static_cast<int>(threadIdx.x) & (simt::kWarpSize - 1);
  const int64_t id =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / simt::kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  simt::DeviceWarp w(id, lane);
  for (int64_t item = id; item < count; item += warps) op(w, item);
}

// Ops travel as __grid_constant__ kernel parameters: their tables (jobs, runs) are indexed at run
// time, which without it would copy the whole parameter into local memory.
// One block per hot row (found as the row of its first chunk): the tree over its chunk sums, a
// barrier after every level, then team 0 of warp 0 finishes the row.
template <class Op>
__global__ void __launch_bounds__(kBlockThreads) HotFinishKernel(const __grid_constant__ Op op) {
  const simt_body::BackwardArrays& a = op.a;
  const int64_t total = a.hot_off[a.n];
  const int g = simt::TeamSizeForCols(a.cols);
  for (int64_t k = blockIdx.x; k < total; k += gridDim.x) {
    const int64_t u = simt_body::HotRowOf(a, k);
    if (a.hot_off[u] != k) continue;  // uniform over the block
    const int64_t m = op.Chunks(u);
    float* p = op.Partials(u);
    // Element (pair, column) of a level is walked with a carried column counter: a 64-bit
    // division would be a subroutine call, whose saved registers spill on sm_80.
    const int dp = static_cast<int>(blockDim.x) / a.cols,
              dc = static_cast<int>(blockDim.x) % a.cols;
    for (int64_t s = 1, shift = 1; s < m; s *= 2, ++shift) {
      const int64_t pairs = (m + s - 1) >> shift;  // s is 2^(shift - 1)
      int64_t pair = static_cast<int>(threadIdx.x) / a.cols;
      int c = static_cast<int>(threadIdx.x) % a.cols;
      for (; pair < pairs; pair += dp) {
        simt_body::TreeAdd(p, a.cols, pair * 2 * s, s, c);
        c += dc;
        if (c >= a.cols) {
          c -= a.cols;
          ++pair;
        }
      }
      __syncthreads();
    }
    if (threadIdx.x < simt::kWarpSize) {
      simt::DeviceWarp w(0, static_cast<int>(threadIdx.x));
      w.ForEachTeam(g, [&](auto& t) {
        if (t.index() == 0) op.Finish(t, u);
      });
    }
    __syncthreads();
  }
}

// CUB temporary storage of the three device-wide steps for n items, the largest of them.
inline Status CubTempBytes(int64_t n, size_t* bytes) {
  size_t sort = 0, rle = 0, scan = 0;
  const int items = static_cast<int>(n < 1 ? 1 : n);
  SR_RETURN_IF_ERROR(CudaError(
      cub::DeviceRadixSort::SortPairs(
          nullptr, sort, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
          static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), items),
      "cub::DeviceRadixSort size query"));
  SR_RETURN_IF_ERROR(CudaError(
      cub::DeviceRunLengthEncode::Encode(
          nullptr, rle, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
          static_cast<int64_t*>(nullptr), static_cast<int64_t*>(nullptr), items),
      "cub::DeviceRunLengthEncode size query"));
  SR_RETURN_IF_ERROR(
      CudaError(cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<const int64_t*>(nullptr),
                                              static_cast<int64_t*>(nullptr), items + 1),
                "cub::DeviceScan size query"));
  *bytes = sort > rle ? sort : rle;
  if (scan > *bytes) *bytes = scan;
  return Status::Ok();
}

// What every executor of the single-source steps holds (CudaExec below, thread_exec.cuh's
// ThreadExec): the stream it enqueues on, the caller's CUB scratch, and the first failure, after
// which every step is skipped (status() keeps it). The steps both executors take live here too.
class StreamExec {
 public:
  StreamExec(cudaStream_t stream, void* temp, size_t temp_bytes)
      : stream_(stream), temp_(temp), temp_bytes_(temp_bytes) {}

  void ExclusiveSum(const int64_t* in, int64_t* out, int64_t n) {
    if (!status_.ok() || n <= 0) return;
    size_t bytes = temp_bytes_;
    Check(cub::DeviceScan::ExclusiveSum(temp_, bytes, in, out, static_cast<int>(n), stream_),
          "cub::DeviceScan::ExclusiveSum");
  }
  void Zero(void* p, size_t bytes) {
    if (!status_.ok() || bytes == 0) return;
    Check(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync");
  }
  const Status& status() const { return status_; }

 protected:
  void Check(cudaError_t e, const char* what) {
    if (status_.ok()) static_cast<void>(status_ = CudaError(e, what));
  }

  cudaStream_t stream_;
  void* temp_;
  size_t temp_bytes_;
  Status status_;
};

// The executor the pipeline runs on.
class CudaExec : public StreamExec {
 public:
  using StreamExec::StreamExec;

  template <class Op>
  void Warps(int64_t count, const Op& op) {
    if (!status_.ok() || count <= 0) return;
    WarpKernel<Op><<<static_cast<unsigned>(GridFor(count)), kBlockThreads, 0, stream_>>>(op, count);
    Check(cudaGetLastError(), "kernel launch");
  }
  void SortPairs(const uint64_t* kin, uint64_t* kout, const uint32_t* vin, uint32_t* vout,
                 int64_t n, int end_bit) {
    if (!status_.ok()) return;
    size_t bytes = temp_bytes_;
    Check(cub::DeviceRadixSort::SortPairs(temp_, bytes, kin, kout, vin, vout, static_cast<int>(n),
                                          0, end_bit, stream_),
          "cub::DeviceRadixSort::SortPairs");
  }
  void RunLengthEncode(const uint64_t* keys, uint64_t* unique, int64_t* counts, int64_t* num_runs,
                       int64_t n) {
    if (!status_.ok()) return;
    size_t bytes = temp_bytes_;
    Check(cub::DeviceRunLengthEncode::Encode(temp_, bytes, keys, unique, counts, num_runs,
                                             static_cast<int>(n), stream_),
          "cub::DeviceRunLengthEncode::Encode");
  }
  template <class Op>
  void HotFinish(const Op& op, int64_t max_rows) {
    if (!status_.ok() || max_rows <= 0) return;
    const int64_t blocks = max_rows < kGridBlocks ? max_rows : kGridBlocks;
    HotFinishKernel<Op><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream_>>>(op);
    Check(cudaGetLastError(), "hot-row kernel launch");
  }
};

}  // namespace shardrec::embedding::kernels::cuda
