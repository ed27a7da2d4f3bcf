// Tests for the element-wise reduction kernels, including 16-bit floats (core/half.h conversions).
#include "impl/comm/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "impl/core/half.h"

namespace shardrec::comm {
namespace {

TEST(CommReduce, HalfRoundTripsRepresentableValues) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.9604645e-08f, 1023.5f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  // 1 + 2^-11 is halfway between 1 and the next half; ties go to even (1.0).
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048), 0x3c02);
}

TEST(CommReduce, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(-3.0f)), -3.0f);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(NAN))));
}

TEST(CommReduce, EveryOpOnInt32AndFloat64) {
  ReduceFn fn = nullptr;
  std::vector<int32_t> a{1, -5, 7}, b{4, 2, -9}, out(3);
  ASSERT_TRUE(GetReduceFn(DType::kInt32, ReduceOp::kSum, &fn).ok());
  fn(out.data(), a.data(), b.data(), 3);
  EXPECT_EQ(out, (std::vector<int32_t>{5, -3, -2}));
  ASSERT_TRUE(GetReduceFn(DType::kInt32, ReduceOp::kMax, &fn).ok());
  fn(out.data(), a.data(), b.data(), 3);
  EXPECT_EQ(out, (std::vector<int32_t>{4, 2, 7}));
  ASSERT_TRUE(GetReduceFn(DType::kInt32, ReduceOp::kMin, &fn).ok());
  fn(a.data(), a.data(), b.data(), 3);  // in place
  EXPECT_EQ(a, (std::vector<int32_t>{1, -5, -9}));
  std::vector<double> d{3.0, 9.0};
  DivideBy(d.data(), 2, DType::kFloat64, 3);
  EXPECT_DOUBLE_EQ(d[0], 1.0);
  EXPECT_DOUBLE_EQ(d[1], 3.0);
}

TEST(CommReduce, HalfSumGoesThroughFloat) {
  ReduceFn fn = nullptr;
  ASSERT_TRUE(GetReduceFn(DType::kFloat16, ReduceOp::kSum, &fn).ok());
  uint16_t a = FloatToHalf(1.5f), b = FloatToHalf(2.25f), out = 0;
  fn(&out, &a, &b, 1);
  EXPECT_EQ(HalfToFloat(out), 3.75f);
}

TEST(CommReduce, RejectsUnknownOpAndDType) {
  ReduceFn fn = nullptr;
  EXPECT_EQ(GetReduceFn(DType::kFloat32, static_cast<ReduceOp>(9), &fn).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(GetReduceFn(static_cast<DType>(42), ReduceOp::kSum, &fn).code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace shardrec::comm
