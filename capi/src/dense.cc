// C API of the dense layers (shardrec/dense.h): thin wrappers over impl/dense.
#include "shardrec/dense.h"

#include <atomic>
#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "impl/dense/device_registry.h"
#include "impl/dense/gemm.h"
#include "impl/dense/interaction.h"
#include "impl/dense/layer.h"
#include "impl/dense/layer_factory.h"
#include "impl/dense/optimizer.h"

namespace shardrec::capi {
namespace {

static_assert(SHARDREC_ACTIVATION_SIGMOID == static_cast<int>(dense::Activation::kSigmoid));

static_assert(SHARDREC_DENSE_MATH_BF16 == static_cast<int>(dense::lt::Math::kBf16));
static_assert(SHARDREC_DENSE_MATH_TF32 == static_cast<int>(dense::lt::Math::kTf32));

// The version-2 fields with their defaults for a version-1 caller (whose struct ends before
// them and must not be read past).
struct MlpPlacement {
  int32_t device_type = SHARDREC_DEVICE_HOST;
  int32_t device_index = 0;
  int32_t math = SHARDREC_DENSE_MATH_FP32;
  void* stream = nullptr;
};

MlpPlacement PlacementOf(const shardrec_mlp_options_t& o) {
  MlpPlacement p;
  if (o.version >= 2) {
    p.device_type = o.device_type;
    p.device_index = o.device_index;
    p.math = o.math;
    p.stream = o.stream;
  }
  return p;
}

Status CheckPlacement(const MlpPlacement& p) {
  if (p.device_type != SHARDREC_DEVICE_HOST && p.device_type != SHARDREC_DEVICE_CUDA) {
    return Status::InvalidArgument("MLP: unknown device type ", p.device_type,
                                   " (SHARDREC_DEVICE_HOST or SHARDREC_DEVICE_CUDA)");
  }
  if (!dense::lt::IsKnownMath(p.math)) {
    return Status::InvalidArgument("MLP: unknown math mode ", p.math,
                                   " (SHARDREC_DENSE_MATH_FP32, _TF32 or _BF16)");
  }
  if (p.device_type == SHARDREC_DEVICE_HOST && p.math != SHARDREC_DENSE_MATH_FP32) {
    return Status::InvalidArgument(
        "MLP: math ", dense::lt::MathName(static_cast<dense::lt::Math>(p.math)),
        " needs device_type SHARDREC_DEVICE_CUDA; the host path computes in fp32 only");
  }
  if (p.device_type == SHARDREC_DEVICE_CUDA && p.device_index < 0) {
    return Status::InvalidArgument("MLP: device_index ", p.device_index, " must be >= 0");
  }
  return Status::Ok();
}

std::function<void(size_t)> ToReady(shardrec_grad_ready_fn fn, void* user) {
  if (fn == nullptr) return {};
  return [fn, user](size_t i) { fn(i, user); };
}

void ToCTensor(const dense::DenseTensor& t, shardrec_dense_param_t* out) {
  out->name = t.name.c_str();
  out->param = t.param;
  out->grad = t.grad;
  out->count = t.count;
}

Status CheckOutput(int64_t batch, int64_t width, int64_t len, const char* what) {
  if (batch < 0) return Status::InvalidArgument("batch size ", batch, " must be >= 0");
  if (width > 0 && batch > INT64_MAX / width) {
    return Status::InvalidArgument("batch size ", batch, " overflows");
  }
  if (len < batch * width) {
    return Status::InvalidArgument(what, " holds ", len, " floats; ", batch * width,
                                   " are needed (batch ", batch, " x width ", width, ")");
  }
  return Status::Ok();
}

// Inference only reads the parameters, so it takes no exclusive use; it refuses to start while a
// mutating call holds the handle (what would otherwise be a silent data race).
Status CheckNotTraining(const std::atomic<bool>& busy, const char* what) {
  if (busy.load(std::memory_order_acquire)) {
    return Status::InvalidUsage("the ", what,
                                " is being changed by another thread (forward, backward, "
                                "zero_grad, bind_tensor); inference must not overlap training "
                                "calls on the same handle");
  }
  return Status::Ok();
}

Status TensorAt(const std::vector<dense::DenseTensor>& ts, size_t i, shardrec_dense_param_t* out) {
  SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
  if (i >= ts.size()) {
    return Status::InvalidArgument("tensor ", i, " out of range (", ts.size(), " tensors)");
  }
  ToCTensor(ts[i], out);
  return Status::Ok();
}

}  // namespace
}  // namespace shardrec::capi

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Exclusive;
using shardrec::capi::Handle;
using shardrec::capi::NotNull;
using shardrec::dense::HostDenseContext;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_dense_set_blas_threads(int32_t threads) {
  return Enter({}, [&] { return shardrec::dense::SetBlasThreads(threads); });
}

SHARDREC_API shardrec_status_t shardrec_dense_blas_threads(int32_t* out) {
  return Enter({NotNull(out, "out")}, [&] {
    *out = shardrec::dense::BlasThreads();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mlp_options_init(shardrec_mlp_options_t* options,
                                                         uint32_t version) {
  const shardrec_mlp_options_t d = SHARDREC_MLP_OPTIONS_INIT;
  return shardrec::capi::InitStruct(
      options, version, SHARDREC_MLP_OPTIONS_VERSION, d, "options",
      {offsetof(shardrec_mlp_options_t, device_type), sizeof(shardrec_mlp_options_t)});
}

SHARDREC_API shardrec_status_t shardrec_mlp_create(shardrec_mlp_t** out,
                                                   const shardrec_mlp_options_t* o) {
  return Enter({NotNull(out, "out")}, [&] {
    *out = nullptr;
    SR_RETURN_IF_ERROR(CheckNotNull(o, "options"));
    SR_RETURN_IF_ERROR(
        shardrec::capi::CheckStructVersion(o->version, SHARDREC_MLP_OPTIONS_VERSION, "options"));
    if (o->num_layers < 1 || o->num_layers > 4096) {
      return Status::InvalidArgument("MLP: num_layers ", o->num_layers, " (must be 1..4096)");
    }
    SR_RETURN_IF_ERROR(CheckNotNull(o->out_features, "options.out_features"));
    std::vector<int64_t> outs(o->out_features, o->out_features + o->num_layers);
    std::vector<shardrec::dense::Activation> acts;
    for (int l = 0; l < o->num_layers; ++l) {
      const int32_t a =
          o->activations != nullptr
              ? o->activations[l]
              : (l + 1 < o->num_layers ? SHARDREC_ACTIVATION_RELU : SHARDREC_ACTIVATION_NONE);
      if (!shardrec::dense::IsKnownActivation(a)) {
        return Status::InvalidArgument("MLP: activation ", a, " of layer ", l, " is unknown");
      }
      acts.push_back(static_cast<shardrec::dense::Activation>(a));
    }
    const shardrec::capi::MlpPlacement place = shardrec::capi::PlacementOf(*o);
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPlacement(place));
    shardrec::dense::MlpSpec spec;
    spec.in = o->in_features;
    spec.outs = std::move(outs);
    spec.acts = std::move(acts);
    spec.seed = o->seed;
    spec.name = o->name != nullptr && o->name[0] != '\0' ? o->name : "mlp";
    const shardrec::Device device = place.device_type == SHARDREC_DEVICE_CUDA
                                        ? shardrec::Device::Cuda(place.device_index)
                                        : shardrec::Device::Host();
    auto h = std::make_unique<shardrec_mlp>();
    SR_RETURN_IF_ERROR(shardrec::dense::CreateMlpLayer(
        spec, device, static_cast<shardrec::dense::lt::Math>(place.math), place.stream, &h->impl));
    *out = h.release();
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_mlp_destroy(shardrec_mlp_t* mlp) { delete mlp; }

SHARDREC_API shardrec_status_t shardrec_mlp_device(const shardrec_mlp_t* mlp, int32_t* device_type,
                                                   int32_t* device_index) {
  return Enter({Handle(mlp, "mlp")}, [&] {
    const shardrec::Device d = mlp->impl->device();
    if (device_type != nullptr) {
      *device_type = d.is_cuda() ? SHARDREC_DEVICE_CUDA : SHARDREC_DEVICE_HOST;
    }
    if (device_index != nullptr) *device_index = d.index;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mlp_dims(const shardrec_mlp_t* mlp, int64_t* in,
                                                 int64_t* out) {
  return Enter({Handle(mlp, "mlp")}, [&] {
    if (in != nullptr) *in = mlp->impl->in_dim();
    if (out != nullptr) *out = mlp->impl->out_dim();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mlp_forward(shardrec_mlp_t* mlp, const float* x,
                                                    int64_t batch, float* y, int64_t y_len) {
  return Enter({Exclusive(mlp, "mlp", "MLP")}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckOutput(batch, mlp->impl->out_dim(), y_len, "y"));
    if (batch > 0 && (x == nullptr || y == nullptr)) {
      return Status::InvalidArgument("MLP forward: x and y must not be NULL");
    }
    return mlp->impl->Forward(x, batch, y);
  });
}

SHARDREC_API shardrec_status_t shardrec_mlp_infer(const shardrec_mlp_t* mlp, const float* x,
                                                  int64_t batch, float* y, int64_t y_len) {
  return Enter({Handle(mlp, "mlp")}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckOutput(batch, mlp->impl->out_dim(), y_len, "y"));
    if (batch > 0 && (x == nullptr || y == nullptr)) {
      return Status::InvalidArgument("MLP inference: x and y must not be NULL");
    }
    SR_RETURN_IF_ERROR(shardrec::capi::CheckNotTraining(mlp->busy, "MLP"));
    return mlp->impl->Infer(x, batch, y);
  });
}

SHARDREC_API shardrec_status_t shardrec_mlp_backward(shardrec_mlp_t* mlp, const float* dy,
                                                     float* dx, shardrec_grad_ready_fn on_ready,
                                                     void* user) {
  return Enter({Exclusive(mlp, "mlp", "MLP")}, [&] {
    return mlp->impl->Backward(dy, dx, shardrec::capi::ToReady(on_ready, user));
  });
}

SHARDREC_API shardrec_status_t shardrec_mlp_zero_grad(shardrec_mlp_t* mlp) {
  return Enter({Exclusive(mlp, "mlp", "MLP")}, [&] { return mlp->impl->ZeroGrad(); });
}

SHARDREC_API shardrec_status_t shardrec_mlp_num_tensors(const shardrec_mlp_t* mlp, size_t* out) {
  return Enter({Handle(mlp, "mlp"), NotNull(out, "out")}, [&] {
    *out = mlp->impl->tensors().size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mlp_tensor(const shardrec_mlp_t* mlp, size_t index,
                                                   shardrec_dense_param_t* out) {
  return Enter({Handle(mlp, "mlp")},
               [&] { return shardrec::capi::TensorAt(mlp->impl->tensors(), index, out); });
}

SHARDREC_API shardrec_status_t shardrec_mlp_bind_tensor(shardrec_mlp_t* mlp, size_t index,
                                                        float* param, float* grad) {
  return Enter({Exclusive(mlp, "mlp", "MLP")},
               [&] { return mlp->impl->BindTensor(index, param, grad); });
}

SHARDREC_API shardrec_status_t shardrec_dcn_create(shardrec_dcn_t** out, int64_t width,
                                                   int32_t num_layers, int64_t rank, uint64_t seed,
                                                   const char* name) {
  return Enter({NotNull(out, "out")}, [&] {
    *out = nullptr;
    auto h = std::make_unique<shardrec_dcn>();
    const std::string n = name != nullptr && name[0] != '\0' ? name : "cross";
    SR_RETURN_IF_ERROR(shardrec::dense::CreateDcnLayer(width, num_layers, rank, seed, n, &h->impl));
    *out = h.release();
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_dcn_destroy(shardrec_dcn_t* dcn) { delete dcn; }

SHARDREC_API shardrec_status_t shardrec_dcn_forward(shardrec_dcn_t* dcn, const float* x0,
                                                    int64_t batch, float* y, int64_t y_len) {
  return Enter({Exclusive(dcn, "dcn", "DCN cross network")}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckOutput(batch, dcn->impl->out_dim(), y_len, "y"));
    return dcn->impl->Forward(x0, batch, y);
  });
}

SHARDREC_API shardrec_status_t shardrec_dcn_infer(const shardrec_dcn_t* dcn, const float* x0,
                                                  int64_t batch, float* y, int64_t y_len) {
  return Enter({Handle(dcn, "dcn")}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckOutput(batch, dcn->impl->out_dim(), y_len, "y"));
    SR_RETURN_IF_ERROR(shardrec::capi::CheckNotTraining(dcn->busy, "DCN cross network"));
    return dcn->impl->Infer(x0, batch, y);
  });
}

SHARDREC_API shardrec_status_t shardrec_dcn_backward(shardrec_dcn_t* dcn, const float* dy,
                                                     float* dx0, shardrec_grad_ready_fn on_ready,
                                                     void* user) {
  return Enter({Exclusive(dcn, "dcn", "DCN cross network")}, [&] {
    return dcn->impl->Backward(dy, dx0, shardrec::capi::ToReady(on_ready, user));
  });
}

SHARDREC_API shardrec_status_t shardrec_dcn_zero_grad(shardrec_dcn_t* dcn) {
  return Enter({Exclusive(dcn, "dcn", "DCN cross network")}, [&] { return dcn->impl->ZeroGrad(); });
}

SHARDREC_API shardrec_status_t shardrec_dcn_num_tensors(const shardrec_dcn_t* dcn, size_t* out) {
  return Enter({Handle(dcn, "dcn"), NotNull(out, "out")}, [&] {
    *out = dcn->impl->tensors().size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_dcn_tensor(const shardrec_dcn_t* dcn, size_t index,
                                                   shardrec_dense_param_t* out) {
  return Enter({Handle(dcn, "dcn")},
               [&] { return shardrec::capi::TensorAt(dcn->impl->tensors(), index, out); });
}

SHARDREC_API shardrec_status_t shardrec_dcn_bind_tensor(shardrec_dcn_t* dcn, size_t index,
                                                        float* param, float* grad) {
  return Enter({Exclusive(dcn, "dcn", "DCN cross network")},
               [&] { return dcn->impl->BindTensor(index, param, grad); });
}

SHARDREC_API shardrec_status_t shardrec_dot_interaction_width(int64_t num_sparse, int64_t dim,
                                                              int64_t* out) {
  return Enter({NotNull(out, "out")}, [&] {
    if (num_sparse < 0 || dim < 1 || num_sparse > (int64_t{1} << 20) || dim > (int64_t{1} << 24)) {
      return Status::InvalidArgument("dot interaction: ", num_sparse, " features of width ", dim);
    }
    *out = shardrec::dense::DotInteractionWidth(num_sparse, dim);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_dot_interaction_forward(const float* dense,
                                                                const float* emb, int64_t batch,
                                                                int64_t num_sparse, int64_t dim,
                                                                float* out, int64_t out_len) {
  return Enter({}, [&] {
    int64_t width = 0;
    if (shardrec_dot_interaction_width(num_sparse, dim, &width) != SHARDREC_OK) {
      return Status::InvalidArgument("dot interaction: ", num_sparse, " features of width ", dim);
    }
    SR_RETURN_IF_ERROR(shardrec::capi::CheckOutput(batch, width, out_len, "out"));
    if (batch > 0 && out == nullptr) return Status::InvalidArgument("out must not be NULL");
    return shardrec::dense::DotInteractionForward(HostDenseContext(), dense, emb, batch, num_sparse,
                                                  dim, out);
  });
}

SHARDREC_API shardrec_status_t shardrec_dot_interaction_backward(const float* dense,
                                                                 const float* emb,
                                                                 const float* dout, int64_t batch,
                                                                 int64_t num_sparse, int64_t dim,
                                                                 float* d_dense, float* d_emb) {
  return Enter({}, [&] {
    int64_t width = 0;
    if (shardrec_dot_interaction_width(num_sparse, dim, &width) != SHARDREC_OK) {
      return Status::InvalidArgument("dot interaction: ", num_sparse, " features of width ", dim);
    }
    if (batch < 0) return Status::InvalidArgument("batch size ", batch, " must be >= 0");
    // The buffers come without lengths: at least every one of them must be addressable, the
    // largest being dout (batch x width) or d_emb (batch x num_sparse x dim floats).
    const int64_t widest = std::max(width, std::max<int64_t>(num_sparse * dim, dim));
    if (batch > INT64_MAX / int64_t{sizeof(float)} / widest) {
      return Status::InvalidArgument("batch size ", batch, " overflows (", widest,
                                     " floats per sample)");
    }
    if (batch > 0 && (dout == nullptr || d_dense == nullptr || d_emb == nullptr)) {
      return Status::InvalidArgument("dot interaction backward: NULL gradient buffer");
    }
    return shardrec::dense::DotInteractionBackward(HostDenseContext(), dense, emb, dout, batch,
                                                   num_sparse, dim, d_dense, d_emb);
  });
}

SHARDREC_API shardrec_status_t shardrec_bce_with_logits(const float* logits, const float* labels,
                                                        int64_t n, double normalizer, double* loss,
                                                        float* dlogits) {
  return Enter({}, [&] {
    return shardrec::dense::BceWithLogits(logits, labels, n, normalizer, loss, dlogits);
  });
}

SHARDREC_API shardrec_status_t shardrec_dense_optimizer_create(
    shardrec_dense_optimizer_t** out, const shardrec_optimizer_config_t* config) {
  return Enter({NotNull(out, "out")}, [&] {
    *out = nullptr;
    SR_RETURN_IF_ERROR(CheckNotNull(config, "config"));
    shardrec::optim::OptimizerConfig oc;
    SR_RETURN_IF_ERROR(shardrec::capi::ToOptimizer(config, &oc));
    auto h = std::make_unique<shardrec_dense_optimizer>();
    SR_RETURN_IF_ERROR(shardrec::dense::DenseOptimizer::Create(oc, &h->impl));
    *out = h.release();
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_dense_optimizer_destroy(shardrec_dense_optimizer_t* opt) { delete opt; }

SHARDREC_API shardrec_status_t shardrec_dense_optimizer_step(shardrec_dense_optimizer_t* opt,
                                                             const shardrec_dense_param_t* tensors,
                                                             size_t n) {
  return Enter({Exclusive(opt, "optimizer", "dense optimizer")}, [&] {
    if (n > 0 && tensors == nullptr) return Status::InvalidArgument("tensors must not be NULL");
    std::vector<shardrec::dense::DenseTensor> ts(n);
    for (size_t i = 0; i < n; ++i) {
      if (tensors[i].count < 0 ||
          (tensors[i].count > 0 && (tensors[i].param == nullptr || tensors[i].grad == nullptr))) {
        return Status::InvalidArgument("tensor ", i, ": count ", tensors[i].count,
                                       " with a NULL parameter or gradient");
      }
      if (shardrec::dense::IsKnownDevicePointer(tensors[i].param) ||
          shardrec::dense::IsKnownDevicePointer(tensors[i].grad)) {
        return Status::InvalidArgument("tensor ", i,
                                       " lives on a CUDA device (a CUDA MLP's tensor): dense "
                                       "optimizer on device tensors is not supported yet");
      }
      ts[i].param = tensors[i].param;
      ts[i].grad = tensors[i].grad;
      ts[i].count = tensors[i].count;
    }
    return opt->impl->Step(ts);
  });
}

SHARDREC_API shardrec_status_t
shardrec_dense_optimizer_set_learning_rate(shardrec_dense_optimizer_t* opt, float lr) {
  return Enter({Handle(opt, "optimizer")}, [&] {
    if (!(lr >= 0.0f) || std::isinf(lr)) {
      return Status::InvalidArgument("learning rate ", lr, " must be finite and >= 0");
    }
    opt->impl->set_learning_rate(lr);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_dense_optimizer_state(shardrec_dense_optimizer_t* opt,
                                                              size_t tensor, int32_t which,
                                                              float** data, int64_t* count) {
  return Enter({Handle(opt, "optimizer"), NotNull(data, "data"), NotNull(count, "count")}, [&] {
    if (which < 0 || which > 1) return Status::InvalidArgument("state ", which, " (0 or 1)");
    // Before the first step nothing is sized yet (NULL, 0); after it a position past the list
    // the optimizer steps over is an error, as documented.
    const size_t n = opt->impl->num_tensors();
    if (n > 0 && tensor >= n)
      return Status::InvalidArgument("tensor position ", tensor, " out of range (", n, " tensors)");
    auto s = opt->impl->state(tensor, static_cast<size_t>(which));
    *data = s.empty() ? nullptr : s.data();
    *count = static_cast<int64_t>(s.size());
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_dense_optimizer_steps(const shardrec_dense_optimizer_t* opt,
                                                              int64_t* steps) {
  return Enter({Handle(opt, "optimizer"), NotNull(steps, "steps")}, [&] {
    *steps = opt->impl->steps();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_dense_optimizer_set_steps(shardrec_dense_optimizer_t* opt,
                                                                  int64_t steps) {
  return Enter({Handle(opt, "optimizer")}, [&] {
    if (steps < 0 || steps > shardrec::dense::DenseOptimizer::kMaxSteps) {
      return Status::InvalidArgument("steps must be in [0, ",
                                     shardrec::dense::DenseOptimizer::kMaxSteps, "] (2^53), got ",
                                     steps);
    }
    opt->impl->set_steps(steps);
    return Status::Ok();
  });
}

}  // extern "C"
