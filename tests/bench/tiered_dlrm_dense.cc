// tiered_step_bench's real dense model: examples/dlrm's bottom MLP, dot interaction, top MLP,
// loss, bucketed gradient average and Adam, called through the public C API in the order
// examples/dlrm/dlrm_model.c calls them around the embedding forward and backward.
#include <random>
#include <vector>

#include "tests/bench/capi_bench_util.h"
#include "tests/bench/tiered_dense_work.h"

namespace shardrec::bench {
namespace {

constexpr int64_t kNumDense = 13;  // Criteo's dense features, as dlrm_config_defaults

class DlrmDense : public DenseWork {
 public:
  DlrmDense(shardrec_comm_t* comm, int64_t batch, int32_t dim, uint64_t seed)
      : batch_(batch), dim_(dim) {
    // dlrm_config_defaults's widths, the bottom MLP ending at the embedding width.
    const int64_t bottom[] = {64, 32, dim};
    const int64_t top[] = {128, 64, 1};
    Check(shardrec_dot_interaction_width(1, dim, &inter_width_), "interaction width");
    shardrec_mlp_options_t o;
    Check(shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION), "mlp options");
    o.in_features = kNumDense;
    o.out_features = bottom;
    o.num_layers = 3;
    o.seed = seed;
    o.name = "bottom";
    Check(shardrec_mlp_create(&bottom_, &o), "bottom mlp");
    o.in_features = inter_width_;
    o.out_features = top;
    o.num_layers = 3;
    o.name = "top";
    Check(shardrec_mlp_create(&top_, &o), "top mlp");
    Check(shardrec_mlp_num_tensors(bottom_, &num_bottom_), "bottom tensors");
    size_t num_top = 0;
    Check(shardrec_mlp_num_tensors(top_, &num_top), "top tensors");
    tensors_.resize(num_bottom_ + num_top);
    std::vector<int64_t> counts;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      Tensor(i, &tensors_[i]);
      counts.push_back(tensors_[i].count);
    }
    // The main job's buckets: this small model's gradients travel in several pieces.
    shardrec_ddp_options_t d;
    Check(shardrec_ddp_options_init(&d, SHARDREC_DDP_OPTIONS_VERSION), "ddp options");
    d.first_bucket_bytes = 32 << 10;
    d.bucket_cap_bytes = 128 << 10;
    Check(shardrec_ddp_create(&ddp_, comm, counts.data(), counts.size(), &d), "ddp");
    shardrec_optimizer_config_t adam;
    Check(shardrec_optimizer_config_init(&adam, SHARDREC_OPTIMIZER_CONFIG_VERSION), "adam");
    adam.type = SHARDREC_OPTIMIZER_ADAM;
    adam.learning_rate = 1e-3f;
    Check(shardrec_dense_optimizer_create(&opt_, &adam), "dense optimizer");
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    dense_.resize(static_cast<size_t>(batch * kNumDense));
    for (float& x : dense_) x = normal(rng);
    labels_.resize(static_cast<size_t>(batch));
    for (float& y : labels_) y = static_cast<float>(rng() & 1);
    bot_out_.resize(static_cast<size_t>(batch * dim));
    d_bot_.resize(bot_out_.size());
    inter_.resize(static_cast<size_t>(batch * inter_width_));
    d_inter_.resize(inter_.size());
    logits_.resize(static_cast<size_t>(batch));
    dlogits_.resize(logits_.size());
  }

  ~DlrmDense() override {
    shardrec_dense_optimizer_destroy(opt_);
    shardrec_ddp_destroy(ddp_);
    shardrec_mlp_destroy(top_);
    shardrec_mlp_destroy(bottom_);
  }

  void ForwardBackward(const float* pooled, float* d_pooled) override {
    ready_status_ = SHARDREC_OK;
    BindGradients();
    Check(shardrec_ddp_zero_grad(ddp_), "zero grad");
    Check(shardrec_mlp_forward(bottom_, dense_.data(), batch_, bot_out_.data(),
                               static_cast<int64_t>(bot_out_.size())),
          "bottom forward");
    Check(shardrec_dot_interaction_forward(bot_out_.data(), pooled, batch_, 1, dim_, inter_.data(),
                                           static_cast<int64_t>(inter_.size())),
          "interaction forward");
    Check(shardrec_mlp_forward(top_, inter_.data(), batch_, logits_.data(), batch_), "top forward");
    double loss = 0;
    Check(shardrec_bce_with_logits(logits_.data(), labels_.data(), batch_,
                                   static_cast<double>(batch_), &loss, dlogits_.data()),
          "loss");
    Ready top{this, num_bottom_};
    Check(shardrec_mlp_backward(top_, dlogits_.data(), d_inter_.data(), OnReady, &top),
          "top backward");
    Check(shardrec_dot_interaction_backward(bot_out_.data(), pooled, d_inter_.data(), batch_, 1,
                                            dim_, d_bot_.data(), d_pooled),
          "interaction backward");
  }

  void Finish() override {
    Ready bottom{this, 0};
    Check(shardrec_mlp_backward(bottom_, d_bot_.data(), nullptr, OnReady, &bottom),
          "bottom backward");
    Check(ready_status_, "mark ready");
    Check(shardrec_ddp_finish(ddp_), "dense gradient average");
    for (size_t i = 0; i < tensors_.size(); ++i) Tensor(i, &tensors_[i]);
    Check(shardrec_dense_optimizer_step(opt_, tensors_.data(), tensors_.size()), "dense step");
  }

 private:
  struct Ready {
    DlrmDense* model;
    size_t offset;
  };

  static void OnReady(size_t tensor, void* user) {
    auto* r = static_cast<Ready*>(user);
    const shardrec_status_t rc = shardrec_ddp_mark_ready(r->model->ddp_, r->offset + tensor);
    if (rc != SHARDREC_OK && r->model->ready_status_ == SHARDREC_OK) r->model->ready_status_ = rc;
  }

  void Tensor(size_t i, shardrec_dense_param_t* out) const {
    if (i < num_bottom_) {
      Check(shardrec_mlp_tensor(bottom_, i, out), "bottom tensor");
    } else {
      Check(shardrec_mlp_tensor(top_, i - num_bottom_, out), "top tensor");
    }
  }

  // The gradients live in the bucketer's storage, which moves once when the buckets are rebuilt
  // after the first step (as dlrm_model.c rebinds them).
  void BindGradients() {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      float* g = nullptr;
      Check(shardrec_ddp_grad(ddp_, i, &g), "ddp grad");
      if (i < num_bottom_) {
        Check(shardrec_mlp_bind_tensor(bottom_, i, nullptr, g), "bind bottom");
      } else {
        Check(shardrec_mlp_bind_tensor(top_, i - num_bottom_, nullptr, g), "bind top");
      }
    }
  }

  int64_t batch_;
  int32_t dim_;
  int64_t inter_width_ = 0;
  shardrec_mlp_t* bottom_ = nullptr;
  shardrec_mlp_t* top_ = nullptr;
  shardrec_ddp_t* ddp_ = nullptr;
  shardrec_dense_optimizer_t* opt_ = nullptr;
  size_t num_bottom_ = 0;
  std::vector<shardrec_dense_param_t> tensors_;
  shardrec_status_t ready_status_ = SHARDREC_OK;
  std::vector<float> dense_, labels_, bot_out_, d_bot_, inter_, d_inter_, logits_, dlogits_;
};

}  // namespace

std::unique_ptr<DenseWork> MakeDlrmDense(shardrec_comm_t* comm, int64_t batch, int32_t dim,
                                         uint64_t seed) {
  return std::make_unique<DlrmDense>(comm, batch, dim, seed);
}

}  // namespace shardrec::bench
