// The factory that picks a dense layer's implementation once, at creation, and the host
// implementations of DenseLayer it wraps around Mlp and DcnCross (on the shared host context).
#include "impl/dense/layer_factory.h"

#include <memory>
#include <utility>

#include "impl/core/check.h"
#include "impl/dense/device_mlp.h"
#include "impl/dense/interaction.h"
#include "impl/dense/layer.h"
#include "impl/dense/mlp.h"

namespace shardrec::dense {
namespace {

class HostMlpLayer final : public DenseLayer {
 public:
  explicit HostMlpLayer(std::unique_ptr<Mlp> mlp) : mlp_(std::move(mlp)) {}

  Device device() const override { return Device::Host(); }
  int64_t in_dim() const override { return mlp_->in_dim(); }
  int64_t out_dim() const override { return mlp_->out_dim(); }
  const std::vector<DenseTensor>& tensors() const override { return mlp_->tensors(); }
  Status BindTensor(size_t i, float* param, float* grad) override {
    return mlp_->BindTensor(i, param, grad);
  }
  Status Forward(const float* x, int64_t batch, float* y) override {
    return mlp_->Forward(HostDenseContext(), x, batch, y);
  }
  Status Infer(const float* x, int64_t batch, float* y) const override {
    return mlp_->Infer(HostDenseContext(), x, batch, y);
  }
  Status Backward(const float* dy, float* dx,
                  const std::function<void(size_t)>& on_ready) override {
    return mlp_->Backward(HostDenseContext(), dy, dx, on_ready);
  }
  Status ZeroGrad() override {
    mlp_->ZeroGrad();
    return Status::Ok();
  }

 private:
  std::unique_ptr<Mlp> mlp_;
};

// A cross network keeps its width: in_dim == out_dim.
class HostDcnLayer final : public DenseLayer {
 public:
  explicit HostDcnLayer(std::unique_ptr<DcnCross> dcn) : dcn_(std::move(dcn)) {}

  Device device() const override { return Device::Host(); }
  int64_t in_dim() const override { return dcn_->width(); }
  int64_t out_dim() const override { return dcn_->width(); }
  const std::vector<DenseTensor>& tensors() const override { return dcn_->tensors(); }
  Status BindTensor(size_t i, float* param, float* grad) override {
    return dcn_->BindTensor(i, param, grad);
  }
  Status Forward(const float* x, int64_t batch, float* y) override {
    return dcn_->Forward(HostDenseContext(), x, batch, y);
  }
  Status Infer(const float* x, int64_t batch, float* y) const override {
    return dcn_->Infer(HostDenseContext(), x, batch, y);
  }
  Status Backward(const float* dy, float* dx,
                  const std::function<void(size_t)>& on_ready) override {
    return dcn_->Backward(HostDenseContext(), dy, dx, on_ready);
  }
  Status ZeroGrad() override {
    dcn_->ZeroGrad();
    return Status::Ok();
  }

 private:
  std::unique_ptr<DcnCross> dcn_;
};

}  // namespace

const ExecContext& HostDenseContext() {
  static const ExecContext ctx;
  return ctx;
}

Status CreateMlpLayer(const MlpSpec& spec, const Device& device, lt::Math math, Stream stream,
                      std::unique_ptr<DenseLayer>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  if (device.is_cuda()) {
    std::unique_ptr<DeviceMlp> dev;
    SR_RETURN_IF_ERROR(DeviceMlp::Create(spec.in, spec.outs, spec.acts, spec.seed, spec.name,
                                         device, math, stream, &dev));
    *out = std::move(dev);
    return Status::Ok();
  }
  std::unique_ptr<Mlp> host;
  SR_RETURN_IF_ERROR(Mlp::Create(spec.in, spec.outs, spec.acts, spec.seed, spec.name, &host));
  *out = std::make_unique<HostMlpLayer>(std::move(host));
  return Status::Ok();
}

Status CreateDcnLayer(int64_t width, int num_layers, int64_t rank, uint64_t seed,
                      const std::string& name, std::unique_ptr<DenseLayer>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  std::unique_ptr<DcnCross> dcn;
  SR_RETURN_IF_ERROR(DcnCross::Create(width, num_layers, rank, seed, name, &dcn));
  *out = std::make_unique<HostDcnLayer>(std::move(dcn));
  return Status::Ok();
}

}  // namespace shardrec::dense
