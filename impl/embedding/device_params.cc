// The device side of the parameter store (a GPU collection): arenas allocated through the CUDA
// plugin, initialised from values generated on the host, and shard copies through the host for
// the accessors. The kernels read and write these arenas in place; the host never touches them.
#include <algorithm>
#include <vector>

#include "impl/core/cuda_plugin.h"
#include "impl/core/half.h"
#include "impl/embedding/param_store.h"

namespace shardrec::embedding {

namespace {

size_t StorageBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

// Rows per host-generated chunk of the initialisation: about 4 MiB of fp32 values.
int64_t ChunkRows(int32_t cols) {
  return std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int32_t>(1, cols));
}

}  // namespace

Status ParamStore::AllocateDevice() {
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  const int dev = device_.index;
  if (dev < 0 || dev >= rt->DeviceCount())
    return Status::NoDevice("no CUDA device ", dev, " (", rt->DeviceCount(), " visible)");
  const size_t fp32_bytes = sizeof(float) * (layout_->weights_size + layout_->states_size);
  const size_t fp16_bytes = 2 * layout_->weights_fp16_size;
  const size_t bf16_bytes = 2 * layout_->weights_bf16_size;
  const char* what = "this rank's tables (weights and optimizer states)";
  SR_RETURN_IF_ERROR(dev_params_.Reserve(dev, fp32_bytes, what));
  SR_RETURN_IF_ERROR(dev_fp16_.Reserve(dev, fp16_bytes, what));
  SR_RETURN_IF_ERROR(dev_bf16_.Reserve(dev, bf16_bytes, what));
  // Zero states, as the host arenas start; the weights are written by Initialise.
  const Stream stream = nullptr;
  if (fp32_bytes > 0)
    SR_RETURN_IF_ERROR(rt->MemsetAsync(dev, dev_params_.data(), 0, fp32_bytes, stream));
  if (fp16_bytes > 0)
    SR_RETURN_IF_ERROR(rt->MemsetAsync(dev, dev_fp16_.data(), 0, fp16_bytes, stream));
  if (bf16_bytes > 0)
    SR_RETURN_IF_ERROR(rt->MemsetAsync(dev, dev_bf16_.data(), 0, bf16_bytes, stream));
  return rt->StreamWait(dev, stream, core::kDeviceWaitMs);
}

Status ParamStore::CopyRows(const LocalShard& ls, int32_t state, int64_t row0, int64_t rows,
                            void* host, bool to_device) {
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  size_t elem = 4;
  size_t width = static_cast<size_t>(ls.cols);
  uint8_t* base = nullptr;
  if (state >= 0) {
    if (layout_->tables[ls.table].state_specs[state].row_wise) width = 1;
    base = reinterpret_cast<uint8_t*>(State(ls, static_cast<size_t>(state)));
  } else {
    elem = StorageBytes(ls.dtype);
    base = static_cast<uint8_t*>(ShardWeights(ls));
  }
  const size_t bytes = static_cast<size_t>(rows) * width * elem;
  if (bytes == 0) return Status::Ok();
  uint8_t* dev = base + static_cast<size_t>(row0) * width * elem;
  const Stream stream = nullptr;
  if (to_device) {
    SR_RETURN_IF_ERROR(
        rt->MemcpyAsync(device_.index, dev, host, bytes, core::CopyKind::kHostToDevice, stream));
  } else {
    SR_RETURN_IF_ERROR(
        rt->MemcpyAsync(device_.index, host, dev, bytes, core::CopyKind::kDeviceToHost, stream));
  }
  // Pageable host memory: the copy may return before it is done, and `host` is the caller's.
  return rt->StreamWait(device_.index, stream, core::kDeviceWaitMs);
}

Status ParamStore::InitialiseDevice(uint64_t seed) {
  std::vector<float> rows;
  std::vector<uint16_t> half;
  for (const LocalShard& ls : layout_->local) {
    const InitRange init = InitOf(ls);
    const int64_t chunk = ChunkRows(ls.cols);
    for (int64_t r0 = 0; r0 < ls.rows; r0 += chunk) {
      const int64_t n = std::min(chunk, ls.rows - r0);
      rows.resize(static_cast<size_t>(n) * ls.cols);
      for (int64_t r = 0; r < n; ++r)
        InitRow(init, seed, ls, static_cast<uint64_t>(ls.row_offset + r0 + r),
                rows.data() + r * ls.cols);
      if (ls.dtype == DType::kFloat32) {
        SR_RETURN_IF_ERROR(CopyRows(ls, -1, r0, n, rows.data(), true));
        continue;
      }
      // Rounded to the storage type exactly as the host store's WriteRow does.
      half.resize(rows.size());
      const bool fp16 = ls.dtype == DType::kFloat16;
      for (size_t i = 0; i < rows.size(); ++i)
        half[i] = fp16 ? FloatToHalf(rows[i]) : FloatToBFloat16(rows[i]);
      SR_RETURN_IF_ERROR(CopyRows(ls, -1, r0, n, half.data(), true));
    }
  }
  return Status::Ok();
}

}  // namespace shardrec::embedding
