// An MLP whose parameters, gradients and activations live on a CUDA device and whose layers run
// through the plugin's cuBLASLt entries (device_linear.h). Same layers, tensor order, names and
// initial values as Mlp (the values are drawn on the host and copied once at creation).
//
// Stream behaviour: Forward, Backward and ZeroGrad only enqueue on the stream given at creation;
// Create waits for its parameter upload, and Destroy waits for the stream before freeing.
// Thread-safety: one thread at a time, as Mlp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "impl/core/cuda_plugin.h"
#include "impl/core/device.h"
#include "impl/core/status.h"
#include "impl/dense/layer.h"
#include "impl/dense/linear.h"
#include "impl/dense/lt_plan.h"
#include "impl/dense/tensor.h"

namespace shardrec::dense {

// The device implementation of DenseLayer (layer.h).
class DeviceMlp final : public DenseLayer {
 public:
  // Errors: kInvalidArgument (as Mlp::Create, a non-CUDA device, unknown math); kNoDevice
  // without plugin, driver or device; kUnsupported for a plugin without the dense entries;
  // kOutOfMemory. Nothing is left allocated on error.
  static Status Create(int64_t in, const std::vector<int64_t>& outs,
                       const std::vector<Activation>& acts, uint64_t seed, const std::string& name,
                       const Device& device, lt::Math math, Stream stream,
                       std::unique_ptr<DeviceMlp>* out);
  ~DeviceMlp() override;

  int64_t in_dim() const override { return in_; }
  int64_t out_dim() const override { return layers_.back().out; }
  Device device() const override { return device_; }
  // Device pointers; BindTensor takes device pointers too.
  const std::vector<DenseTensor>& tensors() const override { return tensors_; }
  Status BindTensor(size_t i, float* param, float* grad) override;

  // x and y are device pointers; x must stay valid until Backward has been enqueued and run.
  Status Forward(const float* x, int64_t batch, float* y) override;
  // kUnsupported: serving runs on the host only (no device inference path yet).
  Status Infer(const float* x, int64_t batch, float* y) const override;
  // dy and dx (may be null) are device pointers. on_ready(i) runs once tensor i's gradient
  // computation has been ENQUEUED (it is final on the stream, not yet on the host).
  Status Backward(const float* dy, float* dx, const std::function<void(size_t)>& on_ready) override;
  Status ZeroGrad() override;

 private:
  DeviceMlp() = default;
  Status Alloc(size_t bytes, void** out);
  Status Grow(std::vector<void*>* bufs, size_t l, size_t bytes);

  const core::CudaRuntime* rt_ = nullptr;
  Device device_;
  lt::Math math_ = lt::Math::kFp32;
  Stream stream_ = nullptr;
  int64_t in_ = 0;
  std::vector<LinearShape> layers_;
  std::vector<DenseTensor> tensors_;
  std::vector<void*> owned_;  // every device allocation, freed by the destructor
  // Per layer: output [batch, out] and ReLU mask, sized for capacity_ rows; gradient scratch.
  int64_t capacity_ = 0;
  std::vector<void*> outs_, aux_;
  std::vector<bool> aux_written_;
  void* dcur_ = nullptr;
  void* dnext_ = nullptr;
  const float* x_ = nullptr;
  int64_t batch_ = -1;
};

}  // namespace shardrec::dense
