// One trainable dense block (an MLP or a cross network) behind a single interface, with a host
// and a device implementation chosen once at creation (layer_factory.h), so callers never test
// where it runs.
//
// Thread-safety: one thread at a time, except Infer: any number of threads may call Infer at once
// (it only reads the parameters), as long as no other member runs at the same time. Forward
// keeps its batch's intermediates for the following Backward; a second Forward replaces them.
// Stream behaviour: a host layer runs synchronously and ignores streams; a device layer only
// enqueues on the stream it was created with (device_mlp.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "impl/core/device.h"
#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/dense/tensor.h"

namespace shardrec::dense {

class DenseLayer {
 public:
  virtual ~DenseLayer() = default;

  // Where the parameters, gradients and the Forward/Backward buffers live.
  virtual Device device() const = 0;
  virtual int64_t in_dim() const = 0;
  virtual int64_t out_dim() const = 0;
  // Parameters and gradients in the block's documented order; pointers on device().
  virtual const std::vector<DenseTensor>& tensors() const = 0;
  // Points tensor i at other storage on device() (null keeps that side).
  virtual Status BindTensor(size_t i, float* param, float* grad) = 0;

  // y[batch, out_dim] from x[batch, in_dim]; x must stay valid until Backward has run.
  virtual Status Forward(const float* x, int64_t batch, float* y) = 0;
  // Forward for serving: the same y, bit for bit, from the same arithmetic, with the
  // intermediates in buffers of the call instead of the layer's, so it is const and reentrant.
  // Host only: a device layer answers kUnsupported.
  virtual Status Infer(const float* x, int64_t batch, float* y) const = 0;
  // Accumulates parameter gradients from dy (of the last Forward) and writes dx when the block
  // allows it to be null or it is given. on_ready(i) as Mlp::Backward / DeviceMlp::Backward.
  virtual Status Backward(const float* dy, float* dx,
                          const std::function<void(size_t)>& on_ready) = 0;
  virtual Status ZeroGrad() = 0;
};

// The context every host dense call runs on: the calling thread, OpenBLAS threads the GEMMs
// itself. Shared by the host layers and the stateless host functions (interaction.h).
const ExecContext& HostDenseContext();

}  // namespace shardrec::dense
