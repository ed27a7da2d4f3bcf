// The VBE expansion's row kernels (impl/embedding/vbe_rows.h) against plain loops: ExpandRows
// copies each sample's bag row bit for bit (streamed or not, aligned or not) and touches nothing
// else; ReduceRows sums each bag's rows in ascending sample order starting from the bag's value,
// bit for bit, however the rows are split into calls. Weights and MEAN act on the bag rows before
// Expand and after Reduce, outside these kernels; the C API tests (capi_vbe_test) cover them.
#include "impl/embedding/vbe_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace shardrec::embedding {
namespace {

// A test layout: features of the given widths side by side from column `first_col` (with a gap
// of `gap` columns after each), B output samples, each feature's inverse indices from `pick`.
struct Case {
  int64_t row_stride = 0;
  int64_t samples = 0;
  std::vector<int64_t> num_bags;
  std::vector<std::vector<int64_t>> inverse;
  std::vector<ExpandedFeature> features;
  int64_t bag_floats = 0;
};

template <typename Pick>
Case MakeCase(const std::vector<int64_t>& widths, const std::vector<int64_t>& bags, int64_t samples,
              int64_t first_col, int64_t gap, int64_t tail, Pick pick) {
  Case c;
  c.samples = samples;
  c.num_bags = bags;
  c.inverse.resize(widths.size());
  int64_t col = first_col;
  int64_t bag_at = 0;
  for (size_t f = 0; f < widths.size(); ++f) {
    for (int64_t b = 0; b < samples; ++b) c.inverse[f].push_back(pick(f, b));
    ExpandedFeature e;
    e.bag_offset = bag_at;
    e.num_bags = bags[f];
    e.width = widths[f];
    e.col = col;
    e.inverse = c.inverse[f].data();
    c.features.push_back(e);
    bag_at += bags[f] * widths[f];
    col += widths[f] + gap;
  }
  c.bag_floats = bag_at;
  c.row_stride = col + tail;
  // Spans: runs of adjacent columns (as VbeStep builds them).
  for (size_t i = 0; i < c.features.size();) {
    size_t j = i + 1;
    while (j < c.features.size() &&
           c.features[j - 1].col + c.features[j - 1].width == c.features[j].col)
      ++j;
    for (size_t k = i; k < j; ++k) {
      c.features[k].span_begin = c.features[i].col;
      c.features[k].span_end = c.features[j - 1].col + c.features[j - 1].width;
    }
    i = j;
  }
  return c;
}

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

bool SameBits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// ExpandRows over rows [0, samples) in calls of `chunk` rows into out + offset, against the plain
// copy; the columns no feature covers keep their sentinel.
void CheckExpand(const Case& c, const std::vector<float>& bags, bool stream, int64_t chunk,
                 size_t offset) {
  const size_t n = static_cast<size_t>(c.samples * c.row_stride);
  std::vector<float> buf(n + offset + 16, 7.5f), want(n, 7.5f);
  float* out = buf.data() + offset;
  for (int64_t b = 0; b < c.samples; ++b)
    for (const ExpandedFeature& f : c.features)
      for (int64_t i = 0; i < f.width; ++i)
        want[static_cast<size_t>(b * c.row_stride + f.col + i)] =
            bags[static_cast<size_t>(f.bag_offset + f.inverse[b] * f.width + i)];
  for (int64_t b0 = 0; b0 < c.samples; b0 += chunk)
    ExpandRows(c.features, bags.data(), out, c.row_stride, b0, std::min(c.samples, b0 + chunk),
               stream);
  EXPECT_TRUE(SameBits(out, want.data(), n)) << "stream " << stream << " offset " << offset;
  for (size_t i = 0; i < offset; ++i) EXPECT_EQ(buf[i], 7.5f);
  for (size_t i = n + offset; i < buf.size(); ++i) EXPECT_EQ(buf[i], 7.5f);
}

// ReduceRows over rows [0, samples) split at `cuts`, from bags zeroed, against the plain sums in
// ascending sample order from +0.
void CheckReduce(const Case& c, const std::vector<float>& grad, const std::vector<int64_t>& cuts) {
  std::vector<float> got(static_cast<size_t>(c.bag_floats), 0.0f);
  std::vector<float> want(static_cast<size_t>(c.bag_floats), 0.0f);
  for (const ExpandedFeature& f : c.features)
    for (int64_t b = 0; b < c.samples; ++b)
      for (int64_t i = 0; i < f.width; ++i)
        want[static_cast<size_t>(f.bag_offset + f.inverse[b] * f.width + i)] +=
            grad[static_cast<size_t>(b * c.row_stride + f.col + i)];
  int64_t b0 = 0;
  for (int64_t cut : cuts) {
    ReduceRows(c.features, grad.data(), c.row_stride, b0, cut, got.data());
    b0 = cut;
  }
  ReduceRows(c.features, grad.data(), c.row_stride, b0, c.samples, got.data());
  EXPECT_TRUE(SameBits(got.data(), want.data(), want.size()));
}

// Request-shaped: 4 bags of 25 samples each, widths a multiple of 4 and not.
int64_t Request(size_t /*f*/, int64_t b) { return b / 25; }

TEST(EmbeddingVbeRows, ExpandCopiesEachSamplesBagRowAndNothingElse) {
  for (const std::vector<int64_t>& widths :
       std::vector<std::vector<int64_t>>{{32, 32, 32}, {3, 5, 33}, {1}, {4, 16, 64, 7}}) {
    const std::vector<int64_t> bags(widths.size(), 4);
    for (int64_t gap : {0, 1}) {
      const Case c = MakeCase(widths, bags, 100, /*first_col=*/gap * 3, gap, /*tail=*/5, Request);
      const std::vector<float> rows = RandomFloats(static_cast<size_t>(c.bag_floats), 1);
      for (bool stream : {false, true})
        for (size_t offset : {0, 1, 2, 4})
          for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{100}})
            CheckExpand(c, rows, stream, chunk, offset);
    }
  }
}

TEST(EmbeddingVbeRows, ExpandKeepsTheBitsOfNegativeZeroAndNonFiniteRows) {
  const Case c = MakeCase({32, 5}, {2, 2}, 40, 0, 0, 3, [](size_t, int64_t b) { return b % 2; });
  std::vector<float> rows(static_cast<size_t>(c.bag_floats), -0.0f);
  rows[3] = std::numeric_limits<float>::infinity();
  rows[40] = std::numeric_limits<float>::quiet_NaN();
  for (bool stream : {false, true}) CheckExpand(c, rows, stream, 40, 0);
}

TEST(EmbeddingVbeRows, ExpandReadsRepeatedAndSkippedBagsInAnyOrder) {
  // Random inverse indices over 9 bags: some read many times, in no order, some never; a
  // feature of one bag; bags whose rows are zero (a bag of zero ids pools to zeros).
  std::mt19937_64 gen(5);
  const Case c = MakeCase({32, 12, 20}, {9, 1, 9}, 333, 2, 0, 1, [&](size_t f, int64_t) -> int64_t {
    if (f == 1) return 0;
    return static_cast<int64_t>(gen() % 7);  // bags 7, 8 skipped
  });
  std::vector<float> rows = RandomFloats(static_cast<size_t>(c.bag_floats), 2);
  std::fill(rows.begin(), rows.begin() + 32, 0.0f);  // feature 0's bag 0: no ids
  for (bool stream : {false, true})
    for (int64_t chunk : {int64_t{16}, int64_t{333}}) CheckExpand(c, rows, stream, chunk, 1);
}

TEST(EmbeddingVbeRows, ReduceSumsEachBagInAscendingSampleOrder) {
  for (const std::vector<int64_t>& widths :
       std::vector<std::vector<int64_t>>{{32, 32}, {3, 5, 33}, {1}, {4, 36, 70}}) {
    const std::vector<int64_t> bags(widths.size(), 4);
    const Case c = MakeCase(widths, bags, 100, 1, 2, 3, Request);
    const std::vector<float> grad = RandomFloats(static_cast<size_t>(c.samples * c.row_stride), 3);
    // One call, tiles that cut the runs of a bag, a tile per row.
    CheckReduce(c, grad, {});
    CheckReduce(c, grad, {5, 17, 24, 25, 26, 60});
    std::vector<int64_t> every;
    for (int64_t b = 1; b < c.samples; ++b) every.push_back(b);
    CheckReduce(c, grad, every);
  }
}

TEST(EmbeddingVbeRows, ReduceFollowsTheOrderWhereAssociationMatters) {
  // 1e8 + 1 - 1e8 is 0 in ascending order, 1 in any order that adds 1 last: the bits say which.
  const Case c = MakeCase({4}, {2}, 6, 0, 0, 0, [](size_t, int64_t b) { return b < 3 ? 0 : 1; });
  std::vector<float> grad(24);
  const float terms[6] = {1e8f, 1.0f, -1e8f, -0.0f, -0.0f, 3.0f};
  for (int64_t b = 0; b < 6; ++b)
    for (int64_t i = 0; i < 4; ++i) grad[static_cast<size_t>(b * 4 + i)] = terms[b];
  CheckReduce(c, grad, {});
  CheckReduce(c, grad, {1, 2});
  std::vector<float> bags(8, 0.0f);
  ReduceRows(c.features, grad.data(), 4, 0, 6, bags.data());
  EXPECT_EQ(bags[0], 0.0f);  // (0 + 1e8 + 1) - 1e8: the 1 is lost to rounding
  EXPECT_EQ(bags[4], 3.0f);
  EXPECT_FALSE(std::signbit(bags[4]));
}

TEST(EmbeddingVbeRows, ReduceLeavesBagsNoSampleReadsAtZero) {
  std::mt19937_64 gen(9);
  const Case c = MakeCase({32, 7}, {6, 6}, 200, 0, 1, 2,
                          [&](size_t, int64_t) { return static_cast<int64_t>(gen() % 4); });
  const std::vector<float> grad = RandomFloats(static_cast<size_t>(c.samples * c.row_stride), 4);
  CheckReduce(c, grad, {16, 32, 48});
  std::vector<float> bags(static_cast<size_t>(c.bag_floats), 0.0f);
  ReduceRows(c.features, grad.data(), c.row_stride, 0, c.samples, bags.data());
  for (const ExpandedFeature& f : c.features)
    for (int64_t j = 4; j < 6; ++j)  // never read
      for (int64_t i = 0; i < f.width; ++i)
        EXPECT_EQ(bags[static_cast<size_t>(f.bag_offset + j * f.width + i)], 0.0f);
}

}  // namespace
}  // namespace shardrec::embedding
