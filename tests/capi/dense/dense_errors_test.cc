// Errors of the dense layer C API: bad shapes, NULLs, a backward before any forward, changed
// optimizer tensor lists. Each is refused with a status and a message, and changes nothing: the
// parameters, gradients and the stored forward are as before, so the next correct call gives
// the same result as if the bad one had never been made.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/capi/dense/dense_test_util.h"

namespace shardrec::testing {
namespace {

const MlpShape kSmall{6, {5, 1}, 3};

bool Mentions(const char* what) { return LastError().find(what) != std::string::npos; }

TEST(CapiDenseErrors, MlpCreateRefusesBadOptions) {
  shardrec_mlp_options_t o;
  ASSERT_EQ(shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION), SHARDREC_OK);
  EXPECT_EQ(shardrec_mlp_options_init(&o, 99), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_options_init(nullptr, SHARDREC_MLP_OPTIONS_VERSION), SHARDREC_EINVAL);
  const int64_t outs[] = {4, 0};
  const int32_t bad_act[] = {SHARDREC_ACTIVATION_RELU, 9};
  o.in_features = 3;
  o.out_features = outs;
  o.num_layers = 1;
  shardrec_mlp_t* m = nullptr;
  EXPECT_EQ(shardrec_mlp_create(&m, nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_create(nullptr, &o), SHARDREC_EINVAL);
  o.num_layers = 2;  // second width is 0
  EXPECT_EQ(shardrec_mlp_create(&m, &o), SHARDREC_EINVAL);
  EXPECT_TRUE(Mentions("width")) << LastError();
  o.num_layers = 0;
  EXPECT_EQ(shardrec_mlp_create(&m, &o), SHARDREC_EINVAL);
  EXPECT_TRUE(Mentions("num_layers")) << LastError();
  o.num_layers = 1;
  o.in_features = 0;
  EXPECT_EQ(shardrec_mlp_create(&m, &o), SHARDREC_EINVAL);
  o.in_features = 3;
  o.out_features = nullptr;
  EXPECT_EQ(shardrec_mlp_create(&m, &o), SHARDREC_EINVAL);
  o.out_features = outs;
  o.num_layers = 2;
  const int64_t good[] = {4, 2};
  o.out_features = good;
  o.activations = bad_act;
  EXPECT_EQ(shardrec_mlp_create(&m, &o), SHARDREC_EINVAL);
  EXPECT_TRUE(Mentions("activation 9")) << LastError();
  o.activations = nullptr;
  o.version = 42;
  EXPECT_EQ(shardrec_mlp_create(&m, &o), SHARDREC_EINVAL);
  EXPECT_EQ(m, nullptr);
  o.version = SHARDREC_MLP_OPTIONS_VERSION;
  ASSERT_EQ(shardrec_mlp_create(&m, &o), SHARDREC_OK) << LastError();
  MlpPtr mlp(m);
  int64_t in = 0, out = 0;
  ASSERT_EQ(shardrec_mlp_dims(mlp.get(), &in, &out), SHARDREC_OK);
  EXPECT_EQ(in, 3);
  EXPECT_EQ(out, 2);
}

TEST(CapiDenseErrors, BackwardBeforeForwardAndBadBuffersChangeNothing) {
  MlpPtr mlp = MakeMlp(kSmall);
  MlpPtr twin = MakeMlp(kSmall);  // receives only the correct calls
  const Batch b = MakeBatch(kSmall.in, 0, 4, 0);
  std::vector<float> y(4), dy = {0.5f, -1.0f, 0.25f, 2.0f}, dx(4 * 6);
  const auto params0 = Params(mlp.get());
  // Backward before any forward.
  EXPECT_EQ(shardrec_mlp_backward(mlp.get(), dy.data(), dx.data(), nullptr, nullptr),
            SHARDREC_EUSAGE);
  EXPECT_TRUE(Mentions("without a forward")) << LastError();
  // Bad forwards: NULL input or output, negative batch, output too small, NULL handle.
  EXPECT_EQ(shardrec_mlp_forward(mlp.get(), nullptr, 4, y.data(), 4), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_forward(mlp.get(), b.x.data(), 4, nullptr, 4), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_forward(mlp.get(), b.x.data(), -1, y.data(), 4), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_forward(mlp.get(), b.x.data(), 4, y.data(), 3), SHARDREC_EINVAL);
  EXPECT_TRUE(Mentions("4 are needed")) << LastError();
  EXPECT_EQ(shardrec_mlp_forward(nullptr, b.x.data(), 4, y.data(), 4), SHARDREC_EINVAL);
  // None of them counted as a forward.
  EXPECT_EQ(shardrec_mlp_backward(mlp.get(), dy.data(), dx.data(), nullptr, nullptr),
            SHARDREC_EUSAGE);
  for (const auto& g : Grads(mlp.get())) {
    for (float v : g) ASSERT_EQ(v, 0.0f);
  }
  EXPECT_EQ(Params(mlp.get()), params0);
  // A correct forward; then a bad forward with a different batch must not replace what the
  // backward reads.
  ASSERT_EQ(shardrec_mlp_forward(mlp.get(), b.x.data(), 4, y.data(), 4), SHARDREC_OK);
  const Batch other = MakeBatch(kSmall.in, 100, 2, 0);
  std::vector<float> y2(2);
  EXPECT_EQ(shardrec_mlp_forward(mlp.get(), other.x.data(), 2, y2.data(), 1), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_backward(mlp.get(), nullptr, dx.data(), nullptr, nullptr),
            SHARDREC_EINVAL);
  ASSERT_EQ(shardrec_mlp_backward(mlp.get(), dy.data(), dx.data(), nullptr, nullptr), SHARDREC_OK);
  std::vector<float> ty(4), tdx(4 * 6);
  ASSERT_EQ(shardrec_mlp_forward(twin.get(), b.x.data(), 4, ty.data(), 4), SHARDREC_OK);
  ASSERT_EQ(shardrec_mlp_backward(twin.get(), dy.data(), tdx.data(), nullptr, nullptr),
            SHARDREC_OK);
  EXPECT_EQ(y, ty);
  EXPECT_EQ(dx, tdx);
  EXPECT_EQ(Grads(mlp.get()), Grads(twin.get()));
  bool nonzero = false;
  for (const auto& g : Grads(mlp.get())) {
    for (float v : g) nonzero |= v != 0.0f;
  }
  EXPECT_TRUE(nonzero);
  // Tensor index checks.
  shardrec_dense_param_t t;
  size_t n = 0;
  ASSERT_EQ(shardrec_mlp_num_tensors(mlp.get(), &n), SHARDREC_OK);
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(shardrec_mlp_tensor(mlp.get(), n, &t), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_tensor(mlp.get(), 0, nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_bind_tensor(mlp.get(), n, nullptr, nullptr), SHARDREC_EINVAL);
  ASSERT_EQ(shardrec_mlp_tensor(mlp.get(), 1, &t), SHARDREC_OK);
  EXPECT_STREQ(t.name, "mlp.0.bias");
  EXPECT_EQ(t.count, 5);
  EXPECT_EQ(shardrec_mlp_zero_grad(nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_num_tensors(nullptr, &n), SHARDREC_EINVAL);
  shardrec_mlp_destroy(nullptr);
}

TEST(CapiDenseErrors, OptimizerRefusesChangedListsAndBadConfigsWithoutUpdating) {
  shardrec_optimizer_config_t c = AdamConfig(0.1f);
  shardrec_dense_optimizer_t* raw = nullptr;
  c.type = SHARDREC_OPTIMIZER_LAMB;
  EXPECT_EQ(shardrec_dense_optimizer_create(&raw, &c), SHARDREC_EINVAL);
  c.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  EXPECT_EQ(shardrec_dense_optimizer_create(&raw, &c), SHARDREC_EINVAL);
  EXPECT_TRUE(Mentions("not supported")) << LastError();
  EXPECT_EQ(shardrec_dense_optimizer_create(&raw, nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(raw, nullptr);
  c.type = SHARDREC_OPTIMIZER_ADAM;
  ASSERT_EQ(shardrec_dense_optimizer_create(&raw, &c), SHARDREC_OK) << LastError();
  OptPtr opt(raw);
  std::vector<float> w = {1, 2, 3}, g = {0.5f, -0.5f, 1}, v = {4}, gv = {1};
  shardrec_dense_param_t ts[2] = {{"w", w.data(), g.data(), 3}, {"v", v.data(), gv.data(), 1}};
  float* state = nullptr;
  int64_t count = -1;
  ASSERT_EQ(shardrec_dense_optimizer_state(opt.get(), 0, 0, &state, &count), SHARDREC_OK);
  EXPECT_EQ(state, nullptr);  // sized at the first step
  EXPECT_EQ(count, 0);
  ASSERT_EQ(shardrec_dense_optimizer_step(opt.get(), ts, 2), SHARDREC_OK) << LastError();
  const std::vector<float> w1 = w, v1 = v;
  EXPECT_NE(w1, (std::vector<float>{1, 2, 3}));
  // A changed list (fewer tensors, another count, a NULL gradient) is refused; nothing moves.
  EXPECT_EQ(shardrec_dense_optimizer_step(opt.get(), ts, 1), SHARDREC_EINVAL);
  shardrec_dense_param_t wrong[2] = {ts[0], {"v", v.data(), gv.data(), 2}};
  EXPECT_EQ(shardrec_dense_optimizer_step(opt.get(), wrong, 2), SHARDREC_EINVAL);
  EXPECT_TRUE(Mentions("has 2 elements")) << LastError();
  shardrec_dense_param_t null_grad[2] = {ts[0], {"v", v.data(), nullptr, 1}};
  EXPECT_EQ(shardrec_dense_optimizer_step(opt.get(), null_grad, 2), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_dense_optimizer_step(opt.get(), nullptr, 2), SHARDREC_EINVAL);
  EXPECT_EQ(w, w1);
  EXPECT_EQ(v, v1);
  int64_t steps = -1;
  ASSERT_EQ(shardrec_dense_optimizer_steps(opt.get(), &steps), SHARDREC_OK);
  EXPECT_EQ(steps, 1);
  ASSERT_EQ(shardrec_dense_optimizer_state(opt.get(), 0, 1, &state, &count), SHARDREC_OK);
  ASSERT_EQ(count, 3);
  // Adam's second moment after one step from zero: (1 - beta2) g^2.
  EXPECT_FLOAT_EQ(state[2], (1.0f - 0.999f) * 1.0f);
  EXPECT_EQ(shardrec_dense_optimizer_state(opt.get(), 0, 2, &state, &count), SHARDREC_EINVAL);
  // A position past the two tensors stepped over is refused (it read as "no state" before).
  EXPECT_EQ(shardrec_dense_optimizer_state(opt.get(), 2, 0, &state, &count), SHARDREC_EINVAL);
  EXPECT_TRUE(Mentions("out of range")) << LastError();
  EXPECT_EQ(shardrec_dense_optimizer_set_learning_rate(opt.get(), -1.0f), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_dense_optimizer_set_steps(opt.get(), -3), SHARDREC_EINVAL);
  ASSERT_EQ(shardrec_dense_optimizer_steps(opt.get(), &steps), SHARDREC_OK);
  EXPECT_EQ(steps, 1);
  // The count stays in [0, 2^53]: INT64_MAX was accepted and the next step wrapped it negative.
  constexpr int64_t kMax = int64_t{1} << 53;
  EXPECT_EQ(shardrec_dense_optimizer_set_steps(opt.get(), INT64_MAX), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_dense_optimizer_set_steps(opt.get(), kMax + 1), SHARDREC_EINVAL);
  ASSERT_EQ(shardrec_dense_optimizer_set_steps(opt.get(), kMax - 1), SHARDREC_OK);
  ASSERT_EQ(shardrec_dense_optimizer_step(opt.get(), ts, 2), SHARDREC_OK) << LastError();
  const std::vector<float> w2 = w, v2 = v;
  EXPECT_EQ(shardrec_dense_optimizer_step(opt.get(), ts, 2), SHARDREC_EUSAGE);
  EXPECT_TRUE(Mentions("maximum")) << LastError();
  EXPECT_EQ(w, w2);
  EXPECT_EQ(v, v2);
  ASSERT_EQ(shardrec_dense_optimizer_steps(opt.get(), &steps), SHARDREC_OK);
  EXPECT_EQ(steps, kMax);
}

// Sizes whose float counts wrap around int64 were taken as small: a DCN whose parameter count
// wrapped to 65,536 floats had its first layer written past them (a crash), and a dot
// interaction backward (its buffers carry no lengths) ran over 2^62 samples. Both are refused.
TEST(CapiDenseErrors, SizesThatWrapAroundAreRefused) {
  shardrec_dcn_t* dcn = nullptr;
  EXPECT_EQ(shardrec_dcn_create(&dcn, 65536, 22253377, 6324320, 1, "wrap"), SHARDREC_EINVAL);
  EXPECT_EQ(dcn, nullptr);
  EXPECT_NE(std::string(shardrec_last_error()).find("exceed 2^40 parameters"), std::string::npos)
      << shardrec_last_error();
  float one[1] = {0};
  EXPECT_EQ(shardrec_dot_interaction_backward(one, one, one, int64_t{1} << 62, 7, 4, one, one),
            SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("overflows"), std::string::npos)
      << shardrec_last_error();
}

TEST(CapiDenseErrors, DcnInteractionAndLossRefuseBadArgumentsWithoutWriting) {
  shardrec_dcn_t* raw = nullptr;
  EXPECT_EQ(shardrec_dcn_create(&raw, 0, 2, 2, 1, nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_dcn_create(&raw, 4, 0, 2, 1, nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_dcn_create(&raw, 4, 2, 0, 1, nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(raw, nullptr);
  ASSERT_EQ(shardrec_dcn_create(&raw, 4, 2, 2, 1, nullptr), SHARDREC_OK);
  std::unique_ptr<shardrec_dcn_t, void (*)(shardrec_dcn_t*)> dcn(raw, shardrec_dcn_destroy);
  std::vector<float> x(3 * 4, 0.5f), y(3 * 4, -7.0f), dy(3 * 4, 1.0f), dx(3 * 4, -7.0f);
  EXPECT_EQ(shardrec_dcn_backward(dcn.get(), dy.data(), dx.data(), nullptr, nullptr),
            SHARDREC_EUSAGE);
  EXPECT_EQ(shardrec_dcn_forward(dcn.get(), x.data(), 3, y.data(), 11), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_dcn_backward(dcn.get(), dy.data(), dx.data(), nullptr, nullptr),
            SHARDREC_EUSAGE);
  for (float v : y) ASSERT_EQ(v, -7.0f);
  for (float v : dx) ASSERT_EQ(v, -7.0f);
  ASSERT_EQ(shardrec_dcn_forward(dcn.get(), x.data(), 3, y.data(), 12), SHARDREC_OK);
  EXPECT_EQ(shardrec_dcn_backward(dcn.get(), dy.data(), nullptr, nullptr, nullptr),
            SHARDREC_EINVAL);  // dx0 is required
  size_t n = 0;
  ASSERT_EQ(shardrec_dcn_num_tensors(dcn.get(), &n), SHARDREC_OK);
  EXPECT_EQ(n, 6u);
  shardrec_dense_param_t t;
  EXPECT_EQ(shardrec_dcn_tensor(dcn.get(), 6, &t), SHARDREC_EINVAL);
  // Dot interaction.
  int64_t width = 0;
  EXPECT_EQ(shardrec_dot_interaction_width(-1, 4, &width), SHARDREC_EINVAL);
  ASSERT_EQ(shardrec_dot_interaction_width(3, 4, &width), SHARDREC_OK);
  EXPECT_EQ(width, 4 + 6);
  std::vector<float> dense(2 * 4, 1.0f), emb(2 * 3 * 4, 1.0f), out(2 * width, -7.0f);
  EXPECT_EQ(shardrec_dot_interaction_forward(dense.data(), emb.data(), 2, 3, 4, out.data(),
                                             2 * width - 1),
            SHARDREC_EINVAL);
  for (float v : out) ASSERT_EQ(v, -7.0f);
  ASSERT_EQ(
      shardrec_dot_interaction_forward(dense.data(), emb.data(), 2, 3, 4, out.data(), 2 * width),
      SHARDREC_OK);
  EXPECT_EQ(out[width - 1], 4.0f);  // a dot product of two all-ones vectors of width 4
  // BCE: a label that is not 0/1 or a zero normalizer writes nothing.
  const float logits[] = {0.3f, -2.0f}, bad_labels[] = {1.0f, 2.0f}, labels[] = {1.0f, 0.0f};
  float dl[] = {-7.0f, -7.0f};
  double loss = -7.0;
  EXPECT_EQ(shardrec_bce_with_logits(logits, bad_labels, 2, 2.0, &loss, dl), SHARDREC_EINVAL);
  EXPECT_TRUE(Mentions("label 1")) << LastError();
  EXPECT_EQ(shardrec_bce_with_logits(logits, labels, 2, 0.0, &loss, dl), SHARDREC_EINVAL);
  EXPECT_EQ(loss, -7.0);
  EXPECT_EQ(dl[0], -7.0f);
  EXPECT_EQ(dl[1], -7.0f);
  ASSERT_EQ(shardrec_bce_with_logits(logits, labels, 2, 2.0, &loss, dl), SHARDREC_OK);
  EXPECT_NEAR(loss, (std::log1p(std::exp(-0.3)) + std::log1p(std::exp(-2.0))) / 2, 1e-7);
  EXPECT_NEAR(dl[0], (1 / (1 + std::exp(-0.3)) - 1) / 2, 1e-7);
  // Thread count.
  EXPECT_EQ(shardrec_dense_set_blas_threads(0), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_dense_blas_threads(nullptr), SHARDREC_EINVAL);
}

}  // namespace
}  // namespace shardrec::testing
