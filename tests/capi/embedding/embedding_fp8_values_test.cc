// FP8 tables given values no training makes (docs/semantics.md, "FP8 weights"): NaN, infinities,
// magnitudes beyond the format's range (up to fp32's largest), fp32 subnormals, -0.0, rows of
// nothing but infinities or NaN. They come in through set_weights and through a table import of
// an fp32 table's export (which takes values as the file has them, checkpoint.h), and must then
// be the documented encoding of each row (the reference's RoundRowToFp8: NaN stays NaN, an
// infinity saturates), go out through a table export and back through an import bit for bit,
// survive a checkpoint save and load bit for bit (also from world 2 to world 1), and be read by
// a forward without a refusal or a crash. And a checkpoint whose FP8 row carries a scale no
// encoding gives (not a power of two, NaN, beyond 2^111, negative), its checksums made to match,
// is refused as corrupt by a load (staged and partial, nothing changed) and by serving.
#include <gtest/gtest.h>
#define XXH_INLINE_ALL  // the checksums, header-only (as checkpoint_test_util.cc)
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/inference.h"
#include "tests/capi/checkpoint/checkpoint_test_util.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/reference_model.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

// Row r of a table: one of six hostile kinds.
std::vector<float> Hostile(const RefTable& t) {
  std::vector<float> w(static_cast<size_t>(t.rows * t.dim));
  for (int64_t r = 0; r < t.rows; ++r)
    for (int32_t c = 0; c < t.dim; ++c) {
      float& v = w[static_cast<size_t>(r * t.dim + c)];
      const float plain = static_cast<float>((r * 13 + c * 5) % 17) / 8.0f - 1.0f;
      switch (r % 6) {
        case 0:  // mixed: a NaN, both infinities, finite values
          v = c == 0 ? NAN : c == 1 ? INFINITY : c == 2 ? -INFINITY : plain;
          break;
        case 1:  // nothing finite
          v = c % 2 ? INFINITY : -INFINITY;
          break;
        case 2:
          v = NAN;
          break;
        case 3:  // fp32's extremes: the largest finite, subnormals
          v = c == 0 ? 3.4028235e38f : c == 1 ? -1e-45f : c == 2 ? 1e-40f : plain * 1e30f;
          break;
        case 4:  // zeros of both signs
          v = c % 2 ? -0.0f : 0.0f;
          break;
        default:  // finite values with one -inf
          v = c == t.dim - 1 ? -INFINITY : plain;
          break;
      }
    }
  return w;
}

// Bit for bit, except that any NaN matches any NaN (the reference's and the decoder's NaN may
// differ in sign and payload; FP8 keeps no payload).
std::string FirstDifference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", expected " +
             std::to_string(want[i]);
  }
  return "";
}

// One forward of ids 0-3 of every feature (the hostile rows of each kind): OK, whatever it reads.
void ForwardReads(shardrec_embedding_t* c, const Scenario& s) {
  const int64_t batch = 2;
  std::vector<int32_t> lengths(static_cast<size_t>(s.num_features * batch), 2);
  std::vector<int64_t> ids;
  for (size_t k = 0; k < lengths.size(); ++k) ids.insert(ids.end(), {int64_t(k % 2) * 2, 1});
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = batch;
  v.num_features = static_cast<size_t>(s.num_features);
  v.lengths = lengths.data();
  v.num_lengths = lengths.size();
  v.values = ids.data();
  v.num_values = ids.size();
  int64_t dim = 0;
  ASSERT_EQ(shardrec_embedding_output_dim(c, &dim), SHARDREC_OK);
  std::vector<float> out(static_cast<size_t>(batch * dim));
  EXPECT_EQ(shardrec_embedding_forward(c, &v, out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
}

TEST(EmbeddingFp8Values, HostileRowsEncodeAsDocumentedAndRoundTrip) {
  for (const int32_t dtype : {SHARDREC_DTYPE_FP8_E4M3, SHARDREC_DTYPE_FP8_E5M2}) {
    SCOPED_TRACE(dtype == SHARDREC_DTYPE_FP8_E4M3 ? "E4M3" : "E5M2");
    const std::string dir = ::testing::TempDir() + "fp8_values_" + std::to_string(dtype);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    Scenario s8 = DTypeScenario(2, dtype, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
    Scenario s32 = s8;
    for (RefTable& t : s32.tables) t.dtype = SHARDREC_DTYPE_FLOAT32;
    std::vector<std::vector<float>> hostile, want;
    for (const RefTable& t : s8.tables) {
      hostile.push_back(Hostile(t));
      want.push_back(hostile.back());
      for (int64_t r = 0; r < t.rows; ++r)
        RoundRowToFp8(want.back().data() + r * t.dim, t.dim, dtype);
    }
    PlanPtr plan8 = MakePlan(s8), plan32 = MakePlan(s32);
    ASSERT_NE(plan8, nullptr);
    ASSERT_NE(plan32, nullptr);
    auto file = [&](const RefTable& t, const std::string& what) {
      return dir + "/" + t.name + "_" + what + ".safetensors";
    };
    SpawnRanks(2, [&](int r) {
      // The fp32 table holds the values as they are; its export is the file to import.
      CollPtr c32 = CreateRank(s32, plan32.get(), r, s32.seed);
      ASSERT_NE(c32, nullptr);
      for (size_t t = 0; t < s32.tables.size(); ++t) {
        const char* name = s32.tables[t].name.c_str();
        ASSERT_EQ(
            shardrec_embedding_set_weights(c32.get(), name, hostile[t].data(), hostile[t].size()),
            SHARDREC_OK);
        ASSERT_EQ(shardrec_checkpoint_export_table(c32.get(), name,
                                                   file(s32.tables[t], "f32").c_str(), 0),
                  SHARDREC_OK)
            << shardrec_last_error();
      }
      // set_weights and the import encode each row the documented way.
      CollPtr set = CreateRank(s8, plan8.get(), r, s8.seed);
      CollPtr imported = CreateRank(s8, plan8.get(), r, s8.seed);
      ASSERT_NE(set, nullptr);
      ASSERT_NE(imported, nullptr);
      for (size_t t = 0; t < s8.tables.size(); ++t) {
        const RefTable& rt = s8.tables[t];
        ASSERT_EQ(shardrec_embedding_set_weights(set.get(), rt.name.c_str(), hostile[t].data(),
                                                 hostile[t].size()),
                  SHARDREC_OK);
        EXPECT_EQ(FirstDifference(GetWeights(set.get(), rt), want[t]), "") << "set " << rt.name;
        ASSERT_EQ(shardrec_checkpoint_import_table(imported.get(), rt.name.c_str(),
                                                   file(rt, "f32").c_str(), 0),
                  SHARDREC_OK)
            << shardrec_last_error();
        const std::vector<float> got = GetWeights(imported.get(), rt);
        EXPECT_EQ(FirstDifference(got, want[t]), "") << "imported " << rt.name;
        for (float x : got) EXPECT_FALSE(std::isinf(x)) << "an infinity did not saturate";
        // Its export imports back to the same bits.
        ASSERT_EQ(shardrec_checkpoint_export_table(imported.get(), rt.name.c_str(),
                                                   file(rt, "fp8").c_str(), 0),
                  SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_EQ(shardrec_checkpoint_import_table(set.get(), rt.name.c_str(),
                                                   file(rt, "fp8").c_str(), 0),
                  SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_EQ(FirstDifference(GetWeights(set.get(), rt), got), "") << "re-imported";
      }
      ForwardReads(imported.get(), s8);
      ASSERT_EQ(shardrec_checkpoint_save(imported.get(), (dir + "/ckpt").c_str(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
    });
    // The checkpoint loads at world 1 with every bit.
    Scenario s1 = s8;
    s1.world = 1;
    s1.ranks_per_node = 1;
    PlanPtr plan1 = MakePlan(s1);
    ASSERT_NE(plan1, nullptr);
    CollPtr c1 = CreateRank(s1, plan1.get(), 0, s1.seed);
    ASSERT_NE(c1, nullptr);
    ASSERT_EQ(shardrec_checkpoint_load(c1.get(), (dir + "/ckpt").c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    for (size_t t = 0; t < s1.tables.size(); ++t)
      EXPECT_EQ(FirstDifference(GetWeights(c1.get(), s1.tables[t]), want[t]), "")
          << "loaded " << s1.tables[t].name;
    ForwardReads(c1.get(), s1);
  }
}

// Writes `scale` as row 0's scale of table t0's weights record in rank file 0 of checkpoint
// `dir`, and makes the record's checksums and the manifest's match the new bytes.
void ForgeScale(const std::string& dir, float scale) {
  EditManifest(dir, [&](nlohmann::json& m) {
    for (auto& f : m["files"])
      for (auto& r : f["records"]) {
        if (r["table"] != "t0" || r["tensor"] != "weights") continue;
        const std::string path = dir + "/" + f["name"].get<std::string>();
        const uint64_t begin = r["byte_range"][0], end = r["byte_range"][1];
        ASSERT_EQ(r["xxh3"].size(), 1u) << "a record of one chunk";
        std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
        std::vector<char> bytes(end - begin);
        io.seekg(static_cast<std::streamoff>(begin));
        io.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        std::memcpy(bytes.data(), &scale, sizeof(scale));
        io.seekp(static_cast<std::streamoff>(begin));
        io.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        r["xxh3"][0] = XXH3_64bits(bytes.data(), bytes.size());
        return;
      }
    FAIL() << "no weights record of t0";
  });
}

TEST(EmbeddingFp8Values, ACheckpointRowWithAScaleNoEncodingGivesIsCorrupt) {
  Scenario s =
      DTypeScenario(1, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  s.ranks_per_node = 1;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string base = ::testing::TempDir() + "fp8_forged_scale";
  CollPtr saver = CreateRank(s, plan.get(), 0, s.seed);
  ASSERT_NE(saver, nullptr);
  int round = 0;
  for (const float scale : {3.0f, NAN, std::ldexp(1.0f, 120), -1.0f}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    const std::string dir = base + "_" + std::to_string(round++);
    std::filesystem::remove_all(dir);
    ASSERT_EQ(shardrec_checkpoint_save(saver.get(), dir.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    ForgeScale(dir, scale);
    CollPtr c = CreateRank(s, plan.get(), 0, s.seed + 1);  // other weights than the checkpoint's
    ASSERT_NE(c, nullptr);
    const auto before = Snapshot(c.get(), s);
    for (const int32_t partial : {0, 1}) {
      shardrec_checkpoint_options_t o;
      ASSERT_EQ(shardrec_checkpoint_options_init(&o, SHARDREC_CHECKPOINT_OPTIONS_VERSION),
                SHARDREC_OK);
      o.allow_partial_load = partial;
      o.verify_first = partial;
      EXPECT_EQ(shardrec_checkpoint_load(c.get(), dir.c_str(), &o), SHARDREC_ECORRUPT);
      EXPECT_NE(std::string(shardrec_last_error()).find("power of two"), std::string::npos)
          << shardrec_last_error();
      EXPECT_EQ(Snapshot(c.get(), s), before) << "a refused load changed the collection";
    }
    shardrec_inference_t* inf = nullptr;
    EXPECT_EQ(shardrec_inference_open(dir.c_str(), nullptr, &inf), SHARDREC_ECORRUPT)
        << shardrec_last_error();
    EXPECT_EQ(inf, nullptr);
    shardrec_inference_destroy(inf);
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace shardrec::testing
