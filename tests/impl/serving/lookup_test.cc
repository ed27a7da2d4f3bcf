// The pooled serving lookup (lookup.cc) on models built in memory, every storage: the same bits as
// decoding each row with the table's decoder and adding, in id order, weight x value (the former
// decode-then-sum path), except int8 and int4, whose sums fold the dequantization (docs/serving.md)
// and stay within twice its rounding bound of that reference; int32 and int64 ids alike; and the
// path that resolves ids one by one (an id skipped under the SKIP bounds policy) the same bits as
// the one that reads in-range ids as rows in place, SUM and MEAN.
#include "impl/serving/lookup.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/impl/serving/serving_test_util.h"

namespace shardrec::serving {
namespace {

using testing::MakeModel;
using testing::ReadRow;

constexpr int64_t kRows = 50;
constexpr int32_t kDim = 37;  // a partial vector at every level, an odd int4 row
constexpr int64_t kBatch = 6;

bool Folded(Storage s) { return s == Storage::kInt8 || s == Storage::kInt4; }

// |code x scale| + |bias| of column c of a row of an int8 or int4 table.
double Magnitude(const Table& t, int64_t row, int32_t c) {
  const uint8_t* p = t.data + static_cast<uint64_t>(row) * t.row_bytes;
  float scale, bias;
  std::memcpy(&scale, p, 4);
  std::memcpy(&bias, p + 4, 4);
  const uint8_t* v = p + 8;
  const int q = t.storage == Storage::kInt8 ? v[c] : (c % 2 == 0 ? v[c / 2] & 0xf : v[c / 2] >> 4);
  return std::fabs(q * double{scale}) + std::fabs(double{bias});
}

// Twice the documented bound of a folded sum of n ids with Σ |w| x Magnitude = mag: each of it
// and the decode-then-sum reference is within γ(n+3) mag of the exact sum.
double Slack(int64_t n, double mag) {
  const double g = static_cast<double>(n + 3) * std::ldexp(1.0, -24);
  return 2 * g / (1 - g) * mag;
}

// `got` equals `want` bit for bit where slack is 0, else within slack.
void ExpectMatches(const std::vector<float>& got, const std::vector<float>& want,
                   const std::vector<double>& slack, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (slack[i] == 0) {
      ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
          << what << " element " << i << ": " << got[i] << " vs " << want[i];
    } else {
      ASSERT_LE(std::fabs(double{got[i]} - want[i]), slack[i])
          << what << " element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

std::vector<float> LookupOf(const Model& m, const std::vector<int32_t>& lengths, const void* ids,
                            bool int64, size_t n, const float* weights) {
  Request r;
  r.batch_size = kBatch;
  r.num_features = 1;
  r.lengths = lengths.data();
  r.num_lengths = lengths.size();
  r.values = ids;
  r.values_int64 = int64;
  r.num_values = n;
  r.weights = weights;
  r.num_weights = weights != nullptr ? n : 0;
  std::vector<float> out(static_cast<size_t>(kBatch * kDim), -3.0f);
  const Status st = Lookup(m, r, out.data(), out.size());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

TEST(ServingLookup, PooledBagsEqualTheDecodeThenSumReferenceOnEveryPath) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(kRows * kDim));
  for (float& v : rows) v = value(rng);
  const std::vector<int32_t> lengths = {3, 0, 1, 17, 5, 8};
  std::vector<int64_t> ids;
  std::uniform_int_distribution<int64_t> id(0, kRows - 1);
  for (int32_t len : lengths)
    for (int32_t k = 0; k < len; ++k) ids.push_back(id(rng));
  std::vector<float> w(ids.size());
  for (float& x : w) x = value(rng);
  const std::vector<int32_t> ids32(ids.begin(), ids.end());
  // The same bags with an out-of-range id after every third id: skipped, with its weight.
  std::vector<int32_t> skip_lengths;
  std::vector<int64_t> skip_ids;
  std::vector<float> skip_w;
  size_t pos = 0;
  for (int32_t len : lengths) {
    int32_t n = 0;
    for (int32_t k = 0; k < len; ++k, ++pos) {
      skip_ids.push_back(ids[pos]);
      skip_w.push_back(w[pos]);
      ++n;
      if (pos % 3 == 2) {
        skip_ids.push_back(kRows + 7);
        skip_w.push_back(100.0f);
        ++n;
      }
    }
    skip_lengths.push_back(n);
  }
  for (Storage s : {Storage::kFp32, Storage::kFp16, Storage::kBf16, Storage::kInt8, Storage::kInt4,
                    Storage::kFp8E4M3, Storage::kFp8E5M2}) {
    auto m = MakeModel({{"t", kDim, s, rows, {}}});
    for (bool mean : {false, true}) {
      m->tables[0].pooling = mean ? Pooling::kMean : Pooling::kSum;
      for (bool weighted : {false, true}) {
        std::vector<float> want(static_cast<size_t>(kBatch * kDim));
        std::vector<double> slack(want.size(), 0.0);
        size_t i = 0;
        for (int64_t b = 0; b < kBatch; ++b) {
          std::vector<float> acc(kDim, 0.0f);
          std::vector<double> mag(kDim, 0.0);
          float div = 0.0f;
          for (int32_t k = 0; k < lengths[b]; ++k, ++i) {
            const std::vector<float> x = ReadRow(m->tables[0], ids[i]);
            for (int32_t c = 0; c < kDim; ++c) {
              acc[c] += weighted ? w[i] * x[c] : x[c];
              if (Folded(s))
                mag[c] += std::fabs(weighted ? w[i] : 1.0f) * Magnitude(m->tables[0], ids[i], c);
            }
            div += weighted ? w[i] : 1.0f;
          }
          for (int32_t c = 0; c < kDim; ++c) {
            const size_t o = static_cast<size_t>(b * kDim + c);
            want[o] = !mean ? acc[c] : div != 0.0f ? acc[c] / div : 0.0f;
            if (!Folded(s)) continue;
            slack[o] = Slack(lengths[b], mag[c]);
            // MEAN: divided by the same divisor, each quotient rounded once.
            if (mean && div != 0.0f)
              slack[o] = slack[o] / std::fabs(div) + std::fabs(want[o]) * std::ldexp(1.0, -22);
          }
        }
        const float* wp = weighted ? w.data() : nullptr;
        const std::string what =
            std::string(StorageName(s)) + (mean ? " mean" : " sum") + (weighted ? " weighted" : "");
        m->bounds = Bounds::kError;
        const auto in_place = LookupOf(*m, lengths, ids.data(), true, ids.size(), wp);
        ExpectMatches(in_place, want, slack, what);
        const auto widened = LookupOf(*m, lengths, ids32.data(), false, ids32.size(), wp);
        EXPECT_EQ(std::memcmp(widened.data(), in_place.data(), want.size() * 4), 0) << what;
        m->bounds = Bounds::kSkip;
        const auto resolved = LookupOf(*m, skip_lengths, skip_ids.data(), true, skip_ids.size(),
                                       weighted ? skip_w.data() : nullptr);
        EXPECT_EQ(std::memcmp(resolved.data(), in_place.data(), want.size() * 4), 0) << what;
      }
    }
  }
}

// A fixed table's bags are summed a slice of about a thousand ids at a time, each slice checked
// just before; an id out of range in a late slice (after earlier slices' bags were written) sends
// the whole pair to the resolving path: SKIP leaves the id out, CLAMP reads row 0 for it, ERROR
// names it. Every bag then equals the decode-then-sum reference of the ids that policy keeps.
TEST(ServingLookup, AnIdOutOfRangeInALateSliceRedoesThePairUnderItsPolicy) {
  constexpr int64_t kBags = 300, kLen = 10;  // 3000 ids: three slices or more
  constexpr int64_t kBad = 2345;             // in the third slice
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(kRows * kDim));
  for (float& v : rows) v = value(rng);
  std::uniform_int_distribution<int64_t> id(0, kRows - 1);
  std::vector<int64_t> ids(static_cast<size_t>(kBags * kLen));
  for (int64_t& x : ids) x = id(rng);
  ids[kBad] = kRows + 3;
  const std::vector<int32_t> lengths(kBags, kLen);
  for (Storage s : {Storage::kFp32, Storage::kInt8}) {
    auto m = MakeModel({{"t", kDim, s, rows, {}}});
    for (Bounds bounds : {Bounds::kSkip, Bounds::kClamp, Bounds::kError}) {
      m->bounds = bounds;
      Request r;
      r.batch_size = kBags;
      r.num_features = 1;
      r.lengths = lengths.data();
      r.num_lengths = lengths.size();
      r.values = ids.data();
      r.values_int64 = true;
      r.num_values = ids.size();
      std::vector<float> out(static_cast<size_t>(kBags * kDim), -3.0f);
      const Status st = Lookup(*m, r, out.data(), out.size());
      if (bounds == Bounds::kError) {
        EXPECT_FALSE(st.ok());
        EXPECT_NE(st.ToString().find("id " + std::to_string(kRows + 3)), std::string::npos)
            << st.ToString();
        continue;
      }
      ASSERT_TRUE(st.ok()) << st.ToString();
      std::vector<float> want(out.size());
      std::vector<double> slack(out.size(), 0.0);
      for (int64_t b = 0; b < kBags; ++b) {
        std::vector<float> acc(kDim, 0.0f);
        std::vector<double> mag(kDim, 0.0);
        for (int64_t k = 0; k < kLen; ++k) {
          const int64_t i = b * kLen + k;
          if (i == kBad && bounds == Bounds::kSkip) continue;
          const int64_t row = i == kBad ? 0 : ids[i];
          const std::vector<float> x = ReadRow(m->tables[0], row);
          for (int32_t c = 0; c < kDim; ++c) {
            acc[c] += x[c];
            if (Folded(s)) mag[c] += Magnitude(m->tables[0], row, c);
          }
        }
        std::memcpy(&want[b * kDim], acc.data(), sizeof(float) * kDim);
        if (Folded(s))
          for (int32_t c = 0; c < kDim; ++c) slack[b * kDim + c] = Slack(kLen, mag[c]);
      }
      ExpectMatches(out, want, slack,
                    std::string(StorageName(s)) + (bounds == Bounds::kSkip ? " skip" : " clamp"));
    }
  }
}

}  // namespace
}  // namespace shardrec::serving
