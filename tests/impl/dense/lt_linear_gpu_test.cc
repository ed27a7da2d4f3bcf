// The CUDA MLP (cuBLASLt through the plugin) against the host MLP (OpenBLAS), through the public
// C API: forward outputs, input gradients, weight gradients and bias gradients (BGRADB / the
// bias-grad kernel), with ReLU (RELU_AUX_BIAS + DRELU), sigmoid and identity layers, for each
// math mode. Without a usable GPU the binary exits 77 and ctest reports it skipped.
//
// Tolerances, relative to the largest magnitude of the host tensor compared:
//   fp32  1e-4: same inputs; only the summation order and FMA use differ (k <= 64 terms, each
//         ordering error a few fp32 ulps).
//   tf32  1e-2: the tensor cores round both GEMM inputs to 10 mantissa bits (relative error up to
//         2^-11 each, so ~1e-3 per product), compounded over three layers and the backward.
//   bf16  5e-2: inputs rounded to 8 mantissa bits (2^-9 each, ~4e-3 per product), same
//         compounding; accumulation stays fp32.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "shardrec/common.h"
#include "shardrec/dense.h"
#include "shardrec/device.h"

extern "C" const char* shardrec_test_skip_reason() {
  static std::string reason;
  int32_t n = 0;
  if (shardrec_device_count(&n) == SHARDREC_OK && n > 0) return nullptr;
  reason = "no usable CUDA device for the cuBLASLt MLP";
  return reason.c_str();
}

namespace {

struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  float* f() { return static_cast<float*>(p); }
  void* p = nullptr;
};

void Upload(float* dst, const std::vector<float>& src) {
  ASSERT_EQ(cudaMemcpy(dst, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
}

std::vector<float> Download(const float* src, size_t n) {
  std::vector<float> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

void ExpectClose(const std::vector<float>& ref, const std::vector<float>& got, double rel,
                 const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  double scale = 0;
  for (float v : ref) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  const double tol = rel * std::max(scale, 1e-6);
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::fabs(static_cast<double>(ref[i]) - got[i]) > tol && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: host " << ref[i] << " gpu " << got[i]
                    << " (tolerance " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void Compare(const std::vector<int32_t>& acts, int32_t math, double rel) {
  const int64_t in = 13, batch = 37;
  const int64_t outs[] = {64, 33, 5};
  shardrec_mlp_options_t o;
  ASSERT_EQ(shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION), SHARDREC_OK);
  o.in_features = in;
  o.out_features = outs;
  o.activations = acts.data();
  o.num_layers = 3;
  o.seed = 11;
  shardrec_mlp_t* host = nullptr;
  shardrec_mlp_t* gpu = nullptr;
  ASSERT_EQ(shardrec_mlp_create(&host, &o), SHARDREC_OK) << shardrec_last_error();
  o.device_type = SHARDREC_DEVICE_CUDA;
  o.math = math;
  ASSERT_EQ(shardrec_mlp_create(&gpu, &o), SHARDREC_OK) << shardrec_last_error();
  int32_t type = -1;
  ASSERT_EQ(shardrec_mlp_device(gpu, &type, nullptr), SHARDREC_OK);
  EXPECT_EQ(type, SHARDREC_DEVICE_CUDA);

  const std::vector<float> x = Random(in * batch, 1), dy = Random(5 * batch, 2);
  std::vector<float> y(5 * batch), dx(in * batch);
  ASSERT_EQ(shardrec_mlp_forward(host, x.data(), batch, y.data(), 5 * batch), SHARDREC_OK);
  ASSERT_EQ(shardrec_mlp_backward(host, dy.data(), dx.data(), nullptr, nullptr), SHARDREC_OK);

  DeviceBuffer dx_dev(x.size()), dy_dev(dy.size()), dy_in(dy.size()), ddx(dx.size());
  Upload(dx_dev.f(), x);
  Upload(dy_in.f(), dy);
  ASSERT_EQ(shardrec_mlp_forward(gpu, dx_dev.f(), batch, dy_dev.f(), 5 * batch), SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_mlp_backward(gpu, dy_in.f(), ddx.f(), nullptr, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectClose(y, Download(dy_dev.f(), y.size()), rel, "y");
  ExpectClose(dx, Download(ddx.f(), dx.size()), rel, "dx");
  size_t n = 0;
  ASSERT_EQ(shardrec_mlp_num_tensors(gpu, &n), SHARDREC_OK);
  for (size_t i = 0; i < n; ++i) {
    shardrec_dense_param_t h, g;
    ASSERT_EQ(shardrec_mlp_tensor(host, i, &h), SHARDREC_OK);
    ASSERT_EQ(shardrec_mlp_tensor(gpu, i, &g), SHARDREC_OK);
    ASSERT_EQ(h.count, g.count);
    const std::vector<float> hp(h.param, h.param + h.count), hg(h.grad, h.grad + h.count);
    ExpectClose(hp, Download(g.param, g.count), 0.0, std::string(h.name) + " initial value");
    ExpectClose(hg, Download(g.grad, g.count), rel, std::string(h.name) + " gradient");
  }
  shardrec_mlp_destroy(gpu);
  shardrec_mlp_destroy(host);
}

const std::vector<int32_t> kRelu = {SHARDREC_ACTIVATION_RELU, SHARDREC_ACTIVATION_RELU,
                                    SHARDREC_ACTIVATION_NONE};
const std::vector<int32_t> kSigmoid = {SHARDREC_ACTIVATION_SIGMOID, SHARDREC_ACTIVATION_RELU,
                                       SHARDREC_ACTIVATION_SIGMOID};

TEST(LtLinearGpu, Fp32ReluStack) { Compare(kRelu, SHARDREC_DENSE_MATH_FP32, 1e-4); }
TEST(LtLinearGpu, Fp32SigmoidStack) { Compare(kSigmoid, SHARDREC_DENSE_MATH_FP32, 1e-4); }
TEST(LtLinearGpu, Tf32ReluStack) { Compare(kRelu, SHARDREC_DENSE_MATH_TF32, 1e-2); }
TEST(LtLinearGpu, Tf32SigmoidStack) { Compare(kSigmoid, SHARDREC_DENSE_MATH_TF32, 1e-2); }
TEST(LtLinearGpu, Bf16ReluStack) { Compare(kRelu, SHARDREC_DENSE_MATH_BF16, 5e-2); }
TEST(LtLinearGpu, Bf16SigmoidStack) { Compare(kSigmoid, SHARDREC_DENSE_MATH_BF16, 5e-2); }

// The dense optimizers are host-only: a CUDA MLP's tensors are refused, not dereferenced.
TEST(LtLinearGpu, DenseOptimizerRefusesDeviceTensors) {
  const int64_t outs[] = {4};
  shardrec_mlp_options_t o;
  ASSERT_EQ(shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION), SHARDREC_OK);
  o.in_features = 3;
  o.out_features = outs;
  o.num_layers = 1;
  o.device_type = SHARDREC_DEVICE_CUDA;
  shardrec_mlp_t* gpu = nullptr;
  ASSERT_EQ(shardrec_mlp_create(&gpu, &o), SHARDREC_OK) << shardrec_last_error();
  shardrec_optimizer_config_t c;
  ASSERT_EQ(shardrec_optimizer_config_init(&c, SHARDREC_OPTIMIZER_CONFIG_VERSION), SHARDREC_OK);
  shardrec_dense_optimizer_t* opt = nullptr;
  ASSERT_EQ(shardrec_dense_optimizer_create(&opt, &c), SHARDREC_OK) << shardrec_last_error();
  shardrec_dense_param_t t;
  ASSERT_EQ(shardrec_mlp_tensor(gpu, 0, &t), SHARDREC_OK);
  EXPECT_EQ(shardrec_dense_optimizer_step(opt, &t, 1), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("not supported yet"), std::string::npos)
      << shardrec_last_error();
  shardrec_dense_optimizer_destroy(opt);
  shardrec_mlp_destroy(gpu);
}

}  // namespace
