// CUDA twin of Lookup (kernels.h): every job of a rank in one launch of LookupItem
// (simt/lookup_body.h, the code the CPU tests run against lookup_cpu.cc), and the status block.
//
// Not shared with the CPU: the job table is a kernel parameter (kMaxLookupJobs jobs per launch),
// the launch configuration (exec_cuda.cuh), the status block's copy to the host.
#include <cuda_runtime.h>

#include <memory>

#include "impl/embedding/kernels/cuda/exec_cuda.cuh"
#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/embedding/kernels/simt/lookup_body.h"

namespace shardrec::embedding::kernels::cuda {

namespace {

struct LookupOp {
  simt_body::LookupParams p;
  template <class Warp>
  __device__ void operator()(Warp& w, int64_t item) const {
    simt_body::LookupItem(w, p, item);
  }
};

}  // namespace

size_t StatusBytes() { return sizeof(simt_body::DeviceStatus); }

Status ReadStatus(const ExecContext& ctx, void* status_block, const char* what) {
  if (status_block == nullptr) return Status::Ok();
  ScopedDevice dev(ctx.device().index);
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  simt_body::DeviceStatus st;
  SR_RETURN_IF_ERROR(
      CudaError(cudaMemcpyAsync(&st, status_block, sizeof(st), cudaMemcpyDeviceToHost, stream),
                "status block copy"));
  SR_RETURN_IF_ERROR(CudaError(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  // Zero bytes are the clear state; the reset is ordered before the stream's next kernel.
  SR_RETURN_IF_ERROR(
      CudaError(cudaMemsetAsync(status_block, 0, sizeof(st), stream), "status block reset"));
  if (st.code == simt_body::kStatusRowOutOfRange)
    return Status::InvalidArgument(what, ": a row outside its shard at position ",
                                   simt_body::FirstPosition(st), " (left out)");
  if (st.code == simt_body::kStatusIdOutOfRange)
    return Status::InvalidArgument(what, ": id at position ", simt_body::FirstPosition(st),
                                   " is out of range of its table");
  return Status::Ok();
}

Status Lookup(const ExecContext& ctx, std::span<const LookupJob> jobs, void* status_block) {
  if (!ctx.is_cuda())
    return Status::Unsupported("Lookup: the CUDA kernel got a ", ctx.device().ToString(),
                               " context");
  ScopedDevice dev(ctx.device().index);
  if (!dev.ok()) return Status::Cuda("cannot select ", ctx.device().ToString());
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  CudaExec ex(stream, nullptr, 0);
  auto op = std::make_unique<LookupOp>();
  for (size_t first = 0; first < jobs.size(); first += simt_body::kMaxLookupJobs) {
    simt_body::LookupParams& p = op->p;
    p.num_jobs = 0;
    p.status = static_cast<simt_body::DeviceStatus*>(status_block);
    int64_t items = 0;
    for (size_t j = first; j < jobs.size() && j < first + simt_body::kMaxLookupJobs; ++j) {
      const LookupJob& job = jobs[j];
      const DType dt = job.weights.dtype;
      if (dt != DType::kFloat32 && dt != DType::kFloat16 && dt != DType::kBFloat16)
        return Status::InvalidArgument("Lookup: weights of dtype ", DTypeName(dt));
      if (job.weights.cols <= 0 || job.run.num_bags == 0) continue;
      simt_body::LookupJobDesc d;
      d.weights = job.weights.data;
      d.rows = job.weights.rows;
      d.stride = job.weights.stride;
      d.offsets = job.run.offsets;
      d.ids = job.run.rows;
      d.id_weights = job.run.weights;
      d.out = job.out;
      d.io_offset = job.run.io_offset;
      d.out_stride = job.out_stride;
      d.num_bags = job.run.num_bags;
      d.cols = job.weights.cols;
      d.dtype = static_cast<int32_t>(dt);
      p.first_item[p.num_jobs] = items;
      items += simt_body::PrepareJob(d);
      p.jobs[p.num_jobs++] = d;
    }
    p.first_item[p.num_jobs] = items;
    ex.Warps(items, *op);
  }
  return ex.status();
}

}  // namespace shardrec::embedding::kernels::cuda
