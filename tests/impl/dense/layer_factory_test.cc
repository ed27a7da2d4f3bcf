// The dense layer factory: the host layers it makes give the bits of the Mlp and DcnCross they
// wrap (forward, gradients, ready order), and a CUDA placement goes to the device MLP, which
// without a plugin or device is refused with nothing made.
#include "impl/dense/layer_factory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "impl/dense/interaction.h"
#include "impl/dense/mlp.h"

namespace shardrec::dense {
namespace {

std::vector<float> Uniform(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool SameBits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// One forward and backward through the layer and through the plain host block, compared bit
// for bit: outputs, input gradients, every parameter gradient and the ready order.
template <class Block>
void ExpectSameStep(DenseLayer& layer, Block& block, int64_t batch) {
  const int64_t in = layer.in_dim(), out = layer.out_dim();
  const std::vector<float> x = Uniform(batch * in, 7), dy = Uniform(batch * out, 8);
  std::vector<float> y1(batch * out), y2(batch * out), dx1(batch * in), dx2(batch * in);
  ASSERT_TRUE(layer.Forward(x.data(), batch, y1.data()).ok());
  ASSERT_TRUE(block.Forward(ExecContext(), x.data(), batch, y2.data()).ok());
  EXPECT_TRUE(SameBits(y1, y2));
  std::vector<size_t> ready1, ready2;
  ASSERT_TRUE(layer.Backward(dy.data(), dx1.data(), [&](size_t i) { ready1.push_back(i); }).ok());
  ASSERT_TRUE(
      block.Backward(ExecContext(), dy.data(), dx2.data(), [&](size_t i) { ready2.push_back(i); })
          .ok());
  EXPECT_TRUE(SameBits(dx1, dx2));
  EXPECT_EQ(ready1, ready2);
  ASSERT_EQ(layer.tensors().size(), block.tensors().size());
  for (size_t i = 0; i < layer.tensors().size(); ++i) {
    const DenseTensor &a = layer.tensors()[i], &b = block.tensors()[i];
    EXPECT_EQ(a.name, b.name);
    ASSERT_EQ(a.count, b.count);
    EXPECT_TRUE(SameBits(a.param, b.param, a.count)) << a.name;
    EXPECT_TRUE(SameBits(a.grad, b.grad, a.count)) << a.name;
  }
  ASSERT_TRUE(layer.ZeroGrad().ok());
  for (const DenseTensor& t : layer.tensors())
    EXPECT_TRUE(SameBits(t.grad, std::vector<float>(t.count, 0.0f).data(), t.count)) << t.name;
}

TEST(DenseLayerFactory, HostMlpLayerGivesTheMlpBits) {
  MlpSpec spec{5, {7, 3}, {Activation::kRelu, Activation::kNone}, 11, "m"};
  std::unique_ptr<DenseLayer> layer;
  ASSERT_TRUE(CreateMlpLayer(spec, Device::Host(), lt::Math::kFp32, nullptr, &layer).ok());
  std::unique_ptr<Mlp> mlp;
  ASSERT_TRUE(Mlp::Create(spec.in, spec.outs, spec.acts, spec.seed, spec.name, &mlp).ok());
  EXPECT_TRUE(layer->device().is_host());
  EXPECT_EQ(layer->in_dim(), 5);
  EXPECT_EQ(layer->out_dim(), 3);
  ExpectSameStep(*layer, *mlp, 4);
}

TEST(DenseLayerFactory, HostDcnLayerGivesTheCrossNetworkBits) {
  std::unique_ptr<DenseLayer> layer;
  ASSERT_TRUE(CreateDcnLayer(6, 2, 3, 13, "cross", &layer).ok());
  std::unique_ptr<DcnCross> dcn;
  ASSERT_TRUE(DcnCross::Create(6, 2, 3, 13, "cross", &dcn).ok());
  EXPECT_TRUE(layer->device().is_host());
  EXPECT_EQ(layer->in_dim(), 6);
  EXPECT_EQ(layer->out_dim(), 6);
  ExpectSameStep(*layer, *dcn, 5);
}

TEST(DenseLayerFactory, BadInputAndAMissingDeviceMakeNothing) {
  std::unique_ptr<DenseLayer> layer;
  MlpSpec bad{0, {3}, {Activation::kNone}, 1, "m"};
  EXPECT_EQ(CreateMlpLayer(bad, Device::Host(), lt::Math::kFp32, nullptr, &layer).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(layer, nullptr);
  EXPECT_EQ(CreateDcnLayer(0, 2, 3, 1, "cross", &layer).code(), Code::kInvalidArgument);
  EXPECT_EQ(layer, nullptr);
  // A CUDA placement makes the device MLP: without a plugin or device (a build without CUDA,
  // a machine without a GPU) it is refused and nothing is made.
  MlpSpec spec{3, {2}, {Activation::kNone}, 1, "m"};
  const Status s = CreateMlpLayer(spec, Device::Cuda(0), lt::Math::kFp32, nullptr, &layer);
  if (s.ok()) {
    ASSERT_NE(layer, nullptr);
    EXPECT_TRUE(layer->device().is_cuda());
    layer.reset();
  } else {
    EXPECT_TRUE(s.code() == Code::kNoDevice || s.code() == Code::kUnsupported) << s.ToString();
    EXPECT_EQ(layer, nullptr);
  }
  EXPECT_EQ(CreateMlpLayer(spec, Device::Host(), lt::Math::kFp32, nullptr, nullptr).code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace shardrec::dense
