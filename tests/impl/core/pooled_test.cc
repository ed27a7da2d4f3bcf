// The pooled kernel (impl/core/kernels/pooled.h) at every instruction-set level the host has,
// for every row format: the same bits as a scalar reference that decodes each row with the row
// codec's baseline decoder (the serving lookups' former decode-then-sum path) and adds, in id
// order, weight x value one fp32 multiply and add at a time. Pooled runs with skipped and empty
// bags, weighted or not, and sequence runs; dims with and without a partial vector, odd int4
// dims, rows wider than one register tile and rows that start off a cache line.
#include "impl/core/kernels/pooled.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "impl/core/codec/codec.h"
#include "impl/core/cpu_features.h"
#include "impl/core/fp8_table.h"
#include "impl/core/half.h"
#include "impl/core/row_format.h"

namespace shardrec::core::kernels {
namespace {

struct Level {
  const char* name;
  PooledFn fn;
  int32_t width;  // floats per vector register
  bool fma;       // folded int8 sums use a fused multiply-add (pooled.h fold_dequant)
};

std::vector<Level> Levels() {
#if defined(__x86_64__)
  std::vector<Level> v = {{"baseline", &PooledBaseline, 4, false}};
#else
  std::vector<Level> v = {{"baseline", &PooledBaseline, 1, false}};
#endif
#if SHARDREC_HAVE_X86_KERNEL_LEVELS
  const CpuFeatures& f = HostCpu();
  if (f.avx2 && f.f16c) v.push_back({"avx2", &PooledAvx2, 8, false});
  if (f.avx512f && f.avx512bw && f.avx512vl) v.push_back({"avx512", &PooledAvx512, 16, true});
#endif
  return v;
}

// `rows` stored rows of `dim` values in format f, `row_bytes` apart (>= the format's bytes).
std::vector<uint8_t> MakeRows(RowFormat f, int64_t rows, int32_t dim, int64_t row_bytes,
                              std::mt19937* rng) {
  std::vector<uint8_t> data(static_cast<size_t>(rows * row_bytes) + 64, 0);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::uniform_int_distribution<int> code(0, 255);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = data.data() + r * row_bytes;
    if (IsRowWiseQuantized(f)) {
      const float scale = value(*rng) * 0.01f, bias = value(*rng);
      std::memcpy(row, &scale, 4);
      std::memcpy(row + 4, &bias, 4);
      for (uint64_t k = kQuantHeaderBytes; k < RowBytes(f, dim); ++k)
        row[k] = static_cast<uint8_t>(code(*rng));
      continue;
    }
    if (IsFp8Format(f)) {
      // A power-of-two scale (as EncodeFp8Row writes) and any code but the non-finite ones (a
      // NaN's bits in a sum need not be one pattern).
      const float scale = std::ldexp(1.0f, code(*rng) % 40 - 20);
      std::memcpy(row, &scale, 4);
      for (uint64_t k = kFp8RowHeaderBytes; k < RowBytes(f, dim); ++k) {
        uint8_t c;
        do {
          c = static_cast<uint8_t>(code(*rng));
        } while (!std::isfinite(kFp8Decode.v[f == RowFormat::kFp8E4M3 ? 0 : 1][c]));
        row[k] = c;
      }
      continue;
    }
    for (int32_t c = 0; c < dim; ++c) {
      const float v = value(*rng);
      if (f == RowFormat::kFp32) {
        std::memcpy(row + 4 * c, &v, 4);
      } else {
        const uint16_t h = f == RowFormat::kFp16 ? FloatToHalf(v) : FloatToBFloat16(v);
        std::memcpy(row + 2 * c, &h, 2);
      }
    }
  }
  return data;
}

// Row r decoded to fp32 by the codec's baseline decoders (fp32: read as it is).
std::vector<float> Decoded(RowFormat f, const uint8_t* row, int32_t dim) {
  std::vector<float> out(static_cast<size_t>(dim));
  std::vector<uint8_t> scratch(static_cast<size_t>(dim) + 1);
  if (f == RowFormat::kFp32) {
    std::memcpy(out.data(), row, 4 * static_cast<size_t>(dim));
  } else {
    codec::Baseline().decode_row[static_cast<int32_t>(f)](row, dim, out.data(), scratch.data());
  }
  return out;
}

TEST(PooledKernel, EveryLevelAndFormatMatchesTheDecodeThenSumReference) {
  const std::vector<Level> levels = Levels();
  std::printf("levels on this host: %zu (widest %s)\n", levels.size(), levels.back().name);
  std::mt19937 rng(7);
  const int64_t R = 97;
  const int64_t B = 40;
  // Bags of 0-30 ids; every seventh bag empty; ids repeat.
  std::vector<int64_t> offsets = {0}, ids;
  std::uniform_int_distribution<int64_t> len(0, 30), id(0, R - 1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = b % 7 == 3 ? 0 : len(rng);
    for (int64_t k = 0; k < n; ++k) ids.push_back(id(rng));
    offsets.push_back(static_cast<int64_t>(ids.size()));
  }
  std::vector<float> w(ids.size());
  std::uniform_real_distribution<float> wd(-1.5f, 1.5f);
  for (float& x : w) x = wd(rng);
  for (int32_t v = 0; v < kNumRowFormats; ++v) {
    const auto f = static_cast<RowFormat>(v);
    for (int32_t dim : {1, 2, 3, 4, 7, 8, 15, 16, 17, 33, 48, 64, 80, 100, 128, 130, 257, 300}) {
      // Packed rows (a quantized row then starts anywhere in a line) and padded ones.
      for (int64_t pad : {int64_t{0}, int64_t{24}}) {
        const int64_t row_bytes = static_cast<int64_t>(RowBytes(f, dim)) + pad;
        const std::vector<uint8_t> data = MakeRows(f, R, dim, row_bytes, &rng);
        for (int mode = 0; mode < 3; ++mode) {  // pooled, weighted pooled, weighted sequence
          const bool weighted = mode > 0, sequence = mode == 2;
          const int64_t out_rows = sequence ? static_cast<int64_t>(ids.size()) : B;
          const int64_t stride = dim + 5;  // output rows wider than the bag, offset by 3
          std::vector<float> want(static_cast<size_t>(out_rows * stride), -7.0f);
          for (int64_t o = 0; o < out_rows; ++o) {
            const int64_t i0 = sequence ? o : offsets[o], i1 = sequence ? o + 1 : offsets[o + 1];
            std::vector<float> acc(static_cast<size_t>(dim), 0.0f);
            for (int64_t i = i0; i < i1; ++i) {
              const std::vector<float> x = Decoded(f, data.data() + ids[i] * row_bytes, dim);
              for (int32_t c = 0; c < dim; ++c)
                acc[c] = sequence ? w[i] * x[c] : weighted ? acc[c] + w[i] * x[c] : acc[c] + x[c];
            }
            std::memcpy(want.data() + o * stride + 3, acc.data(), sizeof(float) * dim);
          }
          for (const Level& level : levels) {
            std::vector<float> got(want.size(), -7.0f);
            PooledArgs a;
            a.weights = data.data();
            a.type = f;
            a.row_bytes = row_bytes;
            a.cols = dim;
            a.offsets = sequence ? nullptr : offsets.data();
            a.rows = ids.data();
            a.id_weights = weighted ? w.data() : nullptr;
            a.out = got.data();
            a.io_offset = 3;
            a.out_stride = stride;
            a.bag_begin = 0;
            a.bag_end = out_rows;
            a.prefetch_distance = PrefetchDistanceFor(static_cast<uint64_t>(row_bytes));
            level.fn(a);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()), 0)
                << level.name << " " << RowFormatName(f) << " dim " << dim << " pad " << pad
                << " mode " << mode;
          }
        }
      }
    }
  }
}

// Every FP8 code, NaN codes and E5M2's infinities included, as one row of 256 values: each level
// reads each code as its table value (a NaN code as some NaN) times the row's scale.
TEST(PooledKernel, Fp8RowsReadEveryCode) {
  for (RowFormat f : {RowFormat::kFp8E4M3, RowFormat::kFp8E5M2}) {
    const int32_t dim = 256;
    std::vector<uint8_t> row(RowBytes(f, dim));
    const float scale = 0.25f;
    std::memcpy(row.data(), &scale, 4);
    for (int c = 0; c < dim; ++c) row[kFp8RowHeaderBytes + c] = static_cast<uint8_t>(c);
    const float* table = kFp8Decode.v[f == RowFormat::kFp8E4M3 ? 0 : 1];
    const int64_t ids[1] = {0}, offsets[2] = {0, 1};
    for (const Level& level : Levels()) {
      std::vector<float> got(dim, 7.0f);
      PooledArgs a;
      a.weights = row.data();
      a.type = f;
      a.row_bytes = static_cast<int64_t>(row.size());
      a.cols = dim;
      a.offsets = offsets;
      a.rows = ids;
      a.out = got.data();
      a.out_stride = dim;
      a.bag_begin = 0;
      a.bag_end = 1;
      level.fn(a);
      for (int c = 0; c < dim; ++c) {
        const float want = 0.0f + table[c] * scale;
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got[c])) << level.name << " " << RowFormatName(f) << " " << c;
        } else {
          EXPECT_EQ(std::memcmp(&got[c], &want, 4), 0)
              << level.name << " " << RowFormatName(f) << " code " << c << ": " << got[c] << " vs "
              << want;
        }
      }
    }
  }
}

// x rounded to fp32 on its own (so the reference below is never contracted into an FMA).
float Rounded(float x) {
  volatile float v = x;
  return v;
}

// Serving's folded int8/int4 sums (pooled.h fold_dequant) at every level, against a reference
// that computes what the kernel documents: in each whole vector of columns, acc = code x (w x
// scale) + acc (one rounding with the level's FMA, else two; AVX-512's int4 table holds code x (w
// x scale) rounded, then adds), the w x bias terms summed in id order and added at the end; the
// columns past the last whole vector decoded exactly. Bit for bit per level, every result within
// the documented bound of the exact sum, and some results different from the exact path's (or
// the option was ignored).
TEST(PooledKernel, FoldedQuantizedSumsMatchTheirDocumentedComputation) {
  std::mt19937 rng(11);
  const int64_t R = 61, B = 30;
  std::vector<int64_t> offsets = {0}, ids;
  std::uniform_int_distribution<int64_t> len(0, 40), id(0, R - 1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = b % 9 == 4 ? 0 : len(rng);
    for (int64_t k = 0; k < n; ++k) ids.push_back(id(rng));
    offsets.push_back(static_cast<int64_t>(ids.size()));
  }
  std::vector<float> w(ids.size());
  std::uniform_real_distribution<float> wd(-1.5f, 1.5f);
  for (float& x : w) x = wd(rng);
  for (RowFormat f : {RowFormat::kInt8, RowFormat::kInt4}) {
    for (int32_t dim : {2, 8, 16, 24, 48, 64, 80, 100, 128, 300}) {
      const int64_t row_bytes = static_cast<int64_t>(RowBytes(f, dim));
      const std::vector<uint8_t> data = MakeRows(f, R, dim, row_bytes, &rng);
      const auto header = [&](int64_t r, int k) {
        float v;
        std::memcpy(&v, data.data() + r * row_bytes + 4 * k, 4);
        return v;
      };
      const auto code = [&](int64_t r, int32_t c) {
        const uint8_t* v = data.data() + r * row_bytes + kQuantHeaderBytes;
        return f == RowFormat::kInt8 ? v[c] : (c % 2 == 0 ? v[c / 2] & 0xf : v[c / 2] >> 4);
      };
      for (bool weighted : {false, true}) {
        for (const Level& level : Levels()) {
          const bool vectors = f == RowFormat::kInt8 || level.width % 2 == 0;
          const int32_t folded = vectors ? dim / level.width * level.width : 0;
          std::vector<float> want(static_cast<size_t>(B * dim)), exact(want.size());
          double worst = 0;
          for (int64_t b = 0; b < B; ++b) {
            for (int32_t c = 0; c < dim; ++c) {
              float acc = 0.0f, bias_sum = 0.0f, plain = 0.0f;
              double real = 0, mag = 0;
              for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) {
                const float wi = weighted ? w[i] : 1.0f, s = header(ids[i], 0),
                            bias = header(ids[i], 1);
                const auto q = static_cast<float>(code(ids[i], c));
                const float ws = Rounded(wi * s), wb = Rounded(wi * bias);
                bias_sum = Rounded(bias_sum + wb);
                acc = f == RowFormat::kInt8 && level.fma ? std::fma(q, ws, acc)
                                                         : Rounded(acc + Rounded(q * ws));
                const float x = Rounded(Rounded(q * s) + bias);
                plain = weighted ? Rounded(plain + Rounded(wi * x)) : Rounded(plain + x);
                real += double{wi} * (double{q} * s + bias);
                mag += std::fabs(double{wi}) * (std::fabs(double{q} * s) + std::fabs(double{bias}));
              }
              const size_t o = static_cast<size_t>(b * dim + c);
              want[o] = c < folded ? Rounded(acc + bias_sum) : plain;
              exact[o] = plain;
              // The bound of docs/semantics.md: (n + 3) u / (1 - (n + 3) u) x mag, u = 2^-24.
              const double k = static_cast<double>(offsets[b + 1] - offsets[b] + 3) * 0x1p-24;
              ASSERT_LE(std::fabs(want[o] - real), k / (1 - k) * mag)
                  << level.name << " " << RowFormatName(f) << " dim " << dim << " bag " << b;
              worst = std::max(worst, std::fabs(double{want[o]} - exact[o]));
            }
          }
          std::vector<float> got(want.size(), -7.0f);
          PooledArgs a;
          a.weights = data.data();
          a.type = f;
          a.row_bytes = row_bytes;
          a.cols = dim;
          a.offsets = offsets.data();
          a.rows = ids.data();
          a.id_weights = weighted ? w.data() : nullptr;
          a.out = got.data();
          a.out_stride = dim;
          a.bag_end = B;
          a.prefetch_distance = PrefetchDistanceFor(static_cast<uint64_t>(row_bytes));
          a.fold_dequant = true;
          level.fn(a);
          const std::string what = std::string(level.name) + " " + RowFormatName(f) + " dim " +
                                   std::to_string(dim) + (weighted ? " weighted" : "");
          for (size_t o = 0; o < got.size(); ++o)
            ASSERT_EQ(std::memcmp(&got[o], &want[o], 4), 0)
                << what << " element " << o << ": " << got[o] << " vs " << want[o];
          if (folded > 0) {
            EXPECT_GT(worst, 0.0) << what << ": folded sums equal the exact ones";
          }
        }
      }
    }
  }
}

// A checked run (pooled.h stopped_at) sums the bags before the first one holding an id outside
// [0, check_rows), bit for bit as an unchecked run, reports that bag, and leaves it and the rest
// untouched; ids far out of range (prefetched ahead before they are checked) are clamped, not
// dereferenced. With every id in range it is the unchecked run and reports bag_end.
TEST(PooledKernel, CheckedRunsStopBeforeTheFirstBagWithAnIdOutOfRange) {
  std::mt19937 rng(11);
  const int64_t R = 50, B = 12;
  std::vector<int64_t> offsets = {0}, ids;
  std::uniform_int_distribution<int64_t> id(0, R - 1);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t k = 0; k < (b == 4 ? 0 : 5 + b % 3); ++k) ids.push_back(id(rng));
    offsets.push_back(static_cast<int64_t>(ids.size()));
  }
  for (const Level& level : Levels()) {
    for (RowFormat f : {RowFormat::kFp32, RowFormat::kFp16, RowFormat::kInt8, RowFormat::kInt4}) {
      for (int32_t dim : {16, 64, 100}) {
        const auto row_bytes = static_cast<int64_t>(RowBytes(f, dim));
        const std::vector<uint8_t> data = MakeRows(f, R, dim, row_bytes, &rng);
        PooledArgs a;
        a.weights = data.data();
        a.type = f;
        a.row_bytes = row_bytes;
        a.cols = dim;
        a.offsets = offsets.data();
        a.out_stride = dim;
        a.bag_end = B;
        a.prefetch_distance = 16;
        a.fold_dequant = true;
        std::vector<float> want(static_cast<size_t>(B * dim), -7.0f);
        a.rows = ids.data();
        a.out = want.data();
        level.fn(a);
        int64_t stopped = -1;
        std::vector<float> got(want.size(), -7.0f);
        a.out = got.data();
        a.stopped_at = &stopped;
        a.check_rows = R;
        level.fn(a);
        EXPECT_EQ(stopped, B) << level.name;
        EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()), 0)
            << level.name << " " << RowFormatName(f) << " dim " << dim;
        // Rows prefetched into the second-level cache only: the same sums.
        std::fill(got.begin(), got.end(), -7.0f);
        a.prefetch_to_l2 = true;
        level.fn(a);
        a.prefetch_to_l2 = false;
        EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()), 0)
            << level.name << " " << RowFormatName(f) << " dim " << dim << " prefetch_to_l2";
        for (int64_t bad : {R, int64_t{-1}, int64_t{1} << 62}) {
          for (int64_t at : {int64_t{0}, int64_t{9}, offsets[B] - 1}) {
            std::vector<int64_t> bad_ids = ids;
            bad_ids[static_cast<size_t>(at)] = bad;
            const int64_t bag =
                std::upper_bound(offsets.begin(), offsets.end(), at) - offsets.begin() - 1;
            std::fill(got.begin(), got.end(), -7.0f);
            a.rows = bad_ids.data();
            stopped = -1;
            level.fn(a);
            EXPECT_EQ(stopped, bag) << level.name << " id " << bad << " at " << at;
            EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * bag * dim), 0)
                << level.name << " " << RowFormatName(f) << " dim " << dim;
            for (size_t e = static_cast<size_t>(bag * dim); e < got.size(); ++e)
              ASSERT_EQ(got[e], -7.0f) << level.name << " element " << e;
          }
        }
        // No rows at all: the first bag with an id stops the run.
        a.rows = ids.data();
        a.check_rows = 0;
        stopped = -1;
        level.fn(a);
        EXPECT_EQ(stopped, 0) << level.name;
      }
    }
  }
}

// The float formats may also be addressed by an element stride (the training forward's
// weight views): the same bits as the byte stride, and a bag range [begin, end) writes only its
// own bags.
TEST(PooledKernel, ElementStrideAndBagRangesAddressTheSameRows) {
  std::mt19937 rng(3);
  const int32_t dim = 24;
  const int64_t R = 10, stride = 32;
  const std::vector<uint8_t> data = MakeRows(RowFormat::kFp16, R, dim, stride * 2, &rng);
  const std::vector<int64_t> offsets = {0, 2, 5, 6}, ids = {1, 9, 0, 4, 4, 7};
  for (const Level& level : Levels()) {
    std::vector<float> by_bytes(3 * dim, -1.0f), by_elements(3 * dim, -1.0f);
    PooledArgs a;
    a.weights = data.data();
    a.type = RowFormat::kFp16;
    a.cols = dim;
    a.offsets = offsets.data();
    a.rows = ids.data();
    a.out_stride = dim;
    a.bag_end = 3;
    a.row_bytes = stride * 2;
    a.out = by_bytes.data();
    level.fn(a);
    a.row_bytes = 0;
    a.stride = stride;
    a.out = by_elements.data();
    a.bag_begin = 1;
    a.bag_end = 2;
    level.fn(a);
    for (int32_t c = 0; c < dim; ++c) {
      EXPECT_EQ(by_elements[c], -1.0f) << level.name;
      EXPECT_EQ(by_elements[2 * dim + c], -1.0f) << level.name;
    }
    EXPECT_EQ(std::memcmp(by_bytes.data() + dim, by_elements.data() + dim, sizeof(float) * dim), 0)
        << level.name;
  }
}

}  // namespace
}  // namespace shardrec::core::kernels
