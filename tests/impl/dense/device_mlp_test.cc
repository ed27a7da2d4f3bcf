// DeviceMlp against Mlp with the CUDA plugin replaced by
// tests/support/fake_plugins/fake_dense_plugin.cc, whose "device" is host memory and whose linear
// entries follow plugin_abi.h with naive loops. This checks what DeviceMlp itself does (layer
// chaining, the dy-is-dz and input-ReLU flags, the ReLU mask hand-over, accumulation over steps,
// buffer growth, ready order, ZeroGrad, the device-allocation registry) without a GPU; cuBLASLt
// itself is checked by lt_linear_gpu_test. Each case runs in a fresh process, since the plugin is
// loaded once per process.
#include "impl/dense/device_mlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "impl/dense/device_registry.h"
#include "impl/dense/mlp.h"
#include "tests/support/fresh_process.h"

namespace shardrec::dense {
namespace {

// |a - b| <= 1e-5 * max(1, max |a|): the host GEMM (OpenBLAS, fp32 sums) and the fake's double
// sums differ only in rounding.
bool Close(const float* a, const float* b, int64_t n, const char* what) {
  float scale = 1.0f;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(a[i]));
  for (int64_t i = 0; i < n; ++i) {
    if (std::fabs(a[i] - b[i]) > 1e-5f * scale) {
      std::fprintf(stderr, "%s[%lld]: host %g device %g\n", what, static_cast<long long>(i), a[i],
                   b[i]);
      return false;
    }
  }
  return true;
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

int StepsMatch() {
  const int64_t in = 13;
  const std::vector<int64_t> outs = {40, 17, 9, 3};
  const std::vector<Activation> acts = {Activation::kRelu, Activation::kSigmoid, Activation::kRelu,
                                        Activation::kNone};
  std::unique_ptr<Mlp> host;
  std::unique_ptr<DeviceMlp> dev;
  if (!Mlp::Create(in, outs, acts, 5, "m", &host).ok()) return 1;
  const Status s =
      DeviceMlp::Create(in, outs, acts, 5, "m", Device::Cuda(0), lt::Math::kFp32, nullptr, &dev);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  const ExecContext ctx;
  // Two steps without zeroing (gradients accumulate), the second with a larger batch (buffer
  // growth), then ZeroGrad.
  for (int step = 0; step < 2; ++step) {
    const int64_t batch = step == 0 ? 7 : 19;
    const std::vector<float> x = Random(batch * in, 10 + step), dy = Random(batch * 3, 20 + step);
    std::vector<float> yh(batch * 3), yd(batch * 3), dxh(batch * in), dxd(batch * in);
    if (!host->Forward(ctx, x.data(), batch, yh.data()).ok()) return 3;
    if (!dev->Forward(x.data(), batch, yd.data()).ok()) return 4;
    if (!Close(yh.data(), yd.data(), batch * 3, "y")) return 5;
    std::vector<size_t> order_h, order_d;
    if (!host->Backward(ctx, dy.data(), dxh.data(), [&](size_t i) { order_h.push_back(i); }).ok())
      return 6;
    if (!dev->Backward(dy.data(), dxd.data(), [&](size_t i) { order_d.push_back(i); }).ok())
      return 7;
    if (order_h != order_d) return 8;
    if (!Close(dxh.data(), dxd.data(), batch * in, "dx")) return 9;
    for (size_t t = 0; t < host->tensors().size(); ++t) {
      const DenseTensor& h = host->tensors()[t];
      const DenseTensor& d = dev->tensors()[t];
      if (h.name != d.name || h.count != d.count) return 10;
      if (!Close(h.param, d.param, h.count, h.name.c_str())) return 11;
      if (!Close(h.grad, d.grad, h.count, h.name.c_str())) return 12;
    }
  }
  // The optimizers' guard knows the device MLP's storage, and nothing of the host MLP's.
  if (!IsKnownDevicePointer(dev->tensors()[0].param) ||
      !IsKnownDevicePointer(dev->tensors()[3].grad))
    return 13;
  if (IsKnownDevicePointer(host->tensors()[0].param)) return 14;
  if (!dev->ZeroGrad().ok()) return 15;
  for (const DenseTensor& t : dev->tensors()) {
    for (int64_t i = 0; i < t.count; ++i) {
      if (t.grad[i] != 0.0f) return 16;
    }
  }
  // Backward without a forward in a fresh MLP is a usage error.
  std::unique_ptr<DeviceMlp> fresh;
  if (!DeviceMlp::Create(in, outs, acts, 5, "m", Device::Cuda(0), lt::Math::kTf32, nullptr, &fresh)
           .ok())
    return 17;
  std::vector<float> dy(3);
  if (fresh->Backward(dy.data(), nullptr, nullptr).code() != Code::kInvalidUsage) return 18;
  const void* p = dev->tensors()[0].param;
  dev.reset();
  if (IsKnownDevicePointer(p)) return 19;  // freed storage leaves the registry
  return 0;
}

const int kStepsChild = testing::RegisterFreshChild("device_mlp_steps", &StepsMatch);

TEST(DeviceMlp, MatchesTheHostMlpThroughThePluginContract) {
  EXPECT_EQ(testing::RunFresh("device_mlp_steps", SHARDREC_FAKE_DENSE_PLUGIN), 0);
}

// A plugin that serves no dense kernels (the loader's fake) loads, but a device MLP is refused,
// naming the entry.
int StaleChild() {
  std::unique_ptr<DeviceMlp> dev;
  const Status s = DeviceMlp::Create(3, {2}, {Activation::kNone}, 1, "m", Device::Cuda(0),
                                     lt::Math::kFp32, nullptr, &dev);
  if (s.code() != Code::kUnsupported) return 1;
  if (s.message().find("linear_forward") == std::string::npos) return 2;
  return dev == nullptr ? 0 : 3;
}

const int kStaleChild = testing::RegisterFreshChild("device_mlp_stale", &StaleChild);

TEST(DeviceMlp, PluginWithoutDenseEntriesIsUnsupported) {
  EXPECT_EQ(testing::RunFresh("device_mlp_stale", SHARDREC_FAKE_STALE_PLUGIN), 0);
}

TEST(DeviceMlp, HostDeviceIsRefused) {
  std::unique_ptr<DeviceMlp> dev;
  EXPECT_EQ(DeviceMlp::Create(3, {2}, {Activation::kNone}, 1, "m", Device::Host(), lt::Math::kFp32,
                              nullptr, &dev)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(DeviceMlp::Create(3, {2}, {Activation::kNone}, 1, "m", Device::Cuda(0),
                              static_cast<lt::Math>(7), nullptr, &dev)
                .code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace shardrec::dense
