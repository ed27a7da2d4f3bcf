// A multi-layer perceptron: a stack of linear layers with activations, its parameters and
// gradients held as DenseTensors (weight then bias per layer) that a bucketer or a sharded
// wrapper may rebind to storage of its own.
//
// Thread-safety: one thread at a time, except Infer (const), which any number of threads may run
// at once while nothing else runs. Forward keeps the layer inputs and outputs of its batch
// for the following Backward; a second Forward replaces them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/dense/linear.h"
#include "impl/dense/tensor.h"

namespace shardrec::dense {

class Mlp {
 public:
  // `in` inputs, then one layer per entry of `outs` with the activation in `acts` (same length).
  // Initial values as PyTorch's nn.Linear: weight and bias uniform in +-1/sqrt(fan_in), drawn
  // from a counter RNG keyed by (seed, name, layer, element), so every rank starts identical.
  static Status Create(int64_t in, const std::vector<int64_t>& outs,
                       const std::vector<Activation>& acts, uint64_t seed, const std::string& name,
                       std::unique_ptr<Mlp>* out);

  int64_t in_dim() const { return in_; }
  int64_t out_dim() const { return layers_.back().out; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const LinearShape& layer(int l) const { return layers_[l]; }
  // Parameter count of layer l (weight then bias, contiguous in the MLP's own storage).
  int64_t layer_params(int l) const { return layers_[l].out * (layers_[l].in + 1); }

  // 2 per layer: index 2l is layer l's weight [out, in], 2l+1 its bias [out].
  const std::vector<DenseTensor>& tensors() const { return tensors_; }
  // Points tensor i at other storage (null keeps that side); the caller keeps it alive and sized.
  Status BindTensor(size_t i, float* param, float* grad);

  // y[batch, out_dim] from x[batch, in_dim]; x must stay valid until Backward returns.
  Status Forward(const ExecContext& ctx, const float* x, int64_t batch, float* y);
  // Forward's y, bit for bit, without keeping anything for Backward: the layer outputs live in
  // two buffers of the call, so concurrent calls share only the (read) parameters.
  Status Infer(const ExecContext& ctx, const float* x, int64_t batch, float* y) const;
  // Accumulates parameter gradients from dy[batch, out_dim] (of the last Forward) and writes
  // dx[batch, in_dim] when dx is not null. on_ready(i) is called for each tensor once its
  // gradient is final, last layer first (what lets a bucketer start communicating early).
  Status Backward(const ExecContext& ctx, const float* dy, float* dx,
                  const std::function<void(size_t)>& on_ready = nullptr);

  // One layer at a time, for a wrapper that materialises a layer's parameters just in time
  // (the fully sharded variant): ForwardLayer(0..L-1) equals Forward, BackwardLayer(L-1..0)
  // equals Backward.
  Status BeginForward(const float* x, int64_t batch);
  Status ForwardLayer(const ExecContext& ctx, int l);
  const float* output() const;
  Status BeginBackward(const float* dy, float* dx);
  Status BackwardLayer(const ExecContext& ctx, int l);

  void ZeroGrad();

 private:
  Mlp() = default;

  int64_t in_ = 0;
  std::vector<LinearShape> layers_;
  std::vector<float> params_, grads_;
  std::vector<DenseTensor> tensors_;
  // Per batch: the input (borrowed), each layer's output, and backward scratch.
  const float* x_ = nullptr;
  int64_t batch_ = -1;
  std::vector<std::vector<float>> acts_;
  std::vector<float> dcur_, dnext_;
  const float* dy_ = nullptr;
  float* dx_ = nullptr;
};

}  // namespace shardrec::dense
