// 2D sync of 16-bit weights: after replicas trained on different data, every weight is the
// correctly rounded mean of the replicas' values (mean in double, one round to nearest even),
// for R = 2, 4 and 8 and for fp16 and bf16. Averaging in 16 bits rounded after each addition
// and was up to two ulps off at R >= 4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/replica/diverged_sync.h"

namespace shardrec::testing {
namespace {

// The 16-bit pattern nearest to v (ties to even), found by comparing candidates in double.
uint16_t RoundTo16(double v, int32_t dtype) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (dtype == SHARDREC_DTYPE_BFLOAT16) {
    // Candidates: truncation of f and the next bf16 up or down.
    uint16_t lo = static_cast<uint16_t>(bits >> 16);
    auto widen = [](uint16_t h) {
      uint32_t b = static_cast<uint32_t>(h) << 16;
      float x;
      std::memcpy(&x, &b, 4);
      return static_cast<double>(x);
    };
    uint16_t best = lo;
    for (uint16_t c : {static_cast<uint16_t>(lo - 1), lo, static_cast<uint16_t>(lo + 1)}) {
      const double dc = std::abs(widen(c) - v), db = std::abs(widen(best) - v);
      if (dc < db || (dc == db && (c & 1u) == 0)) best = c;
    }
    return best;
  }
  // fp16 via a search over the neighbours of a first guess.
  auto half_to_double = [](uint16_t h) {
    const int sign = (h >> 15) ? -1 : 1;
    const int exp = (h >> 10) & 0x1f;
    const int mant = h & 0x3ff;
    if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
    return sign * std::ldexp(1.0 + mant / 1024.0, exp - 15);
  };
  uint16_t guess = 0;
  {
    // Binary search on magnitude (half bit patterns are monotonic in magnitude).
    const double a = std::abs(v);
    uint16_t lo = 0, hi = 0x7bff;
    while (lo < hi) {
      const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
      if (half_to_double(mid) <= a) {
        lo = mid;
      } else {
        hi = static_cast<uint16_t>(mid - 1);
      }
    }
    guess = lo;
    const double d0 = a - half_to_double(lo);
    const double d1 = lo < 0x7bff ? half_to_double(static_cast<uint16_t>(lo + 1)) - a : 1e300;
    if (d1 < d0 || (d1 == d0 && (lo & 1u))) guess = static_cast<uint16_t>(lo + 1);
    if (v < 0) guess = static_cast<uint16_t>(guess | 0x8000u);
  }
  return guess;
}

void CheckCorrectlyRoundedMean(int32_t world, int32_t dtype) {
  const SyncedWeights w = TrainApartThenSync(world, dtype);
  const Scenario& s = w.scenario;
  const auto& before = w.before;
  const auto& after = w.after;
  size_t checked = 0, diverged = 0;
  for (size_t t = 0; t < s.tables.size(); ++t) {
    for (size_t i = 0; i < before[t][0].size(); ++i) {
      double sum = 0;
      bool differ = false;
      for (int r = 0; r < world; ++r) {
        sum += before[t][r][i];
        differ |= before[t][r][i] != before[t][0][i];
      }
      diverged += differ;
      const uint16_t want = RoundTo16(sum / world, dtype);
      for (int r = 0; r < world; ++r) {
        // The stored weight widened exactly: compare its 16 bits.
        float got = after[t][r][i];
        uint32_t gb;
        std::memcpy(&gb, &got, 4);
        uint16_t got16 = 0;
        if (dtype == SHARDREC_DTYPE_BFLOAT16) {
          got16 = static_cast<uint16_t>(gb >> 16);
        } else {
          got16 = RoundTo16(got, dtype);  // exact: got is a half value
        }
        ASSERT_EQ(got16, want) << "table " << t << " element " << i << " rank " << r
                               << ": mean of the replicas " << sum / world;
        ++checked;
      }
    }
  }
  EXPECT_GT(diverged, 10u) << "the replicas must have diverged for the test to mean anything";
  EXPECT_GT(checked, 0u);
}

TEST(ReplicaSync16, Bf16MeanIsCorrectlyRoundedAtTwoReplicas) {
  CheckCorrectlyRoundedMean(2, SHARDREC_DTYPE_BFLOAT16);
}
TEST(ReplicaSync16, Bf16MeanIsCorrectlyRoundedAtFourReplicas) {
  CheckCorrectlyRoundedMean(4, SHARDREC_DTYPE_BFLOAT16);
}
TEST(ReplicaSync16, Fp16MeanIsCorrectlyRoundedAtEightReplicas) {
  CheckCorrectlyRoundedMean(8, SHARDREC_DTYPE_FLOAT16);
}
TEST(ReplicaSync16, Fp16MeanIsCorrectlyRoundedAtFourReplicas) {
  CheckCorrectlyRoundedMean(4, SHARDREC_DTYPE_FLOAT16);
}

}  // namespace
}  // namespace shardrec::testing
