// Both interactions loop over samples in parallel chunks: each sample's arithmetic is
// independent, so results do not depend on the thread count.
#include "impl/dense/interaction.h"

#include <cmath>
#include <cstring>

#include "impl/core/check.h"
#include "impl/core/rng.h"
#include "impl/dense/linear.h"

namespace shardrec::dense {

int64_t DotInteractionWidth(int64_t num_sparse, int64_t dim) {
  return dim + num_sparse * (num_sparse + 1) / 2;
}

namespace {

Status CheckDot(const float* dense, const float* emb, int64_t batch, int64_t num_sparse,
                int64_t dim) {
  if (batch < 0 || num_sparse < 0 || dim < 1) {
    return Status::InvalidArgument("dot interaction: batch ", batch, ", ", num_sparse,
                                   " sparse features, dim ", dim);
  }
  if (batch > 0 && (dense == nullptr || (emb == nullptr && num_sparse > 0))) {
    return Status::InvalidArgument("dot interaction: null input");
  }
  return Status::Ok();
}

float Dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

Status DotInteractionForward(const ExecContext& ctx, const float* dense, const float* emb,
                             int64_t batch, int64_t num_sparse, int64_t dim, float* out) {
  SR_RETURN_IF_ERROR(CheckDot(dense, emb, batch, num_sparse, dim));
  const int64_t width = DotInteractionWidth(num_sparse, dim);
  ctx.ParallelFor(0, batch, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float* d = dense + b * dim;
      const float* e = emb + b * num_sparse * dim;
      float* o = out + b * width;
      std::memcpy(o, d, sizeof(float) * dim);
      int64_t k = dim;
      for (int64_t i = 1; i <= num_sparse; ++i) {
        const float* vi = e + (i - 1) * dim;
        for (int64_t j = 0; j < i; ++j) {
          const float* vj = j == 0 ? d : e + (j - 1) * dim;
          o[k++] = Dot(vi, vj, dim);
        }
      }
    }
  });
  return Status::Ok();
}

Status DotInteractionBackward(const ExecContext& ctx, const float* dense, const float* emb,
                              const float* dout, int64_t batch, int64_t num_sparse, int64_t dim,
                              float* d_dense, float* d_emb) {
  SR_RETURN_IF_ERROR(CheckDot(dense, emb, batch, num_sparse, dim));
  const int64_t width = DotInteractionWidth(num_sparse, dim);
  ctx.ParallelFor(0, batch, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float* d = dense + b * dim;
      const float* e = emb + b * num_sparse * dim;
      const float* g = dout + b * width;
      float* gd = d_dense + b * dim;
      float* ge = d_emb + b * num_sparse * dim;
      std::memcpy(gd, g, sizeof(float) * dim);
      std::memset(ge, 0, sizeof(float) * num_sparse * dim);
      int64_t k = dim;
      for (int64_t i = 1; i <= num_sparse; ++i) {
        const float* vi = e + (i - 1) * dim;
        float* gi = ge + (i - 1) * dim;
        for (int64_t j = 0; j < i; ++j, ++k) {
          const float* vj = j == 0 ? d : e + (j - 1) * dim;
          float* gj = j == 0 ? gd : ge + (j - 1) * dim;
          const float c = g[k];
          for (int64_t t = 0; t < dim; ++t) {
            gi[t] += c * vj[t];
            gj[t] += c * vi[t];
          }
        }
      }
    }
  });
  return Status::Ok();
}

Status DcnCross::Create(int64_t width, int num_layers, int64_t rank, uint64_t seed,
                        const std::string& name, std::unique_ptr<DcnCross>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  if (width < 1 || num_layers < 1 || rank < 1 || width > (int64_t{1} << 24) ||
      rank > (int64_t{1} << 24)) {
    return Status::InvalidArgument("DCN cross: width ", width, ", ", num_layers, " layers, rank ",
                                   rank, " (each must be >= 1)");
  }
  std::unique_ptr<DcnCross> c(new DcnCross());
  c->width_ = width;
  c->rank_ = rank;
  c->num_layers_ = num_layers;
  const int64_t per_layer = 2 * width * rank + width;  // <= 2^49 + 2^24 by the bounds above
  // The layers' parameters in one buffer: a count past 2^40 floats (4 TiB) is no model any host
  // holds, and far below the product's wrap-around.
  if (per_layer > (int64_t{1} << 40) / num_layers) {
    return Status::InvalidArgument("DCN cross: ", num_layers, " layers of ", per_layer,
                                   " parameters each exceed 2^40 parameters");
  }
  const int64_t total = per_layer * num_layers;
  try {
    c->params_.assign(static_cast<size_t>(total), 0.0f);
    c->grads_.assign(static_cast<size_t>(total), 0.0f);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("DCN cross of ", total, " parameters");
  }
  const uint64_t key = HashName(name);
  for (int l = 0; l < num_layers; ++l) {
    float* p = &c->params_[l * per_layer];
    float* g = &c->grads_[l * per_layer];
    // nn.Linear's defaults: +-1/sqrt(fan_in) for V (fan_in = width) and W, b (fan_in = rank).
    const float bv = 1.0f / std::sqrt(static_cast<float>(width));
    const float bw = 1.0f / std::sqrt(static_cast<float>(rank));
    for (int64_t i = 0; i < per_layer; ++i) {
      const float bound = i < width * rank ? bv : bw;
      p[i] = (2.0f * UniformAt(seed, key, l, i) - 1.0f) * bound;
    }
    const std::string prefix = name + "." + std::to_string(l);
    c->tensors_.push_back({prefix + ".V.weight", p, g, rank * width});
    c->tensors_.push_back({prefix + ".W.weight", p + rank * width, g + rank * width, width * rank});
    c->tensors_.push_back({prefix + ".W.bias", p + 2 * rank * width, g + 2 * rank * width, width});
  }
  c->xs_.resize(num_layers);
  c->vs_.resize(num_layers);
  c->ws_.resize(num_layers);
  *out = std::move(c);
  return Status::Ok();
}

Status DcnCross::BindTensor(size_t i, float* param, float* grad) {
  if (i >= tensors_.size()) {
    return Status::InvalidArgument("tensor ", i, " out of range (the cross network has ",
                                   tensors_.size(), ")");
  }
  if (param != nullptr) tensors_[i].param = param;
  if (grad != nullptr) tensors_[i].grad = grad;
  return Status::Ok();
}

Status DcnCross::Forward(const ExecContext& ctx, const float* x0, int64_t batch, float* y) {
  if (batch < 0) return Status::InvalidArgument("batch size ", batch, " must be >= 0");
  if (batch > 0 && (x0 == nullptr || y == nullptr)) {
    return Status::InvalidArgument("DCN cross: null input or output");
  }
  x0_ = x0;
  batch_ = batch;
  const int64_t n = batch * width_;
  const LinearShape down{width_, rank_, Activation::kNone};
  const LinearShape up{rank_, width_, Activation::kNone};
  for (int l = 0; l < num_layers_; ++l) {
    if (l == 0) xs_[0].assign(x0, x0 + n);
    vs_[l].resize(static_cast<size_t>(batch * rank_));
    std::vector<float> w(static_cast<size_t>(n));
    SR_RETURN_IF_ERROR(LinearForward(ctx, down, tensors_[3 * l].param, nullptr, xs_[l].data(),
                                     batch, vs_[l].data()));
    SR_RETURN_IF_ERROR(LinearForward(ctx, up, tensors_[3 * l + 1].param, tensors_[3 * l + 2].param,
                                     vs_[l].data(), batch, w.data()));
    // ws_[l] keeps W V x + b for backward; the layer output is written over a copy.
    ws_[l] = w;
    for (int64_t i = 0; i < n; ++i) w[i] = x0[i] * w[i] + xs_[l][i];
    if (l + 1 < num_layers_) {
      xs_[l + 1] = w;
    } else if (n > 0) {
      std::memcpy(y, w.data(), sizeof(float) * n);
    }
  }
  return Status::Ok();
}

Status DcnCross::Infer(const ExecContext& ctx, const float* x0, int64_t batch, float* y) const {
  if (batch < 0) return Status::InvalidArgument("batch size ", batch, " must be >= 0");
  if (batch > 0 && (x0 == nullptr || y == nullptr)) {
    return Status::InvalidArgument("DCN cross: null input or output");
  }
  const int64_t n = batch * width_;
  if (n == 0) return Status::Ok();
  const LinearShape down{width_, rank_, Activation::kNone};
  const LinearShape up{rank_, width_, Activation::kNone};
  // Forward's arithmetic in the same order; x_l and W V x_l + b are overwritten layer by layer.
  std::vector<float> x(x0, x0 + n), v(static_cast<size_t>(batch * rank_)),
      w(static_cast<size_t>(n));
  for (int l = 0; l < num_layers_; ++l) {
    SR_RETURN_IF_ERROR(
        LinearForward(ctx, down, tensors_[3 * l].param, nullptr, x.data(), batch, v.data()));
    SR_RETURN_IF_ERROR(LinearForward(ctx, up, tensors_[3 * l + 1].param, tensors_[3 * l + 2].param,
                                     v.data(), batch, w.data()));
    for (int64_t i = 0; i < n; ++i) x[i] = x0[i] * w[i] + x[i];
  }
  std::memcpy(y, x.data(), sizeof(float) * n);
  return Status::Ok();
}

Status DcnCross::Backward(const ExecContext& ctx, const float* dy, float* dx0,
                          const std::function<void(size_t)>& on_ready) {
  if (batch_ < 0) return Status::InvalidUsage("DCN cross backward without a forward");
  if (batch_ > 0 && (dy == nullptr || dx0 == nullptr)) {
    return Status::InvalidArgument("DCN cross: null gradient");
  }
  const int64_t n = batch_ * width_;
  const LinearShape down{width_, rank_, Activation::kNone};
  const LinearShape up{rank_, width_, Activation::kNone};
  std::vector<float> dx(dy, dy + n), dw(static_cast<size_t>(n)), dv(batch_ * rank_),
      dxl(static_cast<size_t>(n));
  if (n > 0) std::memset(dx0, 0, sizeof(float) * n);
  for (int l = num_layers_ - 1; l >= 0; --l) {
    // y = x0 * w + x_l: dw = dy * x0, dx0 += dy * w, dx_l = dy (+ what flows through w).
    for (int64_t i = 0; i < n; ++i) {
      dw[i] = dx[i] * x0_[i];
      dx0[i] += dx[i] * ws_[l][i];
    }
    SR_RETURN_IF_ERROR(LinearBackward(ctx, up, tensors_[3 * l + 1].param, vs_[l].data(), nullptr,
                                      dw.data(), batch_, dw.data(), tensors_[3 * l + 1].grad,
                                      tensors_[3 * l + 2].grad, dv.data()));
    SR_RETURN_IF_ERROR(LinearBackward(ctx, down, tensors_[3 * l].param, xs_[l].data(), nullptr,
                                      dv.data(), batch_, dv.data(), tensors_[3 * l].grad, nullptr,
                                      dxl.data()));
    for (int64_t i = 0; i < n; ++i) dx[i] += dxl[i];
    if (on_ready) {
      on_ready(3 * l + 2);
      on_ready(3 * l + 1);
      on_ready(3 * l);
    }
  }
  // x_0 feeds layer 0 as x_l too.
  for (int64_t i = 0; i < n; ++i) dx0[i] += dx[i];
  return Status::Ok();
}

void DcnCross::ZeroGrad() {
  for (auto& t : tensors_) std::memset(t.grad, 0, sizeof(float) * t.count);
}

Status BceWithLogits(const float* logits, const float* labels, int64_t n, double normalizer,
                     double* loss, float* dlogits) {
  if (n < 0 || !(normalizer > 0.0)) {
    return Status::InvalidArgument("BCE: ", n, " samples, normalizer ", normalizer,
                                   " (must be > 0)");
  }
  if (n > 0 && (logits == nullptr || labels == nullptr)) {
    return Status::InvalidArgument("BCE: null logits or labels");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f) {
      return Status::InvalidArgument("BCE: label ", i, " is ", labels[i], " (must be 0 or 1)");
    }
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double z = logits[i], y = labels[i];
    sum += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::fabs(z)));
    if (dlogits != nullptr) {
      const double p = 1.0 / (1.0 + std::exp(-z));
      dlogits[i] = static_cast<float>((p - y) / normalizer);
    }
  }
  if (loss != nullptr) *loss = sum / normalizer;
  return Status::Ok();
}

}  // namespace shardrec::dense
