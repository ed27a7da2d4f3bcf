// VBE serving lookups (shardrec_inference_lookup_vbe and friends): with inverse indices, bit for
// bit the plain lookup of the expanded batch, for pooled (SUM and MEAN, features read by one or
// two tables) and sequence models, weighted or not, int32 or int64 ids, every serving storage
// type and bounds policy; without them, each feature's B_f rows feature-major; refused views
// (every rule of the view) leave the output untouched and name the feature and sample; many
// threads during hot swaps answer the version they report.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/capi/inference/inference_test_util.h"
#include "tests/capi/inference/vbe_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

using vbe::Expand;
using vbe::kFeatures;
using vbe::LookupPlain;
using vbe::LookupVbe;
using vbe::RandomVbe;
using vbe::Vbe;

const std::string& ModelDir(bool sequence, uint32_t seed = 1) {
  static std::string dirs[2][2];
  std::string& d = dirs[sequence ? 1 : 0][seed == 1 ? 0 : 1];
  if (d.empty()) {
    d = FreshDir(sequence ? "vbe_seq" : "vbe_pooled");
    vbe::SaveModel(d, sequence, seed);
  }
  return d;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp must not see the null data of two empty vectors (UBSan).
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

constexpr int32_t kStorages[] = {SHARDREC_SERVING_FP32,    SHARDREC_SERVING_FP16,
                                 SHARDREC_SERVING_BF16,    SHARDREC_SERVING_INT8,
                                 SHARDREC_SERVING_INT4,    SHARDREC_SERVING_FP8_E4M3,
                                 SHARDREC_SERVING_FP8_E5M2};

TEST(InferenceVbe, InverseIndicesEqualTheExpandedBatchBitForBit) {
  std::mt19937 rng(7);
  for (bool seq : {false, true})
    for (int32_t storage : kStorages) {
      InferencePtr inf = Open(ModelDir(seq), storage);
      shardrec_inference_version_t* ver = nullptr;
      ASSERT_EQ(shardrec_inference_pin(inf.get(), &ver), SHARDREC_OK);
      for (int trial = 0; trial < 8; ++trial) {
        vbe::Options o;
        o.weighted = trial % 2 == 1;
        o.samples = trial == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 9);
        const bool i32 = trial % 4 >= 2;
        const Vbe v = RandomVbe(&rng, o);
        const std::vector<float> want = LookupPlain(inf.get(), Expand(v), i32);
        uint64_t version = 0;
        const std::vector<float> got = LookupVbe(inf.get(), v, i32, &version);
        EXPECT_EQ(version, 1u);
        EXPECT_TRUE(SameBits(got, want))
            << (seq ? "sequence" : "pooled") << " storage " << storage << " trial " << trial;
        std::vector<float> pinned(got.size());
        const shardrec_kjt_vbe_view_t view = v.View(i32);
        ASSERT_EQ(shardrec_inference_snapshot_lookup_vbe(ver, &view, pinned.data(), pinned.size()),
                  SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_TRUE(SameBits(pinned, want));
      }
      shardrec_inference_unpin(ver);
    }
}

// One user (features u0, u1: one bag each) and candidates (i0, i1: one bag per sample, inverse
// indices the identity, which the lookup sums into the output rows in place).
TEST(InferenceVbe, RequestShapedBatchesEqualTheExpandedBatch) {
  std::mt19937 rng(29);
  for (bool seq : {false, true})
    for (int32_t storage : kStorages) {
      InferencePtr inf = Open(ModelDir(seq), storage);
      for (int trial = 0; trial < 4; ++trial) {
        vbe::Options o;
        o.request = true;
        o.weighted = trial % 2 == 1;
        o.samples = 1 + 7 * trial;
        const Vbe v = RandomVbe(&rng, o);
        EXPECT_TRUE(
            SameBits(LookupVbe(inf.get(), v, false), LookupPlain(inf.get(), Expand(v), false)))
            << (seq ? "sequence" : "pooled") << " storage " << storage << " trial " << trial;
      }
    }
}

TEST(InferenceVbe, WithoutInverseIndicesEachFeatureIsFeatureMajor) {
  std::mt19937 rng(11);
  for (bool seq : {false, true}) {
    InferencePtr inf = Open(ModelDir(seq), SHARDREC_SERVING_INT8);
    for (int trial = 0; trial < 6; ++trial) {
      vbe::Options o;
      o.inverse = false;
      o.weighted = trial % 2 == 0;
      o.samples = trial == 0 ? 0 : 5;
      const Vbe v = RandomVbe(&rng, o);
      // Expand pads each feature with empty bags up to B = max B_f.
      const std::vector<float> padded = LookupPlain(inf.get(), Expand(v), false);
      const std::vector<float> got = LookupVbe(inf.get(), v, false);
      if (seq) {
        // Empty bags add no ids: one row per id in value order either way.
        EXPECT_TRUE(SameBits(got, padded)) << "trial " << trial;
        continue;
      }
      size_t want_len = 0;
      for (int f = 0; f < kFeatures; ++f) want_len += v.batch_sizes[f] * vbe::kWidth[f];
      ASSERT_EQ(got.size(), want_len);
      size_t at = 0;
      for (int f = 0; f < kFeatures; ++f)
        for (int64_t b = 0; b < v.batch_sizes[f]; ++b) {
          const float* row = padded.data() + b * vbe::kPooledDim + vbe::kFirstCol[f];
          EXPECT_EQ(std::memcmp(got.data() + at, row, vbe::kWidth[f] * sizeof(float)), 0)
              << "feature " << f << " bag " << b;
          at += static_cast<size_t>(vbe::kWidth[f]);
        }
    }
  }
}

TEST(InferenceVbe, ClampAndSkipFollowTheExpandedBatch) {
  std::mt19937 rng(13);
  for (bool seq : {false, true})
    for (int32_t bounds : {SHARDREC_BOUNDS_CLAMP, SHARDREC_BOUNDS_SKIP})
      for (int32_t storage : {SHARDREC_SERVING_FP32, SHARDREC_SERVING_INT4}) {
        InferencePtr inf = Open(ModelDir(seq), storage, bounds);
        for (int trial = 0; trial < 4; ++trial) {
          vbe::Options o;
          o.out_of_range = 0.3;
          o.weighted = trial % 2 == 1;
          const Vbe v = RandomVbe(&rng, o);
          EXPECT_TRUE(
              SameBits(LookupVbe(inf.get(), v, false), LookupPlain(inf.get(), Expand(v), false)))
              << "bounds " << bounds << " storage " << storage;
        }
      }
}

TEST(InferenceVbe, APlainViewInsideIsThePlainLookup) {
  InferencePtr inf = Open(ModelDir(false), SHARDREC_SERVING_FP16);
  std::mt19937 rng(17);
  vbe::Options o;
  o.weighted = true;
  const vbe::Plain p = Expand(RandomVbe(&rng, o));
  shardrec_kjt_vbe_view_t view = SHARDREC_KJT_VBE_VIEW_INIT;
  view.kjt = p.View(false);
  size_t n = 0;
  ASSERT_EQ(shardrec_inference_vbe_output_len(inf.get(), &view, &n), SHARDREC_OK);
  std::vector<float> got(n);
  ASSERT_EQ(shardrec_inference_lookup_vbe(inf.get(), &view, got.data(), n, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_TRUE(SameBits(got, LookupPlain(inf.get(), p, false)));
}

// Runs the view through every VBE call and expects SHARDREC_EINVAL with a message containing
// each of `words`, and the output buffer untouched.
void ExpectRefused(shardrec_inference_t* inf, const shardrec_kjt_vbe_view_t& view, size_t out_len,
                   std::initializer_list<const char*> words) {
  std::vector<float> out(out_len + 4, 12345.0f);
  ASSERT_EQ(shardrec_inference_lookup_vbe(inf, &view, out.data(), out_len, nullptr),
            SHARDREC_EINVAL);
  const std::string msg = shardrec_last_error();
  for (const char* w : words) EXPECT_NE(msg.find(w), std::string::npos) << msg << " lacks " << w;
  for (float x : out) ASSERT_EQ(x, 12345.0f) << "written on error: " << msg;
  shardrec_inference_version_t* ver = nullptr;
  ASSERT_EQ(shardrec_inference_pin(inf, &ver), SHARDREC_OK);
  EXPECT_EQ(shardrec_inference_snapshot_lookup_vbe(ver, &view, out.data(), out_len),
            SHARDREC_EINVAL);
  shardrec_inference_unpin(ver);
  for (float x : out) ASSERT_EQ(x, 12345.0f);
}

TEST(InferenceVbe, RefusedViewsNameFeatureAndSampleAndWriteNothing) {
  for (bool seq : {false, true}) {
    InferencePtr inf = Open(ModelDir(seq), SHARDREC_SERVING_FP32);
    std::mt19937 rng(19);
    vbe::Options o;
    o.samples = 5;
    o.max_bag = 3;
    Vbe v = RandomVbe(&rng, o);
    v.lengths[0] = std::max(v.lengths[0], 1);  // a first bag with an id
    v.ids.resize(0);
    v.ids32.resize(0);
    for (int32_t len : v.lengths)
      for (int32_t i = 0; i < len; ++i) v.ids.push_back(1), v.ids32.push_back(1);
    const size_t len = LookupVbe(inf.get(), v, false).size();
    const shardrec_kjt_vbe_view_t good = v.View(false);

    shardrec_kjt_vbe_view_t bad = good;
    bad.version = 0;
    ExpectRefused(inf.get(), bad, len, {"version"});
    bad = good;
    bad.version = SHARDREC_KJT_VBE_VIEW_VERSION + 1;
    ExpectRefused(inf.get(), bad, len, {"version"});
    bad = good;
    bad.num_feature_batch_sizes = kFeatures - 1;
    ExpectRefused(inf.get(), bad, len, {"feature batch sizes"});
    std::vector<int64_t> sizes = v.batch_sizes;
    sizes[2] = -1;
    bad = good;
    bad.feature_batch_sizes = sizes.data();
    ExpectRefused(inf.get(), bad, len, {"i0", "batch size -1"});
    sizes = v.batch_sizes;
    sizes[3] += 1;  // the lengths no longer add up
    bad = good;
    bad.feature_batch_sizes = sizes.data();
    ExpectRefused(inf.get(), bad, len, {"add up"});
    bad = good;
    bad.num_inverse_indices -= 1;
    ExpectRefused(inf.get(), bad, len, {"inverse indices"});
    std::vector<int64_t> inv = v.inverse;
    inv[3 * v.B + 4] = v.batch_sizes[3];  // feature i1, sample 4
    bad = good;
    bad.inverse_indices = inv.data();
    ExpectRefused(inf.get(), bad, len, {"i1", "sample 4", "inverse index"});
    inv = v.inverse;
    inv[1 * v.B + 2] = -1;
    bad = good;
    bad.inverse_indices = inv.data();
    ExpectRefused(inf.get(), bad, len, {"u1", "sample 2", "inverse index -1"});
    // Without inverse indices batch_size must be the largest B_f.
    bad = good;
    bad.inverse_indices = nullptr;
    bad.num_inverse_indices = 0;
    int64_t largest = 0;
    for (int64_t bf : v.batch_sizes) largest = std::max(largest, bf);
    bad.kjt.batch_size = largest + 1;
    ExpectRefused(inf.get(), bad, len, {"largest feature batch size"});
    // An inverse array without feature batch sizes is not a plain view.
    bad = good;
    bad.feature_batch_sizes = nullptr;
    bad.num_feature_batch_sizes = 0;
    ExpectRefused(inf.get(), bad, len, {"plain batch"});
    std::vector<int32_t> lengths = v.lengths;
    lengths[v.batch_sizes[0]] = -2;  // the first bag of u1
    bad = good;
    bad.kjt.lengths = lengths.data();
    ExpectRefused(inf.get(), bad, len, {"u1", "sample 0", "negative"});
    bad = good;
    bad.kjt.num_values -= 1;
    ExpectRefused(inf.get(), bad, len, {"num_values"});
    ExpectRefused(inf.get(), good, len + 1, {"out_len"});
    // The ERROR bounds policy: an id out of range, found before anything is written.
    std::vector<int64_t> ids = v.ids;
    ids[0] = 1000;
    bad = good;
    bad.kjt.values = ids.data();
    ExpectRefused(inf.get(), bad, len, {"u0", "sample 0", "out of range"});
    std::vector<float> weights(v.ids.size(), 1.0f);
    weights[0] = NAN;
    bad = good;
    bad.kjt.weights = weights.data();
    bad.kjt.num_weights = weights.size();
    ExpectRefused(inf.get(), bad, len, {"finite"});
    size_t n = 0;
    EXPECT_EQ(shardrec_inference_vbe_output_len(inf.get(), nullptr, &n), SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_inference_vbe_output_len(inf.get(), &good, nullptr), SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_inference_lookup_vbe(inf.get(), nullptr, nullptr, 0, nullptr),
              SHARDREC_EINVAL);
  }
}

TEST(InferenceVbe, ManyThreadsDuringHotSwapsAnswerTheirVersion) {
  const std::string a = ModelDir(false, 1), b = ModelDir(false, 2);
  InferencePtr ha = Open(a, SHARDREC_SERVING_INT8), hb = Open(b, SHARDREC_SERVING_INT8);
  std::mt19937 rng(23);
  std::vector<Vbe> batches;
  std::vector<std::vector<float>> want[2];
  for (int k = 0; k < 12; ++k) {
    vbe::Options o;
    o.weighted = k % 2 == 0;
    o.samples = 1 + k;
    batches.push_back(RandomVbe(&rng, o));
    want[0].push_back(LookupPlain(ha.get(), Expand(batches.back()), false));
    want[1].push_back(LookupPlain(hb.get(), Expand(batches.back()), false));
  }
  ASSERT_FALSE(SameBits(want[0][1], want[1][1]));
  InferencePtr inf = Open(a, SHARDREC_SERVING_INT8);
  std::atomic<bool> stop{false};
  std::atomic<int> mismatches{0}, lookups{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th)
    threads.emplace_back([&, th] {
      uint64_t x = 88172645463325252ull + th;
      while (!stop.load() || lookups.load() < 200) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const size_t k = x % batches.size();
        uint64_t version = 0;
        const std::vector<float> got = LookupVbe(inf.get(), batches[k], false, &version);
        // Versions alternate a, b, a, ...: odd numbers are a.
        if (!SameBits(got, want[version % 2 == 1 ? 0 : 1][k])) ++mismatches;
        ++lookups;
      }
    });
  for (int swap = 0; swap < 10; ++swap) {
    const std::string& next = swap % 2 == 0 ? b : a;
    ASSERT_EQ(shardrec_inference_reload(inf.get(), next.c_str()), SHARDREC_OK)
        << shardrec_last_error();
  }
  stop = true;
  for (auto& t : threads) t.join();
  uint64_t version = 0;
  ASSERT_EQ(shardrec_inference_version(inf.get(), &version), SHARDREC_OK);
  EXPECT_EQ(version, 11u);
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace shardrec::testing
