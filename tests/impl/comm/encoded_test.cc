// The fp16/bf16 wire encoding (impl/comm/encoded.h): per-element error bounds, fp16 saturation,
// non-finite values, the same bits at every instruction-set level, and the encoded all-to-all
// and all-reduce against their exact counterparts (own block exact, fp32 sums, identical
// results on every rank).
#include "impl/comm/encoded.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "impl/comm/codec/codec.h"
#include "impl/core/cpu_features.h"
#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

using testutil::MakeGroup;
using testutil::OnRanks;

std::vector<float> Values() {
  std::vector<float> v = {0.0f,  -0.0f,  1.0f,     -1.0f,    3.14159f, 1e-3f, -7e-6f,
                          6e-8f, 1e-30f, 65504.0f, 65519.0f, 65520.0f, 1e5f,  -3e38f};
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (int i = 0; i < 4000; ++i) v.push_back(std::ldexp(u(gen), static_cast<int>(gen() % 40) - 20));
  return v;
}

std::vector<float> RoundTrip(Encoding e, const std::vector<float>& v) {
  std::vector<uint16_t> wire(v.size());
  std::vector<float> back(v.size());
  EncodeFloats(e, v.data(), v.size(), wire.data());
  DecodeFloats(e, wire.data(), v.size(), back.data());
  return back;
}

TEST(Encoding, Bf16RelativeErrorIsAtMostTwoToMinusEight) {
  const auto v = Values();
  const auto back = RoundTrip(Encoding::kBf16, v);
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_LE(std::fabs(back[i] - v[i]), std::ldexp(std::fabs(v[i]), -8)) << v[i];
}

TEST(Encoding, Fp16ErrorBoundAndSaturation) {
  const auto v = Values();
  const auto back = RoundTrip(Encoding::kFp16, v);
  for (size_t i = 0; i < v.size(); ++i) {
    const float a = std::fabs(v[i]);
    if (a > 65504.0f) {
      EXPECT_EQ(back[i], std::copysign(65504.0f, v[i])) << v[i];  // saturated, not infinite
      continue;
    }
    const double bound = std::max(std::ldexp(static_cast<double>(a), -11), std::ldexp(1.0, -25));
    EXPECT_LE(std::fabs(static_cast<double>(back[i]) - v[i]), bound) << v[i];
  }
}

TEST(Encoding, NonFiniteValuesPassThrough) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  for (Encoding e : {Encoding::kFp16, Encoding::kBf16}) {
    const auto back = RoundTrip(e, v);
    EXPECT_EQ(back[0], inf);
    EXPECT_EQ(back[1], -inf);
    EXPECT_TRUE(std::isnan(back[2]));
  }
}

#if SHARDREC_HAVE_X86_CODEC_LEVELS
TEST(Encoding, EveryLevelGivesTheSameBits) {
  if (!HostCpu().avx2) GTEST_SKIP() << "this CPU has no AVX2";
  auto v = Values();
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  const codec::Passes& a = codec::Baseline();
  const codec::Passes& b = codec::Avx2();
  const size_t n = v.size();
  std::vector<uint16_t> wa(n), wb(n);
  std::vector<float> fa(n, 0.5f), fb(n, 0.5f);
  for (auto to : {&codec::Passes::to_half, &codec::Passes::to_bf16}) {
    (a.*to)(v.data(), n, wa.data());
    (b.*to)(v.data(), n, wb.data());
    EXPECT_EQ(std::memcmp(wa.data(), wb.data(), 2 * n), 0);
  }
  for (auto from : {&codec::Passes::from_half, &codec::Passes::from_bf16, &codec::Passes::add_half,
                    &codec::Passes::add_bf16}) {
    (a.*from)(wa.data(), n, fa.data());
    (b.*from)(wa.data(), n, fb.data());
    EXPECT_EQ(std::memcmp(fa.data(), fb.data(), 4 * n), 0);
  }
}
#endif

TEST(EncodedCollectives, AllToAllKeepsTheOwnBlockExact) {
  for (int world : {2, 3}) {
    auto comms = MakeGroup(world);
    OnRanks(comms, [&](int r, Communicator& c) {
      // Rank r sends (d + 1) floats to rank d, valued 1/3 * (100 r + d) + k.
      std::vector<size_t> sc(world), rc(world);
      std::vector<float> send;
      for (int d = 0; d < world; ++d) {
        sc[d] = static_cast<size_t>(d + 1);
        rc[d] = static_cast<size_t>(r + 1);
        for (size_t k = 0; k < sc[d]; ++k) send.push_back((100.0f * r + d) / 3.0f + k);
      }
      std::vector<float> recv(static_cast<size_t>(world) * (r + 1));
      EncodedScratch scratch;
      ASSERT_TRUE(
          EncodedAllToAllV(c, Encoding::kBf16, send.data(), sc, recv.data(), rc, &scratch).ok());
      size_t at = 0;
      for (int s = 0; s < world; ++s) {
        for (int k = 0; k <= r; ++k, ++at) {
          const float exact = (100.0f * s + r) / 3.0f + k;
          if (s == r) {
            EXPECT_EQ(recv[at], exact);  // never left the rank
          } else {
            EXPECT_LE(std::fabs(recv[at] - exact), std::ldexp(std::fabs(exact), -8));
          }
        }
      }
    });
  }
}

TEST(EncodedCollectives, AllReduceSumsInFp32AndAgreesOnEveryRank) {
  for (int world : {2, 3, 4}) {
    for (Encoding e : {Encoding::kFp16, Encoding::kBf16}) {
      auto comms = MakeGroup(world);
      const size_t n = 1001;  // not a multiple of the world size
      std::vector<std::vector<float>> in(world), out(world);
      for (int r = 0; r < world; ++r) {
        std::mt19937 gen(r + 7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (size_t i = 0; i < n; ++i) in[r].push_back(u(gen));
        out[r] = in[r];
      }
      OnRanks(comms, [&](int r, Communicator& c) {
        EncodedScratch scratch;
        ASSERT_TRUE(EncodedAllReduceSum(c, e, out[r].data(), n, &scratch).ok());
      });
      const double u = e == Encoding::kFp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      for (size_t i = 0; i < n; ++i) {
        double exact = 0, mag = 0;
        for (int r = 0; r < world; ++r) {
          exact += in[r][i];
          mag += std::fabs(in[r][i]);
        }
        const double bound =
            (2 * u + u * u) * mag + std::ldexp(mag, -22) + world * std::ldexp(1.0, -25);
        EXPECT_LE(std::fabs(out[0][i] - exact), bound) << "element " << i;
        for (int r = 1; r < world; ++r) EXPECT_EQ(out[r][i], out[0][i]) << "rank " << r;
      }
      // A sum of ones (the touched flags of data-parallel rows) is exact.
      OnRanks(comms, [&](int r, Communicator& c) {
        std::vector<float> ones(5, 1.0f);
        EncodedScratch scratch;
        ASSERT_TRUE(EncodedAllReduceSum(c, e, ones.data(), ones.size(), &scratch).ok());
        for (float x : ones) EXPECT_EQ(x, static_cast<float>(world)) << "rank " << r;
      });
    }
  }
}

}  // namespace
}  // namespace shardrec::comm
