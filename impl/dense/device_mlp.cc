// Buffers are sized for the largest batch seen and reused; gradient scratch swaps between two
// buffers as backward walks down the stack, as in Mlp.
#include "impl/dense/device_mlp.h"

#include <algorithm>

#include "impl/core/check.h"
#include "impl/dense/device_linear.h"
#include "impl/dense/device_registry.h"
#include "impl/dense/mlp.h"

namespace shardrec::dense {

// Waiting for the stream before freeing: bounded, like every wait in the library.
constexpr int64_t kDestroyWaitMs = 60'000;

Status DeviceMlp::Create(int64_t in, const std::vector<int64_t>& outs,
                         const std::vector<Activation>& acts, uint64_t seed,
                         const std::string& name, const Device& device, lt::Math math,
                         Stream stream, std::unique_ptr<DeviceMlp>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  if (!device.is_cuda()) {
    return Status::InvalidArgument("DeviceMlp needs a CUDA device, not ", device.ToString());
  }
  if (!lt::IsKnownMath(static_cast<int32_t>(math))) {
    return Status::InvalidArgument("unknown dense math mode ", static_cast<int32_t>(math));
  }
  // The host twin validates the shapes and draws the initial values.
  std::unique_ptr<Mlp> host;
  SR_RETURN_IF_ERROR(Mlp::Create(in, outs, acts, seed, name, &host));
  SR_RETURN_IF_ERROR(core::CheckDevice(device));
  const shardrec_cuda_plugin_table_t* table = nullptr;
  SR_RETURN_IF_ERROR(DenseCudaTable(&table));
  std::unique_ptr<DeviceMlp> m(new DeviceMlp());
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&m->rt_));
  m->device_ = device;
  m->math_ = math;
  m->stream_ = stream;
  m->in_ = in;
  for (int l = 0; l < host->num_layers(); ++l) m->layers_.push_back(host->layer(l));
  for (const DenseTensor& t : host->tensors()) {
    const size_t bytes = static_cast<size_t>(t.count) * sizeof(float);
    void* p = nullptr;
    void* g = nullptr;
    SR_RETURN_IF_ERROR(m->Alloc(bytes, &p));
    SR_RETURN_IF_ERROR(m->Alloc(bytes, &g));
    SR_RETURN_IF_ERROR(m->rt_->MemcpyAsync(device.index, p, t.param, bytes,
                                           core::CopyKind::kHostToDevice, stream));
    SR_RETURN_IF_ERROR(m->rt_->MemsetAsync(device.index, g, 0, bytes, stream));
    m->tensors_.push_back({t.name, static_cast<float*>(p), static_cast<float*>(g), t.count});
  }
  // The upload reads host memory that `host` owns: wait for it before returning.
  SR_RETURN_IF_ERROR(m->rt_->StreamWait(device.index, stream, kDestroyWaitMs));
  m->outs_.assign(m->layers_.size(), nullptr);
  m->aux_.assign(m->layers_.size(), nullptr);
  m->aux_written_.assign(m->layers_.size(), false);
  *out = std::move(m);
  return Status::Ok();
}

DeviceMlp::~DeviceMlp() {
  if (rt_ == nullptr) return;
  (void)rt_->StreamWait(device_.index, stream_, kDestroyWaitMs);
  for (void* p : owned_) {
    UnregisterDeviceRange(p);
    (void)rt_->Free(device_.index, p);
  }
}

Status DeviceMlp::Alloc(size_t bytes, void** out) {
  void* p = nullptr;
  SR_RETURN_IF_ERROR(rt_->Malloc(device_.index, std::max<size_t>(bytes, 256), &p));
  owned_.push_back(p);
  RegisterDeviceRange(p, bytes);
  *out = p;
  return Status::Ok();
}

Status DeviceMlp::Grow(std::vector<void*>* bufs, size_t l, size_t bytes) {
  // Old buffers may still be read by queued work: they are kept (owned_) until destruction;
  // growth happens only when the batch exceeds every earlier one, so this stays bounded.
  return Alloc(bytes, &(*bufs)[l]);
}

Status DeviceMlp::BindTensor(size_t i, float* param, float* grad) {
  if (i >= tensors_.size()) {
    return Status::InvalidArgument("tensor ", i, " out of range (the MLP has ", tensors_.size(),
                                   ")");
  }
  if (param != nullptr) tensors_[i].param = param;
  if (grad != nullptr) tensors_[i].grad = grad;
  return Status::Ok();
}

Status DeviceMlp::Infer(const float*, int64_t, float*) const {
  return Status::Unsupported("MLP inference on ", device_.ToString(),
                             " is not supported: serving runs on the host; create the MLP with "
                             "SHARDREC_DEVICE_HOST");
}

Status DeviceMlp::Forward(const float* x, int64_t batch, float* y) {
  if (batch < 0) return Status::InvalidArgument("batch size ", batch, " must be >= 0");
  if (batch > 0 && (x == nullptr || y == nullptr)) {
    return Status::InvalidArgument("x and y must not be null");
  }
  if (batch > capacity_) {
    int64_t widest = in_;
    for (const LinearShape& s : layers_) widest = std::max(widest, s.out);
    for (size_t l = 0; l < layers_.size(); ++l) {
      SR_RETURN_IF_ERROR(
          Grow(&outs_, l, static_cast<size_t>(batch * layers_[l].out) * sizeof(float)));
      if (layers_[l].act == Activation::kRelu) {
        SR_RETURN_IF_ERROR(
            Grow(&aux_, l, static_cast<size_t>(lt::ReluAuxLayout(layers_[l].out, batch).bytes)));
      }
    }
    std::vector<void*> d(2, nullptr);
    SR_RETURN_IF_ERROR(Grow(&d, 0, static_cast<size_t>(batch * widest) * sizeof(float)));
    SR_RETURN_IF_ERROR(Grow(&d, 1, static_cast<size_t>(batch * widest) * sizeof(float)));
    dcur_ = d[0];
    dnext_ = d[1];
    capacity_ = batch;
  }
  x_ = x;
  batch_ = batch;
  if (batch == 0) return Status::Ok();
  const float* cur = x;
  for (size_t l = 0; l < layers_.size(); ++l) {
    float* o = static_cast<float*>(outs_[l]);
    bool written = false;
    SR_RETURN_IF_ERROR(DeviceLinearForward(device_, stream_, layers_[l], math_,
                                           tensors_[2 * l].param, tensors_[2 * l + 1].param, cur,
                                           batch, o, aux_[l], &written));
    aux_written_[l] = written;
    cur = o;
  }
  const size_t bytes = static_cast<size_t>(batch * out_dim()) * sizeof(float);
  return rt_->MemcpyAsync(device_.index, y, cur, bytes, core::CopyKind::kDeviceToDevice, stream_);
}

Status DeviceMlp::Backward(const float* dy, float* dx,
                           const std::function<void(size_t)>& on_ready) {
  if (batch_ < 0) return Status::InvalidUsage("MLP backward without a forward");
  if (batch_ > 0 && dy == nullptr) return Status::InvalidArgument("dy must not be null");
  const int L = static_cast<int>(layers_.size());
  const float* g = dy;
  for (int l = L - 1; l >= 0; --l) {
    const LinearShape& s = layers_[l];
    const Activation input_act = l > 0 ? layers_[l - 1].act : Activation::kNone;
    const float* x = l > 0 ? static_cast<const float*>(outs_[l - 1]) : x_;
    float* out_dx = l > 0 ? static_cast<float*>(dnext_) : dx;
    // A ReLU layer below the last got its derivative from the layer above's DRELU (or its
    // x > 0 fallback); sigmoid and identity layers apply their own.
    const bool dy_is_dz = l < L - 1 && s.act == Activation::kRelu;
    const void* input_aux = l > 0 && aux_written_[l - 1] ? aux_[l - 1] : nullptr;
    if (batch_ > 0) {
      SR_RETURN_IF_ERROR(DeviceLinearBackward(
          device_, stream_, s, math_, input_act, dy_is_dz, tensors_[2 * l].param, x,
          static_cast<const float*>(outs_[l]), g, input_aux, batch_, tensors_[2 * l].grad,
          tensors_[2 * l + 1].grad, out_dx));
    }
    if (on_ready) {
      on_ready(2 * static_cast<size_t>(l) + 1);
      on_ready(2 * static_cast<size_t>(l));
    }
    if (l > 0) {
      g = static_cast<const float*>(dnext_);
      std::swap(dcur_, dnext_);
    }
  }
  return Status::Ok();
}

Status DeviceMlp::ZeroGrad() {
  for (const DenseTensor& t : tensors_) {
    SR_RETURN_IF_ERROR(rt_->MemsetAsync(device_.index, t.grad, 0,
                                        static_cast<size_t>(t.count) * sizeof(float), stream_));
  }
  return Status::Ok();
}

}  // namespace shardrec::dense
