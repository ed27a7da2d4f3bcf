// Dense layers against naive loops (forward) and central finite differences in double
// precision of a random linear functional of the output (backward), for every layer kind.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "impl/core/thread_pool.h"
#include "impl/dense/interaction.h"
#include "impl/dense/linear.h"
#include "impl/dense/mlp.h"

namespace shardrec::dense {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Checks analytic[i] against (f(x + h e_i) - f(x - h e_i)) / 2h for a sample of coordinates.
void CheckGradient(std::vector<float>& x, const std::vector<float>& analytic,
                   const std::function<double()>& f, const char* what, double tol = 2e-2) {
  ASSERT_EQ(x.size(), analytic.size());
  const size_t step = x.size() > 40 ? x.size() / 40 : 1;
  for (size_t i = 0; i < x.size(); i += step) {
    const float keep = x[i];
    const float h = 1e-2f;
    x[i] = keep + h;
    const double up = f();
    x[i] = keep - h;
    const double down = f();
    x[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(analytic[i], numeric, tol * (1.0 + std::fabs(numeric))) << what << " [" << i << "]";
  }
}

class LinearTest : public ::testing::TestWithParam<Activation> {};

TEST_P(LinearTest, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  const LinearShape s{7, 5, GetParam()};
  const int64_t batch = 6;
  auto w = Random(s.out * s.in, 1), b = Random(s.out, 2), x = Random(batch * s.in, 3);
  auto probe = Random(batch * s.out, 4);
  ThreadPool pool(2);
  ExecContext ctx = ExecContext::Host(&pool);
  std::vector<float> y(batch * s.out);
  ASSERT_TRUE(LinearForward(ctx, s, w.data(), b.data(), x.data(), batch, y.data()).ok());
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t j = 0; j < s.out; ++j) {
      double z = b[j];
      for (int64_t k = 0; k < s.in; ++k) z += double(x[r * s.in + k]) * w[j * s.in + k];
      double want = s.act == Activation::kRelu      ? std::max(z, 0.0)
                    : s.act == Activation::kSigmoid ? 1.0 / (1.0 + std::exp(-z))
                                                    : z;
      EXPECT_NEAR(y[r * s.out + j], want, 1e-5 * (1 + std::fabs(want)));
    }
  }
  std::vector<float> dz(batch * s.out), dw(w.size(), 0.0f), db(b.size(), 0.0f), dx(x.size());
  ASSERT_TRUE(LinearBackward(ctx, s, w.data(), x.data(), y.data(), probe.data(), batch, dz.data(),
                             dw.data(), db.data(), dx.data())
                  .ok());
  auto f = [&] {
    std::vector<float> yy(batch * s.out);
    EXPECT_TRUE(LinearForward(ctx, s, w.data(), b.data(), x.data(), batch, yy.data()).ok());
    return Dot(yy, probe);
  };
  CheckGradient(w, dw, f, "dW");
  CheckGradient(b, db, f, "db");
  CheckGradient(x, dx, f, "dx");
}

INSTANTIATE_TEST_SUITE_P(Activations, LinearTest,
                         ::testing::Values(Activation::kNone, Activation::kRelu,
                                           Activation::kSigmoid));

TEST(Mlp, BackwardMatchesFiniteDifferencesAndReportsReadyTensorsLastLayerFirst) {
  std::unique_ptr<Mlp> mlp;
  ASSERT_TRUE(Mlp::Create(6, {8, 4, 1}, {Activation::kRelu, Activation::kRelu, Activation::kNone},
                          7, "mlp", &mlp)
                  .ok());
  const int64_t batch = 5;
  auto x = Random(batch * 6, 11);
  auto probe = Random(batch * 1, 12);
  ExecContext ctx;
  std::vector<float> y(batch), dx(x.size());
  ASSERT_TRUE(mlp->Forward(ctx, x.data(), batch, y.data()).ok());
  std::vector<size_t> ready;
  mlp->ZeroGrad();
  ASSERT_TRUE(
      mlp->Backward(ctx, probe.data(), dx.data(), [&](size_t i) { ready.push_back(i); }).ok());
  EXPECT_EQ(ready, (std::vector<size_t>{5, 4, 3, 2, 1, 0}));
  auto f = [&] {
    std::vector<float> yy(batch);
    EXPECT_TRUE(mlp->Forward(ctx, x.data(), batch, yy.data()).ok());
    return Dot(yy, probe);
  };
  for (size_t t = 0; t < mlp->tensors().size(); ++t) {
    const DenseTensor& dt = mlp->tensors()[t];
    std::vector<float> p(dt.param, dt.param + dt.count), g(dt.grad, dt.grad + dt.count);
    auto ft = [&] {
      std::copy(p.begin(), p.end(), dt.param);
      return f();
    };
    CheckGradient(p, g, ft, dt.name.c_str());
    std::copy(p.begin(), p.end(), dt.param);
  }
  CheckGradient(x, dx, f, "dx");
}

TEST(Mlp, RejectsBadShapesAndUseBeforeForward) {
  std::unique_ptr<Mlp> mlp;
  EXPECT_FALSE(Mlp::Create(0, {4}, {Activation::kNone}, 1, "m", &mlp).ok());
  EXPECT_FALSE(Mlp::Create(3, {}, {}, 1, "m", &mlp).ok());
  EXPECT_FALSE(Mlp::Create(3, {4, 2}, {Activation::kNone}, 1, "m", &mlp).ok());
  EXPECT_FALSE(Mlp::Create(3, {4}, {static_cast<Activation>(9)}, 1, "m", &mlp).ok());
  ASSERT_TRUE(Mlp::Create(3, {4}, {Activation::kNone}, 1, "m", &mlp).ok());
  float dy[4] = {};
  EXPECT_EQ(mlp->Backward(ExecContext(), dy, nullptr).code(), Code::kInvalidUsage);
}

TEST(Mlp, SameSeedSameWeightsOnEveryRank) {
  std::unique_ptr<Mlp> a, b;
  ASSERT_TRUE(Mlp::Create(5, {3}, {Activation::kNone}, 9, "bottom", &a).ok());
  ASSERT_TRUE(Mlp::Create(5, {3}, {Activation::kNone}, 9, "bottom", &b).ok());
  for (size_t t = 0; t < a->tensors().size(); ++t) {
    for (int64_t i = 0; i < a->tensors()[t].count; ++i) {
      EXPECT_EQ(a->tensors()[t].param[i], b->tensors()[t].param[i]);
      EXPECT_LE(std::fabs(a->tensors()[t].param[i]), 1.0f / std::sqrt(5.0f));
    }
  }
}

TEST(DotInteraction, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  const int64_t batch = 3, f = 4, d = 5;
  auto dense = Random(batch * d, 21), emb = Random(batch * f * d, 22);
  const int64_t width = DotInteractionWidth(f, d);
  ASSERT_EQ(width, d + 10);
  auto probe = Random(batch * width, 23);
  ExecContext ctx;
  std::vector<float> out(batch * width);
  ASSERT_TRUE(DotInteractionForward(ctx, dense.data(), emb.data(), batch, f, d, out.data()).ok());
  for (int64_t b = 0; b < batch; ++b) {
    auto vec = [&](int64_t i) { return i == 0 ? &dense[b * d] : &emb[(b * f + i - 1) * d]; };
    int64_t k = d;
    for (int64_t i = 0; i <= f; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        double s = 0;
        for (int64_t t = 0; t < d; ++t) s += double(vec(i)[t]) * vec(j)[t];
        EXPECT_NEAR(out[b * width + k], s, 1e-5);
        ++k;
      }
    }
    for (int64_t t = 0; t < d; ++t) EXPECT_EQ(out[b * width + t], dense[b * d + t]);
  }
  std::vector<float> gd(dense.size()), ge(emb.size());
  ASSERT_TRUE(DotInteractionBackward(ctx, dense.data(), emb.data(), probe.data(), batch, f, d,
                                     gd.data(), ge.data())
                  .ok());
  auto fn = [&] {
    std::vector<float> o(batch * width);
    EXPECT_TRUE(DotInteractionForward(ctx, dense.data(), emb.data(), batch, f, d, o.data()).ok());
    return Dot(o, probe);
  };
  CheckGradient(dense, gd, fn, "d_dense");
  CheckGradient(emb, ge, fn, "d_emb");
}

TEST(DcnCross, BackwardMatchesFiniteDifferences) {
  std::unique_ptr<DcnCross> dcn;
  ASSERT_TRUE(DcnCross::Create(6, 3, 2, 5, "cross", &dcn).ok());
  const int64_t batch = 4;
  auto x0 = Random(batch * 6, 31), probe = Random(batch * 6, 32);
  ExecContext ctx;
  std::vector<float> y(x0.size()), dx0(x0.size());
  ASSERT_TRUE(dcn->Forward(ctx, x0.data(), batch, y.data()).ok());
  dcn->ZeroGrad();
  std::vector<size_t> ready;
  ASSERT_TRUE(
      dcn->Backward(ctx, probe.data(), dx0.data(), [&](size_t i) { ready.push_back(i); }).ok());
  EXPECT_EQ(ready.size(), 9u);
  EXPECT_EQ(ready.front(), 8u);
  auto f = [&] {
    std::vector<float> yy(x0.size());
    EXPECT_TRUE(dcn->Forward(ctx, x0.data(), batch, yy.data()).ok());
    return Dot(yy, probe);
  };
  for (const DenseTensor& dt : dcn->tensors()) {
    std::vector<float> p(dt.param, dt.param + dt.count), g(dt.grad, dt.grad + dt.count);
    auto ft = [&] {
      std::copy(p.begin(), p.end(), dt.param);
      return f();
    };
    CheckGradient(p, g, ft, dt.name.c_str());
    std::copy(p.begin(), p.end(), dt.param);
  }
  CheckGradient(x0, dx0, f, "dx0");
}

TEST(Bce, LossAndGradientMatchTheFormulaAndStayFiniteForLargeLogits) {
  const float logits[4] = {0.3f, -2.0f, 80.0f, -90.0f};
  const float labels[4] = {1, 0, 0, 1};
  float grad[4];
  double loss = 0;
  ASSERT_TRUE(BceWithLogits(logits, labels, 4, 8.0, &loss, grad).ok());
  for (int i = 0; i < 4; ++i) {
    const double z = logits[i], y = labels[i];
    EXPECT_NEAR(grad[i], (1 / (1 + std::exp(-z)) - y) / 8.0, 1e-7);
  }
  // -log(1 - sigmoid(80)) and -log(sigmoid(-90)) are 80 and 90 to double precision; the naive
  // formula would give inf.
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, (std::log1p(std::exp(-0.3)) + std::log1p(std::exp(-2.0)) + 80.0 + 90.0) / 8.0,
              1e-9);
  const float bad[1] = {0.5f};
  EXPECT_FALSE(BceWithLogits(logits, bad, 1, 1.0, &loss, grad).ok());
  EXPECT_FALSE(BceWithLogits(logits, labels, 4, 0.0, &loss, grad).ok());
}

}  // namespace
}  // namespace shardrec::dense
