/**
 * @file cpp/dense.hpp
 * Dense layers (dense.h): shardrec::Mlp, shardrec::Dcn, shardrec::DenseOptimizer, the DLRM dot
 * interaction and the loss. infer() is the dense inference: const, and safe from any number of
 * threads at once on one layer. Included by shardrec.hpp.
 */
#ifndef SHARDREC_CPP_DENSE_HPP_
#define SHARDREC_CPP_DENSE_HPP_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/cpp/error.hpp"

namespace shardrec {
namespace detail {

/** The shared surface of Mlp and Dcn, over their C functions (CRTP-free: a table of calls). */
template <
    typename Handle, shardrec_status_t (*Forward)(Handle*, const float*, int64_t, float*, int64_t),
    shardrec_status_t (*Infer)(const Handle*, const float*, int64_t, float*, int64_t),
    shardrec_status_t (*Backward)(Handle*, const float*, float*, shardrec_grad_ready_fn, void*),
    shardrec_status_t (*ZeroGrad)(Handle*), shardrec_status_t (*NumTensors)(const Handle*, size_t*),
    shardrec_status_t (*Tensor)(const Handle*, size_t, shardrec_dense_param_t*),
    shardrec_status_t (*Bind)(Handle*, size_t, float*, float*), void (*Destroy)(Handle*)>
class DenseLayer {
 public:
  DenseLayer() = default;
  /** Takes ownership of a handle from the C API. */
  DenseLayer(Handle* handle, const char* type) : h_(handle), type_(type) {}

  /** y = layer(x) for @p batch rows, keeping what backward() needs (one thread at a time). */
  void forward(std::span<const float> x, int64_t batch, std::span<float> y) {
    check(Forward(h(), x.data(), batch, y.data(), static_cast<int64_t>(y.size())));
  }

  /** The same output as forward() without keeping anything: const, any number of threads. */
  void infer(std::span<const float> x, int64_t batch, std::span<float> y) const {
    check(Infer(h(), x.data(), batch, y.data(), static_cast<int64_t>(y.size())));
  }

  /**
   * Accumulates the parameter gradients of the last forward from @p dy and writes the input's
   * gradient into @p dx (empty: not wanted); @p on_ready, when set, hears each tensor as its
   * gradient is final (e.g. Ddp::mark_ready).
   */
  void backward(std::span<const float> dy, std::span<float> dx,
                shardrec_grad_ready_fn on_ready = nullptr, void* user = nullptr) {
    check(Backward(h(), dy.data(), dx.empty() ? nullptr : dx.data(), on_ready, user));
  }

  void zero_grad() { check(ZeroGrad(h())); }

  /** The parameter tensors (names, parameters and gradients, owned by the layer). */
  std::vector<shardrec_dense_param_t> tensors() const {
    size_t n = 0;
    check(NumTensors(h(), &n));
    std::vector<shardrec_dense_param_t> out(n);
    for (size_t i = 0; i < n; ++i) check(Tensor(h(), i, &out[i]));
    return out;
  }

  /** Makes tensor @p index use caller storage (e.g. Ddp::grad for the gradient). */
  void bind_tensor(size_t index, float* param, float* grad) {
    check(Bind(h(), index, param, grad));
  }

  /** The C handle (still owned by this object); NULL after a move. */
  Handle* get() const noexcept { return h_.get(); }

  explicit operator bool() const noexcept { return h_ != nullptr; }

 protected:
  Handle* h() const { return live(h_.get(), type_); }

 private:
  struct Deleter {
    void operator()(Handle* p) const noexcept { Destroy(p); }
  };
  std::unique_ptr<Handle, Deleter> h_;
  const char* type_ = "shardrec dense layer";
};

}  // namespace detail

/** A multi-layer perceptron (shardrec_mlp_*). Move-only. */
class Mlp : public detail::DenseLayer<shardrec_mlp_t, shardrec_mlp_forward, shardrec_mlp_infer,
                                      shardrec_mlp_backward, shardrec_mlp_zero_grad,
                                      shardrec_mlp_num_tensors, shardrec_mlp_tensor,
                                      shardrec_mlp_bind_tensor, shardrec_mlp_destroy> {
 public:
  Mlp() = default;
  explicit Mlp(shardrec_mlp_t* handle) : DenseLayer(handle, "shardrec::Mlp") {}

  static Mlp create(const shardrec_mlp_options_t& options) {
    shardrec_mlp_t* m = nullptr;
    check(shardrec_mlp_create(&m, &options));
    return Mlp(m);
  }

  /** Input and output widths. */
  std::pair<int64_t, int64_t> dims() const {
    int64_t in = 0, out = 0;
    check(shardrec_mlp_dims(h(), &in, &out));
    return {in, out};
  }

  /** The device the layer runs on (SHARDREC_DEVICE_*, index). */
  std::pair<int32_t, int32_t> device() const {
    int32_t type = 0, index = 0;
    check(shardrec_mlp_device(h(), &type, &index));
    return {type, index};
  }
};

/** A DCN-v2 cross network (shardrec_dcn_*). Move-only. */
class Dcn : public detail::DenseLayer<shardrec_dcn_t, shardrec_dcn_forward, shardrec_dcn_infer,
                                      shardrec_dcn_backward, shardrec_dcn_zero_grad,
                                      shardrec_dcn_num_tensors, shardrec_dcn_tensor,
                                      shardrec_dcn_bind_tensor, shardrec_dcn_destroy> {
 public:
  Dcn() = default;
  explicit Dcn(shardrec_dcn_t* handle) : DenseLayer(handle, "shardrec::Dcn") {}

  /** @p num_layers cross layers of @p width, of rank @p rank (>= 1); "" names it "cross". */
  static Dcn create(int64_t width, int32_t num_layers, int64_t rank, uint64_t seed,
                    const std::string& name = {}) {
    shardrec_dcn_t* d = nullptr;
    check(shardrec_dcn_create(&d, width, num_layers, rank, seed,
                              name.empty() ? nullptr : detail::c_str(name, "name")));
    return Dcn(d);
  }
};

/** An optimizer for dense tensors (shardrec_dense_optimizer_*). Move-only; one thread at a time. */
class DenseOptimizer {
 public:
  DenseOptimizer() = default;
  explicit DenseOptimizer(shardrec_dense_optimizer_t* handle) : h_(handle) {}

  static DenseOptimizer create(const shardrec_optimizer_config_t& config) {
    shardrec_dense_optimizer_t* o = nullptr;
    check(shardrec_dense_optimizer_create(&o, &config));
    return DenseOptimizer(o);
  }

  /** Updates @p tensors from their gradients (the same tensors, in the same order, each step). */
  void step(std::span<const shardrec_dense_param_t> tensors) {
    check(shardrec_dense_optimizer_step(h(), tensors.data(), tensors.size()));
  }

  void set_learning_rate(float lr) { check(shardrec_dense_optimizer_set_learning_rate(h(), lr)); }

  /** State @p which of tensor @p tensor (owned by the optimizer). */
  std::span<float> state(size_t tensor, int32_t which) {
    float* data = nullptr;
    int64_t count = 0;
    check(shardrec_dense_optimizer_state(h(), tensor, which, &data, &count));
    return {data, static_cast<size_t>(count)};
  }

  int64_t steps() const {
    int64_t n = 0;
    check(shardrec_dense_optimizer_steps(h(), &n));
    return n;
  }

  void set_steps(int64_t steps) { check(shardrec_dense_optimizer_set_steps(h(), steps)); }

  /** The C handle (still owned by this object); NULL after a move. */
  shardrec_dense_optimizer_t* get() const noexcept { return h_.get(); }

  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  shardrec_dense_optimizer_t* h() const {
    return detail::live(h_.get(), "shardrec::DenseOptimizer");
  }
  struct Deleter {
    void operator()(shardrec_dense_optimizer_t* o) const noexcept {
      shardrec_dense_optimizer_destroy(o);
    }
  };
  std::unique_ptr<shardrec_dense_optimizer_t, Deleter> h_;
};

/** Width of the dot interaction's output row for @p num_sparse features of width @p dim. */
inline int64_t dot_interaction_width(int64_t num_sparse, int64_t dim) {
  int64_t w = 0;
  check(shardrec_dot_interaction_width(num_sparse, dim, &w));
  return w;
}

inline void dot_interaction_forward(std::span<const float> dense, std::span<const float> emb,
                                    int64_t batch, int64_t num_sparse, int64_t dim,
                                    std::span<float> out) {
  check(shardrec_dot_interaction_forward(dense.data(), emb.data(), batch, num_sparse, dim,
                                         out.data(), static_cast<int64_t>(out.size())));
}

inline void dot_interaction_backward(std::span<const float> dense, std::span<const float> emb,
                                     std::span<const float> dout, int64_t batch, int64_t num_sparse,
                                     int64_t dim, std::span<float> d_dense,
                                     std::span<float> d_emb) {
  check(shardrec_dot_interaction_backward(dense.data(), emb.data(), dout.data(), batch, num_sparse,
                                          dim, d_dense.data(), d_emb.data()));
}

/** Binary cross-entropy of @p logits against @p labels, divided by @p normalizer; writes the
 *  gradient into @p dlogits (empty: not wanted) and returns the loss. */
inline double bce_with_logits(std::span<const float> logits, std::span<const float> labels,
                              double normalizer, std::span<float> dlogits = {}) {
  if (labels.size() != logits.size() || (!dlogits.empty() && dlogits.size() != logits.size())) {
    throw Error(SHARDREC_EINVAL, "bce_with_logits: logits, labels and dlogits differ in size");
  }
  double loss = 0;
  check(shardrec_bce_with_logits(logits.data(), labels.data(), static_cast<int64_t>(logits.size()),
                                 normalizer, &loss, dlogits.empty() ? nullptr : dlogits.data()));
  return loss;
}

/** BLAS threads of the dense layers (process-wide). */
inline void dense_set_blas_threads(int32_t threads) {
  check(shardrec_dense_set_blas_threads(threads));
}

inline int32_t dense_blas_threads() {
  int32_t n = 0;
  check(shardrec_dense_blas_threads(&n));
  return n;
}

}  // namespace shardrec

#endif  // SHARDREC_CPP_DENSE_HPP_
