// The fp16/bf16 wire encoding (impl/comm/encoded.h): per-element error bounds, fp16 saturation,
// non-finite values, the same bits at every instruction-set level, and the encoded all-to-all
// and all-reduce against their exact counterparts (own block exact, fp32 sums, identical
// results on every rank).
#include "impl/comm/encoded.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "impl/core/codec/codec.h"
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
// Floats whose conversion is decided at a boundary: for every sign, exponent and top 7 mantissa
// bits, the low 16 bits at a fp16 tie (0x1000 below bit 13), just either side of it, 0, all ones
// and a random pattern; NaNs with payloads (signalling ones included), infinities, fp16's
// subnormal and saturation ranges all fall in.
std::vector<float> BoundaryFloats() {
  std::mt19937 gen(7);
  std::vector<float> v;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0fffu, 0x1000u, 0x1001u, 0x2000u, 0xffffu,
                        static_cast<uint32_t>(gen() & 0xffffu)}) {
      const uint32_t bits = hi << 16 | lo;
      float f;
      std::memcpy(&f, &bits, 4);
      v.push_back(f);
    }
  return v;
}

TEST(Encoding, EveryLevelGivesTheSameBits) {
  if (!HostCpu().avx2 || !HostCpu().f16c) GTEST_SKIP() << "this CPU has no AVX2 + F16C";
  auto v = Values();
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  for (float f : BoundaryFloats()) v.push_back(f);
  const codec::Passes& a = codec::Baseline();
  const codec::Passes& b = codec::Avx2();
  const size_t n = v.size();
  std::vector<uint16_t> wa(n), wb(n);
  for (auto to : {&codec::Passes::to_half, &codec::Passes::to_bf16}) {
    (a.*to)(v.data(), n, wa.data());
    (b.*to)(v.data(), n, wb.data());
    EXPECT_EQ(std::memcmp(wa.data(), wb.data(), 2 * n), 0);
  }
  // Every decoding pass of `src` at both levels, each onto the same finite values: which payload
  // a NaN + NaN sum keeps is the compiler's choice of operand order, not a property of the level
  // (codec.h).
  auto same_decoding = [&](const std::vector<uint16_t>& src) {
    const size_t m = src.size();
    std::vector<float> fa(m), fb(m);
    for (auto from : {&codec::Passes::from_half, &codec::Passes::from_bf16,
                      &codec::Passes::add_half, &codec::Passes::add_bf16}) {
      std::fill(fa.begin(), fa.end(), 0.5f);
      std::fill(fb.begin(), fb.end(), 0.5f);
      (a.*from)(src.data(), m, fa.data());
      (b.*from)(src.data(), m, fb.data());
      EXPECT_EQ(std::memcmp(fa.data(), fb.data(), 4 * m), 0);
    }
  };
  same_decoding(wa);
  // Every 16-bit pattern (i * an odd number runs through all of them), NaN payloads included; the
  // length leaves a scalar tail after the vector loop.
  std::vector<uint16_t> every(0x10000 + 5);
  for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<uint16_t>(i * 40503u);
  same_decoding(every);
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
