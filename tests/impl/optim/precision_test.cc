// fp16/bf16 conversions (nearest-even and stochastic) and optimizer updates on low-precision
// weights with fp32 math.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "impl/core/half.h"
#include "impl/core/rng.h"
#include "impl/optim/optimizer.h"

namespace shardrec::optim {
namespace {

TEST(OptimPrecision, HalfConversionKnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);                          // rounds to infinity
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);             // below half of it
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f)), 1.0f);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

#if defined(__FLT16_MAX__)
// The compiler's own _Float16 conversion (round to nearest even) as an oracle.
TEST(OptimPrecision, HalfConversionMatchesCompilerOnManyValues) {
  uint32_t x = 12345;
  for (int i = 0; i < 200000; ++i) {
    x = x * 1664525u + 1013904223u;
    float f;
    uint32_t bits = (x & 0x8fffffffu) | ((x >> 3) & 0x30000000u);  // bias towards half's range
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    _Float16 h = static_cast<_Float16>(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(FloatToHalf(f), hb) << f;
    ASSERT_EQ(HalfToFloat(hb), static_cast<float>(h));
  }
}
#endif

TEST(OptimPrecision, StochasticRoundingIsUnbiased) {
  // 1 + 0.3 ulp(bf16) should round up about 30 % of the time.
  float f = 1.0f + 0.3f * std::ldexp(1.0f, -7);
  int up = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    uint32_t bits = static_cast<uint32_t>(Mix64(i) >> 32);
    uint16_t b = FloatToBFloat16Stochastic(f, bits);
    ASSERT_TRUE(b == 0x3f80 || b == 0x3f81);
    up += b == 0x3f81;
  }
  EXPECT_NEAR(double(up) / n, 0.3, 0.02);
  float h = 1.0f + 0.7f * std::ldexp(1.0f, -10);
  up = 0;
  for (int i = 0; i < n; ++i) {
    uint16_t b = FloatToHalfStochastic(h, static_cast<uint32_t>(Mix64(i + n) >> 32));
    ASSERT_TRUE(b == 0x3c00 || b == 0x3c01);
    up += b == 0x3c01;
  }
  EXPECT_NEAR(double(up) / n, 0.7, 0.02);
  EXPECT_EQ(FloatToHalfStochastic(1.0f, 0xffffffffu), 0x3c00);  // exact values never move
  EXPECT_EQ(FloatToHalfStochastic(70000.0f, 0u), 0x7bff);       // saturates
}

// SGD on bf16 / fp16 weights equals the fp32 update of the stored values rounded to nearest even.
TEST(OptimPrecision, LowPrecisionWeightsUseFp32Math) {
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    const int32_t D = 5;
    std::vector<uint16_t> w(2 * D);
    std::vector<float> w32(2 * D);
    for (int i = 0; i < 2 * D; ++i) {
      float v = 0.1f * float(i) - 0.3f;
      w[i] = dt == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
      w32[i] = dt == DType::kFloat16 ? HalfToFloat(w[i]) : BFloat16ToFloat(w[i]);
    }
    std::vector<float> m(2 * D, 0.0f), m32(2 * D, 0.0f);
    OptimizerConfig c;
    c.type = OptimizerType::kAdagrad;
    c.learning_rate = 0.05f;
    ShardParams p;
    p.weights = w.data();
    p.dtype = dt;
    p.rows = 2;
    p.cols = D;
    p.stride = D;
    p.states = {m.data()};
    ASSERT_TRUE(ValidateShard(c, p).ok());
    ShardParams p32 = p;
    p32.weights = w32.data();
    p32.dtype = DType::kFloat32;
    p32.states = {m32.data()};
    std::vector<int64_t> rows = {1};
    std::vector<float> g = {0.1f, -0.2f, 0.3f, 0.0f, 1.0f};
    Apply(ExecContext(), c, 1, D, p, RowUpdate{rows, g.data()}, nullptr);
    Apply(ExecContext(), c, 1, D, p32, RowUpdate{rows, g.data()}, nullptr);
    for (int i = 0; i < 2 * D; ++i) {
      uint16_t want = dt == DType::kFloat16 ? FloatToHalf(w32[i]) : FloatToBFloat16(w32[i]);
      EXPECT_EQ(w[i], want) << DTypeName(dt) << " " << i;
      EXPECT_EQ(m[i], m32[i]);
    }
  }
}

TEST(OptimPrecision, StochasticRoundingIsKeyedNotRandom) {
  OptimizerConfig c;
  c.type = OptimizerType::kSgd;
  c.learning_rate = 0.001f;
  c.stochastic_rounding = true;
  c.seed = 7;
  std::vector<uint16_t> a(64, FloatToBFloat16(1.0f)), b = a;
  ShardParams p;
  p.weights = a.data();
  p.dtype = DType::kBFloat16;
  p.rows = 1;
  p.cols = 64;
  p.stride = 64;
  std::vector<int64_t> rows = {0};
  std::vector<float> g(64, 1.0f);  // moves each weight by 1e-3: below one bf16 ulp (2^-8 below 1)
  Apply(ExecContext(), c, 3, 64, p, RowUpdate{rows, g.data()}, nullptr);
  p.weights = b.data();
  Apply(ExecContext(), c, 3, 64, p, RowUpdate{rows, g.data()}, nullptr);
  EXPECT_EQ(a, b);
  int moved = 0;
  for (uint16_t v : a) moved += v != FloatToBFloat16(1.0f);
  // 1e-3 / 2^-8 = 0.256 of an ulp: roughly a quarter of the 64 weights round down.
  EXPECT_GT(moved, 4);
  EXPECT_LT(moved, 34);
}

// A dynamic shard's rows key their bits by the id each holds (ShardParams::row_ids): a row
// holding id x rounds like row x of a fixed table, in whatever slot it sits; rows beyond
// num_row_ids (the zero row) keep row_offset + row.
TEST(OptimPrecision, StochasticRoundingOfRowIdsFollowsTheId) {
  OptimizerConfig c;
  c.type = OptimizerType::kSgd;
  c.learning_rate = 0.001f;
  c.stochastic_rounding = true;
  c.seed = 7;
  constexpr int32_t kCols = 64;
  const std::vector<float> g(3 * kCols, 1.0f);  // each update below one fp16 ulp of 1
  auto run = [&](int64_t rows, int64_t row_offset, std::vector<int64_t> update,
                 const std::vector<int64_t>* ids) {
    std::vector<uint16_t> w(static_cast<size_t>(rows * kCols), FloatToHalf(1.0f));
    ShardParams p;
    p.weights = w.data();
    p.dtype = DType::kFloat16;
    p.rows = rows;
    p.cols = kCols;
    p.stride = kCols;
    p.table_key = 99;
    p.row_offset = row_offset;
    if (ids != nullptr) {
      p.row_ids = ids->data();
      p.row_ids_stride = 2;  // every other element, as a dynamic shard keeps them
      p.num_row_ids = static_cast<int64_t>(ids->size()) / 2;
    }
    Apply(ExecContext(), c, 5, kCols, p, RowUpdate{update, g.data()}, nullptr);
    return w;
  };
  // Slots 0, 1 hold ids 40 and 7 (strided, with filler between); slot 2 is the zero row.
  const std::vector<int64_t> ids = {40, -1, 7, -1};
  const std::vector<uint16_t> dyn = run(3, 100, {0, 1, 2}, &ids);
  const std::vector<uint16_t> fixed = run(41, 0, {7, 40}, nullptr);
  const std::vector<uint16_t> zero = run(103, 0, {102}, nullptr);
  auto row = [&](const std::vector<uint16_t>& w, int64_t r) {
    return std::vector<uint16_t>(w.begin() + r * kCols, w.begin() + (r + 1) * kCols);
  };
  EXPECT_EQ(row(dyn, 0), row(fixed, 40));
  EXPECT_EQ(row(dyn, 1), row(fixed, 7));
  EXPECT_EQ(row(dyn, 2), row(zero, 102));
  EXPECT_NE(row(dyn, 0), row(dyn, 1));
}

}  // namespace
}  // namespace shardrec::optim
