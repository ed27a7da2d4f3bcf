// The stochastic-rounding bits (impl/optim/rounding.h): RowRoundingBits, which the fused
// backward's FP8 encoder and the 16-bit stores draw a row's bits from, equals the per-value
// definition the reference model uses; the bits are uniform, distinct per column, and move with
// every part of their key; every instruction-set level's row loop writes the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "impl/core/half.h"
#include "impl/optim/optimizer.h"
#include "impl/optim/rounding.h"
#include "impl/optim/rounding_row.h"
#include "impl/optim/store_row.h"

namespace shardrec::optim {
namespace {

OptimizerConfig StochasticConfig(uint64_t seed) {
  OptimizerConfig c;
  c.stochastic_rounding = true;
  c.seed = seed;
  return c;
}

TEST(RoundingBits, RowBitsEqualThePerValueDefinition) {
  const OptimizerConfig c = StochasticConfig(0x1234567890abcdefULL);
  const std::vector<int64_t> ids = {1LL << 40, -1, -7, -1};  // a dynamic shard's strided ids
  for (const bool dynamic : {false, true}) {
    ShardParams p;
    p.cols = 64;
    p.table_key = 0xfeedULL;
    p.row_offset = 1000;
    p.col_offset = 37;
    if (dynamic) {
      p.row_ids = ids.data();
      p.row_ids_stride = 2;
      p.num_row_ids = 2;
    }
    for (int64_t row : {0, 1, 5}) {
      for (int32_t col : {0, 3, 16}) {
        for (int32_t n : {0, 1, 7, 16, 33, 48}) {
          std::vector<uint32_t> got(static_cast<size_t>(n) + 1, 0xdeadbeefu);
          RowRoundingBits(c, 9, p, row, col, n, got.data());
          const int64_t key_row = RoundingRow(p, row);
          for (int32_t i = 0; i < n; ++i) {
            const int64_t gc = p.col_offset + col + i;
            ASSERT_EQ(got[i], RoundingBits(c.seed, 9, p.table_key, key_row, gc))
                << "dynamic " << dynamic << " row " << row << " col " << gc;
            ASSERT_EQ(got[i],
                      RoundingColumnBits(RoundingRowKey(c.seed, 9, p.table_key, key_row), gc));
          }
          EXPECT_EQ(got[n], 0xdeadbeefu) << "wrote past n = " << n;
        }
      }
    }
  }
}

// Every bit position is set about half the time over 64k (row, column) pairs, the mean is 1/2,
// and neighbouring columns, rows and steps agree in their top bit about half the time.
TEST(RoundingBits, BitsAreUniformAndNeighboursIndependent) {
  constexpr int kRows = 1024, kCols = 64;
  std::vector<int64_t> set(32, 0);
  double sum = 0;
  int64_t same_col = 0, same_row = 0, same_step = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t col = 0; col < kCols; ++col) {
      const uint32_t b = RoundingBits(7, 3, 11, r, col);
      for (int i = 0; i < 32; ++i) set[i] += (b >> i) & 1u;
      sum += static_cast<double>(b) * 0x1p-32;
      same_col += (b >> 31) == (RoundingBits(7, 3, 11, r, col + 1) >> 31);
      same_row += (b >> 31) == (RoundingBits(7, 3, 11, r + 1, col) >> 31);
      same_step += (b >> 31) == (RoundingBits(7, 4, 11, r, col) >> 31);
    }
  }
  const double n = kRows * kCols;  // 65536: one standard deviation of a count is 128
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(set[i] / n, 0.5, 0.01) << "bit " << i;
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(same_col / n, 0.5, 0.01);
  EXPECT_NEAR(same_row / n, 0.5, 0.01);
  EXPECT_NEAR(same_step / n, 0.5, 0.01);
}

TEST(RoundingBits, ColumnsOfARowGetDistinctBits) {
  const uint64_t key = RoundingRowKey(1, 2, 3, 4);
  std::set<uint32_t> seen;
  for (int64_t col = 0; col < 4096; ++col) seen.insert(RoundingColumnBits(key, col));
  EXPECT_EQ(seen.size(), 4096u);
}

// Changing the seed, the step, the table, the row or the column changes the bits of almost every
// value (both halves of the row key count: a key differing in one half only does too).
TEST(RoundingBits, EveryPartOfTheKeyCounts) {
  constexpr int kCols = 256;
  auto differ = [&](auto bits_a, auto bits_b) {
    int d = 0;
    for (int64_t col = 0; col < kCols; ++col) d += bits_a(col) != bits_b(col);
    return d;
  };
  auto base = [](int64_t col) { return RoundingBits(5, 6, 7, 8, col); };
  EXPECT_GT(differ(base, [](int64_t col) { return RoundingBits(4, 6, 7, 8, col); }), kCols - 3);
  EXPECT_GT(differ(base, [](int64_t col) { return RoundingBits(5, 5, 7, 8, col); }), kCols - 3);
  EXPECT_GT(differ(base, [](int64_t col) { return RoundingBits(5, 6, 6, 8, col); }), kCols - 3);
  EXPECT_GT(differ(base, [](int64_t col) { return RoundingBits(5, 6, 7, 9, col); }), kCols - 3);
  EXPECT_GT(differ(base, [](int64_t col) { return RoundingBits(5, 6, 7, 8, col + kCols); }),
            kCols - 3);
  const uint64_t key = RoundingRowKey(5, 6, 7, 8);
  for (const uint64_t flip : {uint64_t{1}, uint64_t{1} << 32, uint64_t{1} << 63}) {
    EXPECT_GT(differ([&](int64_t col) { return RoundingColumnBits(key, col); },
                     [&](int64_t col) { return RoundingColumnBits(key ^ flip, col); }),
              kCols - 3)
        << "flip " << flip;
  }
}

// Each level's row loop forced in turn (RoundingRowBitsAt): AVX2 and baseline write the bits the
// AVX-512 loop writes, and all equal the per-value definition, for lengths around every
// register width and its tails, and for columns whose low 32 bits wrap. The levels the host
// cannot run are reported false and write nothing.
TEST(RoundingBits, EveryCpuLevelWritesTheSameBits) {
  const RoundingBitsLevel levels[] = {RoundingBitsLevel::kBaseline, RoundingBitsLevel::kAvx2,
                                      RoundingBitsLevel::kAvx512};
  const uint64_t keys[] = {0, ~0ULL, 0x9e3779b97f4a7c15ULL, RoundingRowKey(3, 11, 0xbeef, 42)};
  // Aligned and unaligned starts at both vector widths; registers on each side of a change of the
  // columns' high 16 bits (65536) and of their low 32 bits' wrap (2^32).
  const int64_t first_cols[] = {0,
                                1,
                                8,
                                16,
                                37,
                                65520,
                                65530,
                                0xFFFFFFF0LL,
                                0xFFFFFFF8LL,
                                (1LL << 32) - 1000,
                                -5,
                                -64,
                                (1LL << 40) + 3,
                                (1LL << 40) + 0x10000 - 16};
  std::vector<int32_t> lengths;
  for (int32_t n = 0; n <= 70; ++n) lengths.push_back(n);
  for (const int32_t n : {127, 128, 129, 256, 1000}) lengths.push_back(n);
  int ran = 0;
  for (const RoundingBitsLevel level : levels) {
    uint32_t probe = 0xdeadbeefu;
    if (!RoundingRowBitsAt(level, 1, 0, 1, &probe)) {
      EXPECT_EQ(probe, 0xdeadbeefu) << "level " << static_cast<int>(level) << " wrote a bit";
      continue;
    }
    ++ran;
    for (const uint64_t key : keys) {
      for (const int64_t first : first_cols) {
        for (const int32_t n : lengths) {
          std::vector<uint32_t> got(static_cast<size_t>(n) + 1, 0xdeadbeefu);
          ASSERT_TRUE(RoundingRowBitsAt(level, key, first, n, got.data()));
          for (int32_t i = 0; i < n; ++i)
            ASSERT_EQ(got[i], RoundingColumnBits(key, first + i))
                << "level " << static_cast<int>(level) << " key " << key << " col " << first + i;
          ASSERT_EQ(got[n], 0xdeadbeefu) << "level " << static_cast<int>(level) << " n " << n;
        }
      }
    }
  }
  EXPECT_GE(ran, 1);  // the baseline loop always runs
  // No length, no bits: a null array is not touched at any level.
  for (const RoundingBitsLevel level : levels) (void)RoundingRowBitsAt(level, 5, 0, 0, nullptr);
  // A level that names no loop is refused.
  uint32_t probe = 0xdeadbeefu;
  EXPECT_FALSE(RoundingRowBitsAt(static_cast<RoundingBitsLevel>(7), 1, 0, 1, &probe));
  EXPECT_EQ(probe, 0xdeadbeefu);
  // The library's own choice writes the bits of the widest level the host runs.
  std::vector<uint32_t> host(300), widest(300);
  RoundingRowBits(keys[3], 17, 300, host.data());
  for (const RoundingBitsLevel level :
       {RoundingBitsLevel::kAvx512, RoundingBitsLevel::kAvx2, RoundingBitsLevel::kBaseline}) {
    if (RoundingRowBitsAt(level, keys[3], 17, 300, widest.data())) break;
  }
  EXPECT_EQ(host, widest);
}

// The bf16 row rounding (RoundBf16RowStochastic, what a stochastic bf16 store runs) equals the
// per-value rounding with the per-value bits, on values that round up, saturate below infinity,
// stay infinite or NaN, and fp32 subnormals, for every length up to 70 and odd first columns: the
// library's own choice and each level's loop forced in turn (RoundBf16RowStochasticAt), so the
// AVX2 and baseline loops are checked on a host that picks AVX-512.
TEST(RoundingBits, Bf16RowEqualsThePerValueRoundingAtEveryLevel) {
  const float inf = std::numeric_limits<float>::infinity();
  const float special[] = {0.0f,     -0.0f,         1.0f,
                           -1.5f,    3.3895314e38f, -3.3895314e38f,
                           inf,      -inf,          std::numeric_limits<float>::quiet_NaN(),
                           1e-40f,   -2.5e-39f,     0.1f,
                           1234.567f};
  std::vector<float> in(300);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = i < std::size(special) ? special[i] : std::sin(static_cast<float>(i)) * 17.0f;
  const uint64_t key = RoundingRowKey(77, 5, 0x1234, 99);
  std::vector<int32_t> lengths;
  for (int32_t n = 0; n <= 70; ++n) lengths.push_back(n);
  for (const int32_t n : {127, 128, 129, 300}) lengths.push_back(n);
  // -1: the library's own choice; then each level.
  int ran = 0;
  for (const int level : {-1, 0, 1, 2}) {
    const auto round = [&](int64_t first, int32_t n, const float* x, uint16_t* out) {
      if (level < 0) {
        RoundBf16RowStochastic(key, first, n, x, out);
        return true;
      }
      return RoundBf16RowStochasticAt(static_cast<RoundingBitsLevel>(level), key, first, n, x, out);
    };
    uint16_t probe = 0xabcdu;
    if (!round(0, 1, in.data(), &probe)) {
      EXPECT_EQ(probe, 0xabcdu) << "level " << level << " wrote a value";
      continue;
    }
    ++ran;
    for (const int64_t first : {int64_t{0}, int64_t{13}, int64_t{0xFFFFFFF9LL}}) {
      for (const int32_t n : lengths) {
        std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0xabcdu);
        ASSERT_TRUE(round(first, n, in.data(), got.data()));
        for (int32_t i = 0; i < n; ++i)
          ASSERT_EQ(got[i], FloatToBFloat16Stochastic(in[i], RoundingColumnBits(key, first + i)))
              << "level " << level << " value " << in[i] << " col " << first + i;
        ASSERT_EQ(got[n], 0xabcdu) << "level " << level << " wrote past n = " << n;
      }
    }
    EXPECT_TRUE(round(0, 0, nullptr, nullptr));  // no length: nothing read or written
  }
  EXPECT_GE(ran, 2);  // the library's choice and the baseline loop always run
  uint16_t probe = 0xabcdu;
  EXPECT_FALSE(
      RoundBf16RowStochasticAt(static_cast<RoundingBitsLevel>(7), key, 0, 1, in.data(), &probe));
  EXPECT_EQ(probe, 0xabcdu);
}

}  // namespace
}  // namespace shardrec::optim
