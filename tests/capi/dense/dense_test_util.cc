#include "tests/capi/dense/dense_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace shardrec::testing {

std::string LastError() { return shardrec_last_error(); }

std::vector<CommPtr> LocalGroup(int n) {
  std::vector<shardrec_comm_t*> raw(static_cast<size_t>(n), nullptr);
  shardrec_comm_options_t opts = SHARDREC_COMM_OPTIONS_INIT;
  opts.timeout_ms = 60000;
  EXPECT_EQ(shardrec_comm_create_local_group(raw.data(), n, &opts), SHARDREC_OK) << LastError();
  std::vector<CommPtr> out;
  for (auto* c : raw) out.emplace_back(c);
  return out;
}

MlpPtr MakeMlp(const MlpShape& shape, const char* name) {
  shardrec_mlp_options_t o;
  EXPECT_EQ(shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION), SHARDREC_OK);
  o.in_features = shape.in;
  o.out_features = shape.outs.data();
  o.num_layers = static_cast<int32_t>(shape.outs.size());
  o.seed = shape.seed;
  o.name = name;
  shardrec_mlp_t* m = nullptr;
  EXPECT_EQ(shardrec_mlp_create(&m, &o), SHARDREC_OK) << LastError();
  return MlpPtr(m);
}

MlpPtr MakeLayer(int64_t in, int64_t out, int32_t activation) {
  shardrec_mlp_options_t o;
  EXPECT_EQ(shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION), SHARDREC_OK);
  o.in_features = in;
  o.out_features = &out;
  o.activations = &activation;
  o.num_layers = 1;
  shardrec_mlp_t* m = nullptr;
  EXPECT_EQ(shardrec_mlp_create(&m, &o), SHARDREC_OK) << LastError();
  return MlpPtr(m);
}

std::vector<shardrec_dense_param_t> Tensors(shardrec_mlp_t* mlp) {
  size_t n = 0;
  EXPECT_EQ(shardrec_mlp_num_tensors(mlp, &n), SHARDREC_OK);
  std::vector<shardrec_dense_param_t> ts(n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(shardrec_mlp_tensor(mlp, i, &ts[i]), SHARDREC_OK);
  return ts;
}

std::vector<int64_t> TensorCounts(shardrec_mlp_t* mlp) {
  std::vector<int64_t> out;
  for (const auto& t : Tensors(mlp)) out.push_back(t.count);
  return out;
}

std::vector<std::vector<float>> Params(shardrec_mlp_t* mlp) {
  std::vector<std::vector<float>> out;
  for (const auto& t : Tensors(mlp)) out.emplace_back(t.param, t.param + t.count);
  return out;
}

std::vector<std::vector<float>> Grads(shardrec_mlp_t* mlp) {
  std::vector<std::vector<float>> out;
  for (const auto& t : Tensors(mlp)) out.emplace_back(t.grad, t.grad + t.count);
  return out;
}

Batch MakeBatch(int64_t in, int64_t first, int64_t count, int step) {
  Batch b;
  b.x.resize(static_cast<size_t>(count * in));
  b.labels.resize(static_cast<size_t>(count));
  for (int64_t s = 0; s < count; ++s) {
    const int64_t id = first + s;
    double dot = 0;
    for (int64_t j = 0; j < in; ++j) {
      const float v = static_cast<float>(std::sin(0.731 * static_cast<double>(id + 1) +
                                                  1.37 * static_cast<double>(j) +
                                                  0.29 * static_cast<double>(step)));
      b.x[static_cast<size_t>(s * in + j)] = v;
      dot += v * (j % 3 == 0 ? 1.0 : -0.5);
    }
    b.labels[static_cast<size_t>(s)] = dot > 0 ? 1.0f : 0.0f;
  }
  return b;
}

shardrec_optimizer_config_t SgdConfig(float lr) {
  shardrec_optimizer_config_t c;
  EXPECT_EQ(shardrec_optimizer_config_init(&c, SHARDREC_OPTIMIZER_CONFIG_VERSION), SHARDREC_OK);
  c.type = SHARDREC_OPTIMIZER_SGD;
  c.learning_rate = lr;
  return c;
}

shardrec_optimizer_config_t AdamConfig(float lr) {
  shardrec_optimizer_config_t c = SgdConfig(lr);
  c.type = SHARDREC_OPTIMIZER_ADAM;
  return c;
}

double ForwardBackward(shardrec_mlp_t* mlp, const Batch& b, shardrec_grad_ready_fn on_ready,
                       void* user) {
  const int64_t n = static_cast<int64_t>(b.labels.size());
  std::vector<float> logits(static_cast<size_t>(n)), dlogits(static_cast<size_t>(n));
  EXPECT_EQ(shardrec_mlp_forward(mlp, b.x.data(), n, logits.data(), n), SHARDREC_OK) << LastError();
  double loss = 0;
  EXPECT_EQ(shardrec_bce_with_logits(logits.data(), b.labels.data(), n, static_cast<double>(n),
                                     &loss, dlogits.data()),
            SHARDREC_OK)
      << LastError();
  EXPECT_EQ(shardrec_mlp_backward(mlp, dlogits.data(), nullptr, on_ready, user), SHARDREC_OK)
      << LastError();
  return loss;
}

double WorstError(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b, double atol, double rtol) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t t = 0; t < a.size() && t < b.size(); ++t) {
    EXPECT_EQ(a[t].size(), b[t].size());
    for (size_t e = 0; e < a[t].size() && e < b[t].size(); ++e) {
      const double err = std::fabs(static_cast<double>(a[t][e]) - b[t][e]) /
                         (atol + rtol * std::fabs(static_cast<double>(b[t][e])));
      worst = std::max(worst, err);
    }
  }
  return worst;
}

double MaxAbsDiff(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (size_t t = 0; t < a.size() && t < b.size(); ++t) {
    for (size_t e = 0; e < a[t].size() && e < b[t].size(); ++e) {
      worst = std::max(worst, std::fabs(static_cast<double>(a[t][e]) - b[t][e]));
    }
  }
  return worst;
}

}  // namespace shardrec::testing
