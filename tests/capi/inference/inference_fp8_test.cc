// FP8 serving storage (SHARDREC_SERVING_FP8_E4M3, _E5M2): lookups equal, bit for bit, a reference
// that rounds the trained fp32 rows to FP8 by brute force from the formats' definitions
// (inference_test_util's Fp8RoundTrip, not the library's codec) and sums each bag in id order in
// fp32 as the library documents; they lie within the documented bound of the fp32 rows' exact sums;
// row scales read back with bias 0; serving files round-trip them, and a file whose stored scale is
// not one the encoder writes (checksums re-stamped, so only the value is wrong) is refused at open.
#include <gtest/gtest.h>
// Header-only XXH3, to stamp the checksums of an edited serving file as a writer would.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/capi/inference/inference_test_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

namespace fs = std::filesystem;

// Per table, the trained rows as FP8 rows of `storage` decoded back to fp32 (exact), and each
// row's scale.
struct Decoded {
  std::vector<std::vector<float>> rows, scales;
};
Decoded DecodeTables(const Trained& t, int32_t storage) {
  Decoded d;
  for (size_t k = 0; k < t.s.tables.size(); ++k) {
    const RefTable& rt = t.s.tables[k];
    std::vector<float> out(t.weights[k].size());
    std::vector<float> scales(static_cast<size_t>(rt.rows));
    for (int64_t r = 0; r < rt.rows; ++r) {
      const float* x = t.weights[k].data() + r * rt.dim;
      Fp8RoundTrip(storage, x, rt.dim, out.data() + r * rt.dim);
      scales[static_cast<size_t>(r)] = Fp8Scale(storage, x, rt.dim);
    }
    d.rows.push_back(std::move(out));
    d.scales.push_back(std::move(scales));
  }
  return d;
}

// The lookup of `b` over `rows` as the library computes it: each output element starts at 0 and
// adds (weight x) value in id order in fp32; MEAN divides by the fp32 sum of the weights (0 for
// an empty bag); sequence outputs are weight x value.
std::vector<float> ReferenceLookup(const Scenario& s, const std::vector<std::vector<float>>& rows,
                                   const RefBatch& b) {
  const bool seq = s.tables[0].pooling == SHARDREC_POOLING_NONE;
  const int64_t B = b.batch_size;
  std::vector<size_t> begin(s.num_features + 1, 0);
  for (int32_t f = 0; f < s.num_features; ++f) {
    size_t n = 0;
    for (int64_t k = 0; k < B; ++k) n += b.lengths[f * B + k];
    begin[f + 1] = begin[f] + n;
  }
  int64_t width = 0;
  for (const RefTable& t : s.tables)
    width += seq ? 0 : static_cast<int64_t>(t.dim * t.features.size());
  if (seq) width = s.tables[0].dim;
  std::vector<float> out((seq ? b.ids.size() : static_cast<size_t>(B)) * width, 0.0f);
  int64_t offset = 0;
  for (int32_t f = 0; f < s.num_features; ++f) {
    for (size_t t = 0; t < s.tables.size(); ++t) {
      const RefTable& rt = s.tables[t];
      if (std::find(rt.features.begin(), rt.features.end(), f) == rt.features.end()) continue;
      size_t pos = begin[f];
      for (int64_t k = 0; k < B; ++k) {
        const int32_t len = b.lengths[f * B + k];
        float div = 0.0f;
        for (size_t i = pos; i < pos + len; ++i) div += b.weights.empty() ? 1.0f : b.weights[i];
        for (int32_t c = 0; c < rt.dim; ++c) {
          float acc = 0.0f;
          for (size_t i = pos; i < pos + len; ++i) {
            const float x = rows[t][b.ids[i] * rt.dim + c];
            const float v = b.weights.empty() ? x : b.weights[i] * x;
            if (seq) out[i * width + c] = v;
            acc += v;
          }
          if (seq) continue;
          if (rt.pooling == SHARDREC_POOLING_MEAN) acc = div != 0.0f ? acc / div : 0.0f;
          out[k * width + offset + c] = acc;
        }
        pos += len;
      }
      if (!seq) offset += rt.dim;
    }
  }
  return out;
}

void ExpectBits(const std::vector<float>& got, const std::vector<float>& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
}

TEST(InferenceFp8, LookupsEqualTheDecodedRowsAndLieWithinTheBound) {
  struct Case {
    int32_t pooling;
    bool weighted;
  };
  for (const Case c : {Case{SHARDREC_POOLING_SUM, false}, Case{SHARDREC_POOLING_SUM, true},
                       Case{SHARDREC_POOLING_MEAN, true}, Case{SHARDREC_POOLING_NONE, true}}) {
    SCOPED_TRACE("pooling " + std::to_string(c.pooling) + (c.weighted ? " weighted" : ""));
    Side side;
    side.world = 2;
    side.sharding = SHARDREC_SHARDING_ROW_WISE;
    const Trained t = TrainAndSave(side, c.pooling, c.weighted, 6);
    for (const int32_t storage : {SHARDREC_SERVING_FP8_E4M3, SHARDREC_SERVING_FP8_E5M2}) {
      SCOPED_TRACE(storage == SHARDREC_SERVING_FP8_E4M3 ? "e4m3" : "e5m2");
      const Decoded d = DecodeTables(t, storage);
      InferencePtr inf = Open(t.trained_dir, storage);
      ASSERT_TRUE(inf);
      const std::string file = FreshDir("fp8_serving") + "/t.serving";
      ASSERT_EQ(shardrec_inference_save(inf.get(), file.c_str()), SHARDREC_OK)
          << shardrec_last_error();
      InferencePtr mapped = Open(file, SHARDREC_SERVING_AS_TRAINED);
      ASSERT_TRUE(mapped);
      for (size_t r = 0; r < t.batches.size(); ++r) {
        const RefBatch& b = t.batches[r];
        const std::vector<float> got = Lookup(inf.get(), b, t.s.num_features);
        ExpectBits(got, ReferenceLookup(t.s, d.rows, b), "decoded reference");
        ExpectBits(Lookup(mapped.get(), b, t.s.num_features), got, "serving file");
        std::vector<double> exact, bound;
        ExactAndBound(t.s, t.weights, b, storage, &exact, &bound);
        ASSERT_EQ(got.size(), exact.size());
        bool some_rounding = false;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_LE(std::fabs(got[i] - exact[i]), bound[i])
              << "element " << i << ": " << got[i] << " vs " << exact[i];
          some_rounding = some_rounding || got[i] != static_cast<float>(exact[i]);
        }
        EXPECT_TRUE(some_rounding) << "the trained rows all encoded exactly: a weak test";
      }
      // Row scales: the encoder's, bias 0, on the handle and from the file.
      for (size_t k = 0; k < t.s.tables.size(); ++k) {
        const RefTable& rt = t.s.tables[k];
        std::vector<int64_t> ids(static_cast<size_t>(rt.rows));
        for (int64_t i = 0; i < rt.rows; ++i) ids[static_cast<size_t>(i)] = i;
        for (shardrec_inference_t* h : {inf.get(), mapped.get()}) {
          std::vector<float> scales(ids.size(), -1.0f), biases(ids.size(), -1.0f);
          ASSERT_EQ(shardrec_inference_row_scales(h, rt.name.c_str(), ids.data(), ids.size(),
                                                  scales.data(), biases.data(), nullptr),
                    SHARDREC_OK)
              << shardrec_last_error();
          EXPECT_EQ(scales, d.scales[k]) << rt.name;
          EXPECT_EQ(biases, std::vector<float>(ids.size(), 0.0f)) << rt.name;
        }
      }
    }
  }
}

// Overwrites the scale of table 0's first row in the serving file at `path` and stamps the
// checksums again (the data chunk's in the header, the header's in the prefix: magic, header
// length, header XXH3, header), so that only the scale's value is wrong.
void WriteScale(const std::string& path, float scale) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t len = 0;
  f.seekg(8);
  f.read(reinterpret_cast<char*>(&len), 8);
  std::string header(len, '\0');
  f.seekg(24);
  f.read(header.data(), static_cast<std::streamsize>(len));
  nlohmann::json h = nlohmann::json::parse(header);
  nlohmann::json& e = h["tables"][0];
  const uint64_t offset = e["offset"].get<uint64_t>();
  const uint64_t nbytes = std::min<uint64_t>(e["nbytes"].get<uint64_t>(), uint64_t{1} << 20);
  std::vector<char> chunk(nbytes);
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(chunk.data(), static_cast<std::streamsize>(nbytes));
  std::memcpy(chunk.data(), &scale, 4);
  e["xxh3"][0] = XXH3_64bits(chunk.data(), chunk.size());
  std::string edited = h.dump();
  ASSERT_LE(edited.size(), len) << "the edit lengthened the header";
  edited.resize(len, ' ');
  const uint64_t sum = XXH3_64bits(edited.data(), edited.size());
  f.seekp(16);
  f.write(reinterpret_cast<const char*>(&sum), 8);
  f.write(edited.data(), static_cast<std::streamsize>(len));
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(&scale), 4);
}

TEST(InferenceFp8, AServingFileWithABadScaleIsRefused) {
  Side side;
  side.world = 1;
  const Trained t = TrainAndSave(side, SHARDREC_POOLING_SUM, false);
  InferencePtr inf = Open(t.trained_dir, SHARDREC_SERVING_FP8_E4M3);
  ASSERT_TRUE(inf);
  const std::string dir = FreshDir("fp8_bad_scale");
  const std::string good = dir + "/good.serving";
  ASSERT_EQ(shardrec_inference_save(inf.get(), good.c_str()), SHARDREC_OK) << shardrec_last_error();
  // A valid scale re-stamped the same way opens (the edit itself is sound).
  {
    const std::string p = dir + "/restamped.serving";
    fs::copy_file(good, p, fs::copy_options::overwrite_existing);
    WriteScale(p, 0.5f);
    InferencePtr ok = Open(p, SHARDREC_SERVING_AS_TRAINED);
    EXPECT_TRUE(ok);
  }
  for (const float bad : {0.0f, -0.5f, 0.75f, std::ldexp(1.0f, 112), std::ldexp(1.0f, -127),
                          std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(bad);
    const std::string p = dir + "/bad.serving";
    fs::copy_file(good, p, fs::copy_options::overwrite_existing);
    WriteScale(p, bad);
    shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
    shardrec_inference_t* h = nullptr;
    EXPECT_EQ(shardrec_inference_open(p.c_str(), &o, &h), SHARDREC_ECORRUPT);
    EXPECT_EQ(h, nullptr);
    EXPECT_NE(std::string(shardrec_last_error()).find("scale"), std::string::npos)
        << shardrec_last_error();
  }
}

TEST(InferenceFp8, StorageValuesBeyondTheEnumAreRefused) {
  Side side;
  side.world = 1;
  const Trained t = TrainAndSave(side, SHARDREC_POOLING_SUM, false);
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.default_storage = SHARDREC_SERVING_FP8_E5M2 + 1;
  shardrec_inference_t* h = nullptr;
  EXPECT_EQ(shardrec_inference_open(t.trained_dir.c_str(), &o, &h), SHARDREC_EINVAL);
  EXPECT_EQ(h, nullptr);
}

}  // namespace
}  // namespace shardrec::testing
