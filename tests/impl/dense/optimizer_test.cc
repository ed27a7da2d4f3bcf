// Dense optimizers follow the same element rules as the fused embedding optimizers, checked
// against a direct transcription of each formula, and refuse what they do not support.
#include "impl/dense/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace shardrec::dense {
namespace {

using optim::OptimizerConfig;
using optim::OptimizerType;
using optim::WeightDecayMode;

TEST(DenseOptimizer, AdamWMatchesTheFormulaOverSteps) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.learning_rate = 0.1f;
  c.weight_decay = 0.01f;
  c.weight_decay_mode = WeightDecayMode::kDecoupled;
  std::unique_ptr<DenseOptimizer> opt;
  ASSERT_TRUE(DenseOptimizer::Create(c, &opt).ok());
  float w[2] = {1.0f, -0.5f}, g[2] = {0.2f, -0.3f};
  double rw[2] = {1.0, -0.5}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int step = 1; step <= 3; ++step) {
    DenseTensor t{"w", w, g, 2};
    ASSERT_TRUE(opt->Step({&t, 1}).ok());
    for (int i = 0; i < 2; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.999, step));
      rw[i] -= 0.1 * (mh / (std::sqrt(vh) + 1e-8) + 0.01 * rw[i]);
      EXPECT_NEAR(w[i], rw[i], 1e-5) << "step " << step;
    }
  }
  EXPECT_EQ(opt->steps(), 3);
  EXPECT_EQ(opt->num_states(), 2u);
}

TEST(DenseOptimizer, SgdAndAdagrad) {
  for (auto type : {OptimizerType::kSgd, OptimizerType::kAdagrad}) {
    OptimizerConfig c;
    c.type = type;
    c.learning_rate = 0.5f;
    std::unique_ptr<DenseOptimizer> opt;
    ASSERT_TRUE(DenseOptimizer::Create(c, &opt).ok());
    float w = 1.0f, g = 0.25f;
    DenseTensor t{"w", &w, &g, 1};
    ASSERT_TRUE(opt->Step({&t, 1}).ok());
    const float want =
        type == OptimizerType::kSgd ? 1.0f - 0.5f * 0.25f : 1.0f - 0.5f * 0.25f / (0.25f + 1e-8f);
    EXPECT_FLOAT_EQ(w, want);
  }
}

TEST(DenseOptimizer, RefusesUnsupportedTypesAndChangedShapesWithoutChangingState) {
  OptimizerConfig c;
  c.type = OptimizerType::kRowWiseAdagrad;
  std::unique_ptr<DenseOptimizer> opt;
  EXPECT_EQ(DenseOptimizer::Create(c, &opt).code(), Code::kInvalidArgument);
  c.type = OptimizerType::kSgd;
  ASSERT_TRUE(DenseOptimizer::Create(c, &opt).ok());
  float w[2] = {1, 2}, g[2] = {1, 1};
  DenseTensor t{"w", w, g, 2};
  ASSERT_TRUE(opt->Step({&t, 1}).ok());
  const float before = w[0];
  t.count = 1;
  EXPECT_EQ(opt->Step({&t, 1}).code(), Code::kInvalidArgument);
  EXPECT_EQ(w[0], before);
  EXPECT_EQ(opt->steps(), 1);
}

}  // namespace
}  // namespace shardrec::dense
