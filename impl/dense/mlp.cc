// The MLP keeps one activation buffer per layer (what backward needs) and two gradient
// scratches that swap as backward walks down the stack.
#include "impl/dense/mlp.h"

#include <cmath>
#include <cstring>

#include "impl/core/check.h"
#include "impl/core/rng.h"

namespace shardrec::dense {

Status Mlp::Create(int64_t in, const std::vector<int64_t>& outs,
                   const std::vector<Activation>& acts, uint64_t seed, const std::string& name,
                   std::unique_ptr<Mlp>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  if (in < 1) return Status::InvalidArgument("MLP input width ", in, " must be >= 1");
  if (outs.empty()) return Status::InvalidArgument("an MLP needs at least one layer");
  if (acts.size() != outs.size()) {
    return Status::InvalidArgument("MLP has ", outs.size(), " layers but ", acts.size(),
                                   " activations");
  }
  std::unique_ptr<Mlp> m(new Mlp());
  m->in_ = in;
  int64_t total = 0, prev = in;
  for (size_t l = 0; l < outs.size(); ++l) {
    if (outs[l] < 1) {
      return Status::InvalidArgument("MLP layer ", l, " width ", outs[l], " must be >= 1");
    }
    if (!IsKnownActivation(static_cast<int32_t>(acts[l]))) {
      return Status::InvalidArgument("MLP layer ", l, ": unknown activation ",
                                     static_cast<int32_t>(acts[l]));
    }
    if (prev > (int64_t{1} << 40) / outs[l]) {
      return Status::InvalidArgument("MLP layer ", l, " of ", prev, "x", outs[l], " is too large");
    }
    m->layers_.push_back({prev, outs[l], acts[l]});
    total += outs[l] * (prev + 1);
    prev = outs[l];
  }
  try {
    m->params_.assign(static_cast<size_t>(total), 0.0f);
    m->grads_.assign(static_cast<size_t>(total), 0.0f);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("MLP of ", total, " parameters");
  }
  const uint64_t key = HashName(name);
  int64_t off = 0;
  for (size_t l = 0; l < m->layers_.size(); ++l) {
    const LinearShape& s = m->layers_[l];
    const float bound = 1.0f / std::sqrt(static_cast<float>(s.in));
    const int64_t n = s.out * (s.in + 1);
    for (int64_t i = 0; i < n; ++i) {
      m->params_[off + i] = (2.0f * UniformAt(seed, key, l, i) - 1.0f) * bound;
    }
    const std::string prefix = name + "." + std::to_string(l);
    m->tensors_.push_back({prefix + ".weight", &m->params_[off], &m->grads_[off], s.out * s.in});
    m->tensors_.push_back(
        {prefix + ".bias", &m->params_[off + s.out * s.in], &m->grads_[off + s.out * s.in], s.out});
    off += n;
  }
  m->acts_.resize(m->layers_.size());
  *out = std::move(m);
  return Status::Ok();
}

Status Mlp::BindTensor(size_t i, float* param, float* grad) {
  if (i >= tensors_.size()) {
    return Status::InvalidArgument("tensor ", i, " out of range (the MLP has ", tensors_.size(),
                                   ")");
  }
  if (param != nullptr) tensors_[i].param = param;
  if (grad != nullptr) tensors_[i].grad = grad;
  return Status::Ok();
}

Status Mlp::BeginForward(const float* x, int64_t batch) {
  if (batch < 0) return Status::InvalidArgument("batch size ", batch, " must be >= 0");
  if (x == nullptr && batch > 0) return Status::InvalidArgument("input must not be null");
  x_ = x;
  batch_ = batch;
  for (size_t l = 0; l < layers_.size(); ++l) {
    acts_[l].resize(static_cast<size_t>(batch * layers_[l].out));
  }
  return Status::Ok();
}

Status Mlp::ForwardLayer(const ExecContext& ctx, int l) {
  if (batch_ < 0 || l < 0 || l >= num_layers()) {
    return Status::InvalidUsage("forward of MLP layer ", l, " without BeginForward");
  }
  const float* in = l == 0 ? x_ : acts_[l - 1].data();
  return LinearForward(ctx, layers_[l], tensors_[2 * l].param, tensors_[2 * l + 1].param, in,
                       batch_, acts_[l].data());
}

const float* Mlp::output() const { return acts_.back().data(); }

Status Mlp::Forward(const ExecContext& ctx, const float* x, int64_t batch, float* y) {
  if (y == nullptr && batch > 0) return Status::InvalidArgument("output must not be null");
  SR_RETURN_IF_ERROR(BeginForward(x, batch));
  for (int l = 0; l < num_layers(); ++l) SR_RETURN_IF_ERROR(ForwardLayer(ctx, l));
  if (batch > 0) std::memcpy(y, output(), sizeof(float) * batch * out_dim());
  return Status::Ok();
}

Status Mlp::Infer(const ExecContext& ctx, const float* x, int64_t batch, float* y) const {
  if (batch < 0) return Status::InvalidArgument("batch size ", batch, " must be >= 0");
  if (batch > 0 && (x == nullptr || y == nullptr)) {
    return Status::InvalidArgument("MLP inference: input and output must not be null");
  }
  if (batch == 0) return Status::Ok();
  // The same LinearForward calls as Forward on the same inputs, so the same bits; only where
  // the hidden outputs are kept differs (the last layer writes y directly).
  std::vector<float> ping, pong;
  const float* in = x;
  for (int l = 0; l < num_layers(); ++l) {
    float* out = y;
    if (l + 1 < num_layers()) {
      std::vector<float>& buf = l % 2 == 0 ? ping : pong;
      buf.resize(static_cast<size_t>(batch * layers_[l].out));
      out = buf.data();
    }
    SR_RETURN_IF_ERROR(LinearForward(ctx, layers_[l], tensors_[2 * l].param,
                                     tensors_[2 * l + 1].param, in, batch, out));
    in = out;
  }
  return Status::Ok();
}

Status Mlp::BeginBackward(const float* dy, float* dx) {
  if (batch_ < 0) return Status::InvalidUsage("MLP backward without a forward");
  if (dy == nullptr && batch_ > 0) return Status::InvalidArgument("output gradient is null");
  dy_ = dy;
  dx_ = dx;
  dcur_.assign(dy, dy + batch_ * out_dim());
  return Status::Ok();
}

Status Mlp::BackwardLayer(const ExecContext& ctx, int l) {
  if (dy_ == nullptr && batch_ != 0) {
    return Status::InvalidUsage("backward of MLP layer ", l, " without BeginBackward");
  }
  if (l < 0 || l >= num_layers()) return Status::InvalidArgument("MLP layer ", l, " out of range");
  const LinearShape& s = layers_[l];
  const float* in = l == 0 ? x_ : acts_[l - 1].data();
  float* dx = nullptr;
  if (l > 0) {
    dnext_.resize(static_cast<size_t>(batch_ * s.in));
    dx = dnext_.data();
  } else {
    dx = dx_;
  }
  SR_RETURN_IF_ERROR(LinearBackward(ctx, s, tensors_[2 * l].param, in, acts_[l].data(),
                                    dcur_.data(), batch_, dcur_.data(), tensors_[2 * l].grad,
                                    tensors_[2 * l + 1].grad, dx));
  if (l > 0) dcur_.swap(dnext_);
  return Status::Ok();
}

Status Mlp::Backward(const ExecContext& ctx, const float* dy, float* dx,
                     const std::function<void(size_t)>& on_ready) {
  SR_RETURN_IF_ERROR(BeginBackward(dy, dx));
  for (int l = num_layers() - 1; l >= 0; --l) {
    SR_RETURN_IF_ERROR(BackwardLayer(ctx, l));
    if (on_ready) {
      on_ready(2 * l + 1);
      on_ready(2 * l);
    }
  }
  return Status::Ok();
}

void Mlp::ZeroGrad() {
  for (auto& t : tensors_) std::memset(t.grad, 0, sizeof(float) * t.count);
}

}  // namespace shardrec::dense
