// The FP8 wire encoding (impl/comm/encoded_fp8.h): the documented per-value bound against each
// block's largest magnitude, the same bytes as training storage's row encoding per block,
// non-finite values, and the encoded all-to-all and all-reduce against exact sums (own block
// exact, identical results on every rank, the bytes on the wire).
#include "impl/comm/encoded_fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "impl/core/fp8.h"
#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

using testutil::MakeGroup;
using testutil::OnRanks;

struct Bound {
  double u, f;
};
Bound BoundOf(Encoding e) {
  return e == Encoding::kFp8E4M3 ? Bound{std::ldexp(1.0, -4), std::ldexp(1.0, -17)}
                                 : Bound{std::ldexp(1.0, -3), std::ldexp(1.0, -31)};
}

// Values spanning 2^-30..2^30 within one buffer, so blocks mix large and tiny magnitudes.
std::vector<float> Values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> v;
  for (size_t i = 0; i < n; ++i) v.push_back(std::ldexp(u(gen), static_cast<int>(gen() % 61) - 30));
  return v;
}

// The largest finite magnitude of the wire block holding value i.
double BlockMax(const std::vector<float>& v, size_t i) {
  const size_t b = i / kFp8WireBlock * kFp8WireBlock;
  double a = 0;
  for (size_t j = b; j < std::min(v.size(), b + kFp8WireBlock); ++j)
    if (std::isfinite(v[j])) a = std::max(a, static_cast<double>(std::fabs(v[j])));
  return a;
}

std::vector<float> RoundTrip(Encoding e, const std::vector<float>& v) {
  std::vector<uint8_t> wire(Fp8WireBytes(v.size()));
  std::vector<float> back(v.size());
  EncodeFp8Wire(e, v.data(), v.size(), wire.data());
  DecodeFp8Wire(e, wire.data(), v.size(), back.data());
  return back;
}

TEST(Fp8Wire, ErrorWithinTheDocumentedBound) {
  for (Encoding e : {Encoding::kFp8E4M3, Encoding::kFp8E5M2}) {
    for (size_t n : {size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{1000}}) {
      const auto v = Values(n, static_cast<uint32_t>(n));
      const auto back = RoundTrip(e, v);
      const Bound b = BoundOf(e);
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) {
        const double err = std::fabs(static_cast<double>(back[i]) - v[i]);
        differ += back[i] != v[i];
        EXPECT_LE(err,
                  std::max({b.u * std::fabs(v[i]), b.f * BlockMax(v, i), std::ldexp(1.0, -136)}))
            << RowFormatName(e) << " n " << n << " value " << i << " = " << v[i];
      }
      if (n >= 32) {
        EXPECT_GT(differ, 0u);
      }
    }
  }
}

TEST(Fp8Wire, BytesAreTrainingStoragesRowEncodingPerBlock) {
  const auto v = Values(70, 3);
  for (Encoding e : {Encoding::kFp8E4M3, Encoding::kFp8E5M2}) {
    const Fp8Kind kind = e == Encoding::kFp8E4M3 ? Fp8Kind::kE4M3 : Fp8Kind::kE5M2;
    std::vector<uint8_t> wire(Fp8WireBytes(v.size()));
    ASSERT_EQ(wire.size(), 70u + 3u);
    EncodeFp8Wire(e, v.data(), v.size(), wire.data());
    size_t at = 0;
    for (size_t b = 0; b < v.size(); b += kFp8WireBlock) {
      const size_t len = std::min(kFp8WireBlock, v.size() - b);
      std::vector<uint8_t> row(kFp8HeaderBytes + len);
      EncodeFp8Row(kind, v.data() + b, static_cast<int64_t>(len), row.data());
      float scale;
      std::memcpy(&scale, row.data(), 4);
      EXPECT_EQ(std::ldexp(1.0f, wire[at] - 127), scale) << "block " << b;
      EXPECT_EQ(std::memcmp(wire.data() + at + 1, row.data() + kFp8HeaderBytes, len), 0);
      at += 1 + len;
    }
    EXPECT_EQ(at, wire.size());
  }
}

TEST(Fp8Wire, NonFiniteValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 3.0f, -1.5f};
  for (Encoding e : {Encoding::kFp8E4M3, Encoding::kFp8E5M2}) {
    const auto back = RoundTrip(e, v);
    // Infinities saturate to the block's largest finite value (they take no part in the scale).
    EXPECT_TRUE(std::isfinite(back[0]));
    EXPECT_GE(back[0], 3.0f);
    EXPECT_EQ(back[1], -back[0]);
    EXPECT_TRUE(std::isnan(back[2]));
    EXPECT_EQ(back[3], 3.0f);
    EXPECT_EQ(back[4], -1.5f);
  }
}

// The ends of float's range: blocks at the largest scale an FP8 row carries (2^111: within the
// bound up to the fit x 2^111, saturating beyond it, up to FLT_MAX), at the smallest (2^-126:
// the smallest normal and subnormals), blocks of zeros of both signs, and one of only
// non-finite values: each within the bound or saturated as documented, signs and zeros kept,
// nothing non-finite made of a finite value.
TEST(Fp8Wire, ExtremeMagnitudesStayWithinTheBound) {
  const float big = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::min();
  const float sub = std::numeric_limits<float>::denorm_min();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> blocks = {
      {std::ldexp(464.0f, 111), -std::ldexp(463.0f, 111), 1.0f, -0.0f},
      {std::ldexp(61440.0f, 111), -std::ldexp(61439.0f, 111), 1.0f},
      {big, -big, big / 3, 1.0f, -0.0f},
      {tiny, -tiny, sub, -sub, tiny * 7},
      {sub, -sub, 0.0f},
      {0.0f, -0.0f, 0.0f},
      {inf, -inf, std::numeric_limits<float>::quiet_NaN()},
  };
  for (Encoding e : {Encoding::kFp8E4M3, Encoding::kFp8E5M2}) {
    const Bound b = BoundOf(e);
    const double fit = std::ldexp(e == Encoding::kFp8E4M3 ? 464.0 : 61440.0, 111);
    const double top = std::ldexp(e == Encoding::kFp8E4M3 ? 448.0 : 57344.0, 111);
    for (const std::vector<float>& block : blocks) {
      const auto back = RoundTrip(e, block);
      for (size_t i = 0; i < block.size(); ++i) {
        SCOPED_TRACE(std::string(RowFormatName(e)) + " value " + std::to_string(i) + " = " +
                     std::to_string(block[i]));
        if (std::isnan(block[i])) {
          EXPECT_TRUE(std::isnan(back[i]));
          continue;
        }
        if (std::isinf(block[i])) {
          EXPECT_TRUE(std::isfinite(back[i]));
          EXPECT_EQ(std::signbit(back[i]), std::signbit(block[i]));
          continue;
        }
        ASSERT_TRUE(std::isfinite(back[i]));
        if (block[i] == 0.0f) {
          EXPECT_EQ(back[i], 0.0f);
          EXPECT_EQ(std::signbit(back[i]), std::signbit(block[i]));
          continue;
        }
        if (BlockMax(block, i) > fit) {  // the block saturates: its values reach at most top
          EXPECT_LE(std::fabs(back[i]), top);
          EXPECT_EQ(std::signbit(back[i]), std::signbit(block[i]));
          if (std::fabs(block[i]) >= top) EXPECT_EQ(std::fabs(back[i]), top);
          continue;
        }
        const double err = std::fabs(static_cast<double>(back[i]) - block[i]);
        EXPECT_LE(err, std::max({b.u * std::fabs(block[i]), b.f * BlockMax(block, i),
                                 std::ldexp(1.0, -136)}));
      }
    }
  }
}

TEST(Fp8Wire, DecodeAddAddsTheDecodedValues) {
  const auto v = Values(45, 9);
  std::vector<uint8_t> wire(Fp8WireBytes(v.size()));
  EncodeFp8Wire(Encoding::kFp8E4M3, v.data(), v.size(), wire.data());
  std::vector<float> decoded(v.size()), acc(v.size(), 0.25f);
  DecodeFp8Wire(Encoding::kFp8E4M3, wire.data(), v.size(), decoded.data());
  DecodeAddFp8Wire(Encoding::kFp8E4M3, wire.data(), v.size(), acc.data());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(acc[i], 0.25f + decoded[i]);
}

TEST(Fp8WireCollectives, AllToAllEncodesEveryOtherRanksBlockOnItsOwn) {
  for (int world : {2, 3, 4}) {
    for (Encoding e : {Encoding::kFp8E4M3, Encoding::kFp8E5M2}) {
      auto comms = MakeGroup(world);
      // Rank r sends 40 d + 3 floats to rank d (blocks end mid-way), valued by (r, d, k).
      auto value = [](int s, int d, size_t k) {
        return std::ldexp((100.0f * s + d) / 3.0f + static_cast<float>(k),
                          -static_cast<int>(k % 9));
      };
      OnRanks(comms, [&](int r, Communicator& c) {
        std::vector<size_t> sc(world), rc(world);
        std::vector<float> send;
        for (int d = 0; d < world; ++d) {
          sc[d] = static_cast<size_t>(40 * d + 3);
          rc[d] = static_cast<size_t>(40 * r + 3);
          for (size_t k = 0; k < sc[d]; ++k) send.push_back(value(r, d, k));
        }
        std::vector<float> recv(static_cast<size_t>(world) * rc[0]);
        EncodedScratch scratch;
        ASSERT_TRUE(EncodedAllToAllV(c, e, send.data(), sc, recv.data(), rc, &scratch).ok());
        const Bound b = BoundOf(e);
        size_t at = 0, differ = 0;
        for (int s = 0; s < world; ++s) {
          std::vector<float> block;
          for (size_t k = 0; k < rc[s]; ++k) block.push_back(value(s, r, k));
          for (size_t k = 0; k < rc[s]; ++k, ++at) {
            if (s == r) {
              EXPECT_EQ(recv[at], block[k]);  // never left the rank
              continue;
            }
            differ += recv[at] != block[k];
            // Each sender's block starts its own run of wire blocks.
            EXPECT_LE(std::fabs(static_cast<double>(recv[at]) - block[k]),
                      std::max(b.u * std::fabs(block[k]), b.f * BlockMax(block, k)))
                << "from " << s << " value " << k;
          }
        }
        EXPECT_GT(differ, 0u);
        // The wire carried bytes: one a value plus one a block.
        size_t wire = 0;
        for (int d = 0; d < world; ++d)
          if (d != r) wire += Fp8WireBytes(sc[d]);
        EXPECT_GE(scratch.send8.size(), wire);
      });
    }
  }
}

TEST(Fp8WireCollectives, AllReduceSumsInFp32AndAgreesOnEveryRank) {
  for (int world : {1, 2, 3, 4}) {
    for (Encoding e : {Encoding::kFp8E4M3, Encoding::kFp8E5M2}) {
      auto comms = MakeGroup(world);
      const size_t n = 1001;  // not a multiple of the world size nor of the block
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
      const Bound b = BoundOf(e);
      // Every value is in [-1, 1]: a block's largest magnitude is at most 1 before the sum and
      // at most `world` after it.
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) {
        double exact = 0, mag = 0;
        for (int r = 0; r < world; ++r) {
          exact += in[r][i];
          mag += std::fabs(in[r][i]);
        }
        const double bound =
            (2 * b.u + b.u * b.u) * mag + b.f * (world + world * (1 + b.u)) + std::ldexp(mag, -22);
        differ += static_cast<double>(out[0][i]) != exact;
        EXPECT_LE(std::fabs(out[0][i] - exact), bound) << "element " << i;
        for (int r = 1; r < world; ++r) EXPECT_EQ(out[r][i], out[0][i]) << "rank " << r;
      }
      if (world == 1) {
        EXPECT_EQ(std::memcmp(out[0].data(), in[0].data(), 4 * n), 0);  // nothing travels
      } else {
        EXPECT_GT(differ, 0u);
      }
    }
  }
}

}  // namespace
}  // namespace shardrec::comm
