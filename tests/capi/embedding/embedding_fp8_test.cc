// FP8 weight storage (SHARDREC_DTYPE_FP8_E4M3 / _E5M2) through the C API: sharded training
// equals the unsharded reference that re-encodes each updated row (RoundRowToFp8) at worlds 1, 2
// and 4, results do not depend on the thread count, the accessors encode on set and decode on
// get, checkpoints hold the stored rows (format version 3) and still load version-1 ones, and
// what FP8 tables refuse (a column split, dynamic tables) is refused clearly. 2D meshes:
// tests/capi/replica/replica_fp8_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/dynamic.h"
#include "shardrec/inference.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

const char* kOptNames[] = {"Sgd", "Adagrad", "RowWiseAdagrad", "Adam"};
const char* kPoolNames[] = {"Sum", "Mean", "None"};

std::string DTypeTag(int32_t dtype) { return dtype == SHARDREC_DTYPE_FP8_E4M3 ? "E4M3" : "E5M2"; }

// (world, dtype, optimizer, sharding type, pooling)
using Fp8Param = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>;

class EmbeddingFp8 : public ::testing::TestWithParam<Fp8Param> {};

TEST_P(EmbeddingFp8, MatchesReferenceThatReencodesEachRow) {
  const auto [world, dtype, opt, type, pooling] = GetParam();
  Scenario s = DTypeScenario(world, dtype, type, pooling);
  s.optimizer.type = opt;
  s.optimizer.lr = opt == 0 ? 0.1f : 0.02f;
  s.weighted = pooling != SHARDREC_POOLING_NONE;
  RunEquivalence(s);
}

std::string Fp8Name(const ::testing::TestParamInfo<Fp8Param>& info) {
  const auto [world, dtype, opt, type, pooling] = info.param;
  return std::string("W") + std::to_string(world) + "_" + DTypeTag(dtype) + "_" + kOptNames[opt] +
         "_" + kShardingTypeNames[type] + "_" + kPoolNames[pooling];
}

INSTANTIATE_TEST_SUITE_P(
    RowTypes, EmbeddingFp8,
    ::testing::Combine(::testing::Values(1, 2, 4),
                       ::testing::Values(SHARDREC_DTYPE_FP8_E4M3, SHARDREC_DTYPE_FP8_E5M2),
                       ::testing::Values(SHARDREC_OPTIMIZER_SGD, SHARDREC_OPTIMIZER_ADAGRAD,
                                         SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD,
                                         SHARDREC_OPTIMIZER_ADAM),
                       ::testing::Values(SHARDREC_SHARDING_DATA_PARALLEL,
                                         SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE,
                                         SHARDREC_SHARDING_TABLE_ROW_WISE),
                       ::testing::Values(SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN)),
    Fp8Name);

// Sequence (NONE) tables, and one plan mixing fp32, bf16 and both FP8 kinds.
TEST(EmbeddingFp8Mixed, SequenceAndMixedDTypesMatchTheReference) {
  for (int32_t world : {1, 2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    Scenario seq = DTypeScenario(world, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_SHARDING_ROW_WISE,
                                 SHARDREC_POOLING_NONE);
    seq.optimizer.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
    seq.optimizer.lr = 0.05f;
    RunEquivalence(seq);
    Scenario mixed = DTypeScenario(world, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_SHARDING_TABLE_WISE,
                                   SHARDREC_POOLING_SUM);
    mixed.tables[0].dtype = SHARDREC_DTYPE_FLOAT32;
    mixed.tables[1].dtype = SHARDREC_DTYPE_FP8_E5M2;
    mixed.sharding = {SHARDREC_SHARDING_COLUMN_WISE, SHARDREC_SHARDING_ROW_WISE,
                      SHARDREC_SHARDING_DATA_PARALLEL};
    mixed.optimizer.type = SHARDREC_OPTIMIZER_ADAM;
    mixed.optimizer.lr = 0.02f;
    mixed.weighted = true;
    mixed.steps = 5;
    RunEquivalence(mixed);
  }
}

bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), sizeof(float) * a[i].size()) != 0)
      return false;
  return true;
}

// The encoding is a function of the row's values alone: 1 or 3 threads per rank, the same bits.
TEST(EmbeddingFp8Mixed, BitsDoNotDependOnTheThreadCount) {
  Scenario s =
      DTypeScenario(2, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAM;
  s.optimizer.lr = 0.05f;
  s.batch_sizes = {64, 64};
  std::vector<std::vector<std::vector<float>>> one, three;
  RunEquivalence(s, &one);
  s.num_threads = 3;
  RunEquivalence(s, &three);
  ASSERT_EQ(one.size(), three.size());
  for (size_t r = 0; r < one.size(); ++r) EXPECT_TRUE(SameBits(one[r], three[r])) << "rank " << r;
}

// set_weights encodes each row (its scale from its largest finite magnitude, each value to
// nearest even, saturating) and get_weights returns the decoded values: rows spanning many
// binades (so small values fall to the format's subnormals or to zero), ties, and a row whose
// values all sit just past the largest finite value.
TEST(EmbeddingFp8Mixed, AccessorsEncodeRowsOnSetAndDecodeOnGet) {
  for (int32_t dtype : {SHARDREC_DTYPE_FP8_E4M3, SHARDREC_DTYPE_FP8_E5M2}) {
    SCOPED_TRACE(DTypeTag(dtype));
    Scenario s = DTypeScenario(2, dtype, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    std::vector<std::vector<float>> in(s.tables.size()), want(s.tables.size());
    for (size_t t = 0; t < s.tables.size(); ++t) {
      const RefTable& rt = s.tables[t];
      for (int64_t r = 0; r < rt.rows; ++r) {
        for (int32_t c = 0; c < rt.dim; ++c) {
          const float base = static_cast<float>((r * 31 + c * 7) % 97) / 97.0f - 0.5f;
          float v = std::ldexp(base, static_cast<int>((c * 5 + r) % 40) - 20);
          if (r % 5 == 1) v = 1.0f + std::ldexp(1.0f, c % 2 == 0 ? -4 : -3);  // E4M3 / E5M2 ties
          if (r % 5 == 2) v = (c % 2 == 0 ? 1.0f : -1.0f) * 3.0e7f;           // a large scale
          want[t].push_back(v);
        }
      }
      in[t] = want[t];
      for (int64_t r = 0; r < rt.rows; ++r)
        RoundRowToFp8(want[t].data() + r * rt.dim, rt.dim, dtype);
    }
    SpawnRanks(s.world, [&](int r) {
      CollPtr c = CreateRank(s, plan.get(), r, s.seed);
      ASSERT_NE(c, nullptr);
      for (size_t t = 0; t < s.tables.size(); ++t) {
        const RefTable& rt = s.tables[t];
        ASSERT_EQ(
            shardrec_embedding_set_weights(c.get(), rt.name.c_str(), in[t].data(), in[t].size()),
            SHARDREC_OK)
            << shardrec_last_error();
        const std::vector<float> got = GetWeights(c.get(), rt);
        ASSERT_EQ(got.size(), want[t].size());
        size_t differ = 0, changed = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          changed += got[i] != in[t][i] ? 1 : 0;
          if (std::memcmp(&got[i], &want[t][i], sizeof(float)) != 0 && differ++ == 0)
            ADD_FAILURE() << "table " << rt.name << " element " << i << ": set " << in[t][i]
                          << ", got " << got[i] << ", expected " << want[t][i];
        }
        EXPECT_EQ(differ, 0u);
        // The rows really are rounded: most values of 4 or more mantissa bits change.
        EXPECT_GT(changed, got.size() / 2) << "table " << rt.name;
        // Idempotent: setting the decoded rows keeps every bit.
        ASSERT_EQ(shardrec_embedding_set_weights(c.get(), rt.name.c_str(), got.data(), got.size()),
                  SHARDREC_OK);
        const std::vector<float> again = GetWeights(c.get(), rt);
        EXPECT_EQ(std::memcmp(again.data(), got.data(), sizeof(float) * got.size()), 0);
      }
    });
  }
}

// Its initial weights are the fp32 initial values, each row encoded.
TEST(EmbeddingFp8Mixed, InitialWeightsAreTheEncodedFp32Rows) {
  Scenario s = DTypeScenario(4, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_SHARDING_TABLE_ROW_WISE,
                             SHARDREC_POOLING_SUM);
  s.tables[2].dtype = SHARDREC_DTYPE_FP8_E5M2;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  SpawnRanks(s.world, [&](int r) {
    CollPtr c = CreateRank(s, plan.get(), r, s.seed);
    ASSERT_NE(c, nullptr);
    for (size_t t = 0; t < s.tables.size(); ++t) {
      const std::vector<float> w = GetWeights(c.get(), s.tables[t]);
      ASSERT_EQ(w.size(), ref.weights(t).size());
      EXPECT_EQ(std::memcmp(w.data(), ref.weights(t).data(), sizeof(float) * w.size()), 0)
          << "rank " << r << " table " << s.tables[t].name;
      std::string first;
      EXPECT_EQ(CountRowsNotFp8(w, s.tables[t].dim, s.tables[t].dtype, &first), 0u) << first;
    }
  });
}

// A plan whose FP8 table is split into column shards: the planner does not propose one, and a
// collection refuses one given as JSON, on every rank, naming the table.
TEST(EmbeddingFp8Mixed, ColumnSplitsAreRefused) {
  Scenario s =
      DTypeScenario(2, SHARDREC_DTYPE_FLOAT32, SHARDREC_SHARDING_COLUMN_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  char* text = nullptr;
  ASSERT_EQ(shardrec_plan_to_json(plan.get(), &text, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  std::string json(text);
  shardrec_free(text);
  // t2 (dim 16) is split into column blocks of 4 (min_partition 4); make it FP8.
  const std::string from = "\"name\": \"t2\"";
  const size_t at = json.find(from);
  ASSERT_NE(at, std::string::npos) << json;
  const size_t dt = json.find("\"float32\"", at);
  ASSERT_NE(dt, std::string::npos);
  json.replace(dt, 9, "\"fp8_e4m3\"");
  shardrec_plan_t* fp8_plan = nullptr;
  ASSERT_EQ(shardrec_plan_from_json(&fp8_plan, json.c_str(), json.size()), SHARDREC_OK)
      << shardrec_last_error();
  PlanPtr fp8(fp8_plan);
  SpawnRanks(s.world, [&](int r) {
    const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    shardrec_embedding_t* c = nullptr;
    EXPECT_EQ(shardrec_embedding_create(&c, fp8.get(), GroupComm(s.world, r), &opt, &o),
              SHARDREC_EUNSUPPORTED);
    EXPECT_EQ(c, nullptr);
    const std::string msg = shardrec_last_error();
    EXPECT_NE(msg.find("table 't2': fp8_e4m3 rows are not split into column shards"),
              std::string::npos)
        << msg;
  });
  // The planner, asked for column-wise sharding of an FP8 table it would split, says why.
  shardrec_table_config_t table;
  shardrec_table_config_init(&table, SHARDREC_TABLE_CONFIG_VERSION);
  table.name = "wide";
  table.rows = 100;
  table.dim = 64;
  table.dtype = SHARDREC_DTYPE_FP8_E5M2;
  shardrec_feature_config_t feature = SHARDREC_FEATURE_CONFIG_INIT;
  feature.name = "f";
  const int32_t index = 0;
  table.features = &index;
  table.num_features = 1;
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = 2;
  topo.ranks_per_node = 2;
  shardrec_table_constraints_t cons;
  shardrec_table_constraints_init(&cons, SHARDREC_TABLE_CONSTRAINTS_VERSION);
  cons.table = "wide";
  cons.sharding_types = 1u << SHARDREC_SHARDING_COLUMN_WISE;
  cons.min_partition = 16;
  shardrec_plan_t* none = nullptr;
  EXPECT_EQ(shardrec_plan_create(&none, &table, 1, &feature, 1, &topo, &cons, 1), SHARDREC_EINVAL);
  EXPECT_EQ(none, nullptr);
  const std::string msg = shardrec_last_error();
  EXPECT_NE(msg.find("column_wise splits the fp8_e5m2 rows into column shards"), std::string::npos)
      << msg;
  // Unsplit, the same table plans and its stats name its storage type.
  cons.sharding_types = 1u << SHARDREC_SHARDING_ROW_WISE;
  ASSERT_EQ(shardrec_plan_create(&none, &table, 1, &feature, 1, &topo, &cons, 1), SHARDREC_OK)
      << shardrec_last_error();
  PlanPtr rw(none);
  char* stats = nullptr;
  ASSERT_EQ(shardrec_plan_stats(rw.get(), &stats, nullptr), SHARDREC_OK) << shardrec_last_error();
  EXPECT_NE(std::string(stats).find("fp8_e5m2"), std::string::npos) << stats;
  shardrec_free(stats);
}

// Trains `s` for its steps and saves a checkpoint to `dir` (every rank); returns rank 0's
// snapshot.
std::vector<std::vector<float>> TrainAndSave(const Scenario& s, const std::string& dir) {
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  EXPECT_NE(plan, nullptr);
  std::vector<std::vector<float>> snap;
  SpawnRanks(s.world, [&](int r) {
    CollPtr c = CreateRank(s, plan.get(), r, s.seed);
    ASSERT_NE(c, nullptr);
    for (int32_t step = 0; step < s.steps; ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, false);
      std::vector<float> out(static_cast<size_t>(batches[step][r].batch_size) * ref.output_dim());
      ASSERT_EQ(shardrec_embedding_forward(c.get(), kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_backward(c.get(), grads[step][r].data(), grads[step][r].size(),
                                            nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
    }
    ASSERT_EQ(shardrec_checkpoint_save(c.get(), dir.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    const auto mine = Snapshot(c.get(), s);  // collective: every rank
    if (r == 0) snap = mine;
  });
  return snap;
}

// Loads `dir` into a collection of `s` (converting dtypes when asked) on every rank; returns
// rank 0's snapshot, or the status when the load fails.
shardrec_status_t Load(const Scenario& s, const std::string& dir, bool convert,
                       std::vector<std::vector<float>>* snap) {
  PlanPtr plan = MakePlan(s);
  EXPECT_NE(plan, nullptr);
  std::vector<shardrec_status_t> rc(s.world, SHARDREC_OK);
  SpawnRanks(s.world, [&](int r) {
    CollPtr c = CreateRank(s, plan.get(), r, s.seed);
    ASSERT_NE(c, nullptr);
    shardrec_checkpoint_options_t o;
    shardrec_checkpoint_options_init(&o, SHARDREC_CHECKPOINT_OPTIONS_VERSION);
    o.allow_dtype_change = convert ? 1 : 0;
    rc[r] = shardrec_checkpoint_load(c.get(), dir.c_str(), &o);
    if (rc[r] != SHARDREC_OK) return;
    const auto mine = Snapshot(c.get(), s);  // collective: every rank
    if (r == 0) *snap = mine;
  });
  return rc[0];
}

// Checkpoints: an FP8 table saved at world 2 loads bit for bit at worlds 1 and 4 (other row
// blocks); into fp32 exactly and into bf16 rounded to nearest even (allow_dtype_change); and an
// fp32 checkpoint loads into an FP8 table with each row encoded.
TEST(EmbeddingFp8Mixed, CheckpointsKeepFp8RowsAndConvert) {
  const std::string dir = ::testing::TempDir() + "fp8_ckpt";
  const std::string dir32 = ::testing::TempDir() + "fp8_ckpt_fp32";
  Scenario s =
      DTypeScenario(2, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.tables[2].dtype = SHARDREC_DTYPE_FP8_E5M2;
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAM;
  s.optimizer.lr = 0.05f;
  const auto saved = TrainAndSave(s, dir);
  ASSERT_FALSE(saved.empty());
  const size_t per_table = saved.size() / s.tables.size();  // weights, then the states
  for (int32_t world : {1, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    Scenario w = s;
    w.world = world;
    w.ranks_per_node = world < 2 ? world : 2;
    std::vector<std::vector<float>> got;
    ASSERT_EQ(Load(w, dir, false, &got), SHARDREC_OK) << shardrec_last_error();
    EXPECT_TRUE(SameBits(got, saved));
  }
  // Into other storage types: fp32 exact, bf16 each value rounded to nearest even.
  for (int32_t dtype : {SHARDREC_DTYPE_FLOAT32, SHARDREC_DTYPE_BFLOAT16}) {
    Scenario other = s;
    for (RefTable& t : other.tables) t.dtype = dtype;
    std::vector<std::vector<float>> got;
    EXPECT_EQ(Load(other, dir, false, &got), SHARDREC_EINVAL) << "a dtype change without asking";
    ASSERT_EQ(Load(other, dir, true, &got), SHARDREC_OK) << shardrec_last_error();
    for (size_t t = 0; t < s.tables.size(); ++t) {
      std::vector<float> want = saved[t * per_table];
      for (float& x : want) x = RoundToStorage(x, dtype);
      EXPECT_EQ(std::memcmp(got[t * per_table].data(), want.data(), sizeof(float) * want.size()), 0)
          << "table " << t << " into dtype " << dtype;
    }
  }
  // From fp32: each row encoded.
  Scenario f32 = s;
  for (RefTable& t : f32.tables) t.dtype = SHARDREC_DTYPE_FLOAT32;
  const auto saved32 = TrainAndSave(f32, dir32);
  std::vector<std::vector<float>> got;
  ASSERT_EQ(Load(s, dir32, true, &got), SHARDREC_OK) << shardrec_last_error();
  for (size_t t = 0; t < s.tables.size(); ++t) {
    std::vector<float> want = saved32[t * per_table];
    const int32_t dim = s.tables[t].dim;
    for (size_t r = 0; r * dim < want.size(); ++r)
      RoundRowToFp8(want.data() + r * dim, dim, s.tables[t].dtype);
    EXPECT_EQ(std::memcmp(got[t * per_table].data(), want.data(), sizeof(float) * want.size()), 0)
        << "table " << t;
    EXPECT_NE(std::memcmp(got[t * per_table].data(), saved32[t * per_table].data(),
                          sizeof(float) * want.size()),
              0)
        << "table " << t << " was not encoded";
  }
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// An OCP FP8 code's value, from the format's definition (E4M3 "FN": bias 7, 3 mantissa bits, no
// infinities, 0x7F NaN; E5M2: bias 15, 2 mantissa bits), independently of the library.
double DecodeCode(uint8_t c, bool e4m3) {
  const int mant_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int exp = (c & 0x7F) >> mant_bits, mant = c & ((1 << mant_bits) - 1);
  const double sign = (c & 0x80) ? -1.0 : 1.0;
  if (e4m3 && (c & 0x7F) == 0x7F) return std::nan("");
  if (!e4m3 && exp == 31) return mant == 0 ? sign * INFINITY : std::nan("");
  if (exp == 0) return sign * std::ldexp(mant, 1 - bias - mant_bits);
  return sign * std::ldexp(1.0 + std::ldexp(mant, -mant_bits), exp - bias);
}

// Checkpoint format version 3: an FP8 table's weight records hold its stored rows (a
// power-of-two fp32 scale, then one code a value; a U8 [rows, dim + 4] tensor in the
// safetensors header), not decoded fp32; the bytes decode to the trained weights bit for bit
// and carry the scale the documented rule gives; the fp32 tables' records stay fp32.
TEST(EmbeddingFp8Mixed, CheckpointsStoreFp8RowsAsBytes) {
  const std::string dir = ::testing::TempDir() + "fp8_ckpt_bytes";
  Scenario s =
      DTypeScenario(2, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.tables[1].dtype = SHARDREC_DTYPE_FLOAT32;
  s.tables[2].dtype = SHARDREC_DTYPE_FP8_E5M2;
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAGRAD;
  s.optimizer.lr = 0.05f;
  const auto saved = TrainAndSave(s, dir);
  ASSERT_FALSE(saved.empty());
  const size_t per_table = saved.size() / s.tables.size();
  const auto manifest = nlohmann::json::parse(ReadAll(dir + "/manifest.json"));
  EXPECT_EQ(manifest.at("format_version").get<int>(), 3);
  std::vector<int64_t> rows_seen(s.tables.size(), 0);
  for (const auto& file : manifest.at("files")) {
    const std::string bytes = ReadAll(dir + "/" + file.at("name").get<std::string>());
    ASSERT_GE(bytes.size(), 8u);
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i)
      len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    const auto header = nlohmann::json::parse(bytes.substr(8, len));
    for (const auto& rec : file.at("records")) {
      if (rec.at("tensor") != "weights") continue;
      size_t t = 0;
      while (s.tables[t].name != rec.at("table").get<std::string>()) ++t;
      const int32_t dtype = s.tables[t].dtype;
      const int32_t dim = s.tables[t].dim;
      const auto& h = header.at(rec.at("key").get<std::string>());
      const int64_t rows = rec.at("shape").at(0).get<int64_t>();
      const int64_t row0 = rec.at("offsets").at(0).get<int64_t>();
      if (!IsFp8Storage(dtype)) {
        EXPECT_EQ(rec.at("dtype"), "float32");
        EXPECT_EQ(h.at("dtype"), "F32");
        continue;
      }
      const bool e4m3 = dtype == SHARDREC_DTYPE_FP8_E4M3;
      EXPECT_EQ(rec.at("dtype"), e4m3 ? "fp8_e4m3" : "fp8_e5m2");
      EXPECT_EQ(h.at("dtype"), "U8");
      EXPECT_EQ(h.at("shape"), nlohmann::json::array({rows, dim + 4}));
      const size_t at = rec.at("byte_range").at(0).get<size_t>();
      ASSERT_EQ(rec.at("byte_range").at(1).get<size_t>() - at,
                static_cast<size_t>(rows) * (dim + 4));
      for (int64_t r = 0; r < rows; ++r) {
        const char* row = bytes.data() + at + static_cast<size_t>(r) * (dim + 4);
        float scale;
        std::memcpy(&scale, row, 4);
        const float* want = saved[t * per_table].data() + (row0 + r) * dim;
        // The documented scale of the decoded row (RoundRowToFp8's rule, from the reference).
        double amax = 0;
        for (int32_t c = 0; c < dim; ++c) amax = std::max(amax, std::fabs(double{want[c]}));
        int k = 0;
        if (amax > 0) {
          k = -126;
          while (k < 111 && amax / std::ldexp(1.0, k) > (e4m3 ? 464.0 : 61440.0)) ++k;
        }
        ASSERT_EQ(scale, std::ldexp(1.0f, k)) << "table " << t << " row " << row0 + r;
        for (int32_t c = 0; c < dim; ++c)
          ASSERT_EQ(static_cast<float>(DecodeCode(static_cast<uint8_t>(row[4 + c]), e4m3) * scale),
                    want[c])
              << "table " << t << " row " << row0 + r << " column " << c;
      }
      rows_seen[t] += rows;
    }
  }
  for (size_t t = 0; t < s.tables.size(); ++t) {
    if (IsFp8Storage(s.tables[t].dtype)) {
      EXPECT_EQ(rows_seen[t], s.tables[t].rows) << t;
    }
  }

  // Serving decodes the records: in memory (AS_TRAINED keeps FP8, FP32 decodes) and through a
  // tier reading rows from the files, a lookup of one id per bag gives the trained rows.
  const int64_t B = 23;  // every row of every table (ids b % rows)
  RefBatch b;
  b.batch_size = B;
  const int32_t feature_table[] = {0, 1, 1, 2};  // StandardScenario's features
  for (int32_t f = 0; f < s.num_features; ++f)
    for (int64_t i = 0; i < B; ++i) {
      b.lengths.push_back(1);
      b.ids.push_back(i % s.tables[feature_table[f]].rows);
    }
  KjtHolder kjt(b, s.num_features, false);
  for (int32_t storage : {SHARDREC_SERVING_AS_TRAINED, SHARDREC_SERVING_FP32}) {
    for (bool tiered : {false, true}) {
      SCOPED_TRACE(std::string(tiered ? "tiered " : "") + "storage " + std::to_string(storage));
      shardrec_serving_tier_t tier = SHARDREC_SERVING_TIER_INIT;
      tier.table = "t2";
      tier.cache_bytes = 1 << 12;
      shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
      o.default_storage = storage;
      o.tiers = tiered ? &tier : nullptr;
      o.num_tiers = tiered ? 1 : 0;
      shardrec_inference_t* inf = nullptr;
      ASSERT_EQ(shardrec_inference_open(dir.c_str(), &o, &inf), SHARDREC_OK)
          << shardrec_last_error();
      int64_t out_dim = 0;
      ASSERT_EQ(shardrec_inference_output_dim(inf, &out_dim), SHARDREC_OK);
      std::vector<float> out(static_cast<size_t>(B * out_dim));
      ASSERT_EQ(shardrec_inference_lookup(inf, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      shardrec_inference_destroy(inf);
      size_t mismatches = 0;
      for (int64_t i = 0; i < B; ++i) {
        int64_t col = 0;
        for (int32_t f = 0; f < s.num_features; ++f) {
          const size_t t = static_cast<size_t>(feature_table[f]);
          const int32_t dim = s.tables[t].dim;
          const float* want = saved[t * per_table].data() + (i % s.tables[t].rows) * dim;
          for (int32_t c = 0; c < dim; ++c) mismatches += out[i * out_dim + col + c] != want[c];
          col += dim;
        }
      }
      EXPECT_EQ(mismatches, 0u);
    }
  }
}

// A checkpoint written before FP8 records existed (format version 1: an FP8 table's weights as
// fp32 records) still loads into the FP8 table, each row encoded (RoundRowToFp8 of the stored
// row), at worlds 1 and 2. Made here from an fp32 run's checkpoint whose manifest names the
// tables FP8, as those libraries wrote it (their records held decoded rows, which encode back to
// the same bytes).
TEST(EmbeddingFp8Mixed, VersionOneCheckpointsOfFp8TablesStillLoad) {
  const std::string dir = ::testing::TempDir() + "fp8_ckpt_v1";
  Scenario s =
      DTypeScenario(2, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  Scenario f32 = s;
  for (RefTable& t : f32.tables) t.dtype = SHARDREC_DTYPE_FLOAT32;
  const auto saved32 = TrainAndSave(f32, dir);
  ASSERT_FALSE(saved32.empty());
  auto manifest = nlohmann::json::parse(ReadAll(dir + "/manifest.json"));
  ASSERT_EQ(manifest.at("format_version").get<int>(), 1);
  for (auto& t : manifest.at("tables")) t["dtype"] = "fp8_e4m3";
  manifest.erase("manifest_xxh3");  // written before the checksum: read as it is
  std::ofstream(dir + "/manifest.json", std::ios::trunc) << manifest.dump(1);
  const size_t per_table = saved32.size() / s.tables.size();
  for (int32_t world : {1, 2}) {
    SCOPED_TRACE("world " + std::to_string(world));
    Scenario w = s;
    w.world = world;
    w.ranks_per_node = world;
    std::vector<std::vector<float>> got;
    ASSERT_EQ(Load(w, dir, false, &got), SHARDREC_OK) << shardrec_last_error();
    for (size_t t = 0; t < s.tables.size(); ++t) {
      std::vector<float> want = saved32[t * per_table];
      for (size_t r = 0; r * s.tables[t].dim < want.size(); ++r)
        RoundRowToFp8(want.data() + r * s.tables[t].dim, s.tables[t].dim, s.tables[t].dtype);
      EXPECT_EQ(std::memcmp(got[t * per_table].data(), want.data(), sizeof(float) * want.size()), 0)
          << "table " << t;
    }
  }
}

// Table export and import of an FP8 table: the export holds the decoded rows (F32); importing it
// at another world size (other row blocks) gives back the same bits, and an fp32 table's export
// imports into an FP8 table with each row encoded (RoundRowToFp8), optimizer state included.
TEST(EmbeddingFp8Mixed, TableImportEncodesEachRow) {
  const std::string dir = ::testing::TempDir() + "fp8_import";
  Scenario s =
      DTypeScenario(2, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAGRAD;
  s.optimizer.lr = 0.05f;
  Scenario f32 = s;
  for (RefTable& t : f32.tables) t.dtype = SHARDREC_DTYPE_FLOAT32;
  const auto saved = TrainAndSave(s, dir + "_ckpt");
  const auto saved32 = TrainAndSave(f32, dir + "_ckpt32");
  ASSERT_FALSE(saved.empty());
  ASSERT_FALSE(saved32.empty());
  const size_t per_table = saved.size() / s.tables.size();
  // Exports: load each checkpoint at world 1 and export every table with its state.
  for (const auto& [sc, suffix] :
       {std::pair{s, std::string("")}, std::pair{f32, std::string("32")}}) {
    Scenario w = sc;
    w.world = 1;
    w.ranks_per_node = 1;
    PlanPtr plan = MakePlan(w);
    ASSERT_NE(plan, nullptr);
    CollPtr c = CreateRank(w, plan.get(), 0, w.seed);
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(shardrec_checkpoint_load(c.get(), (dir + "_ckpt" + suffix).c_str(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    for (const RefTable& t : w.tables)
      ASSERT_EQ(shardrec_checkpoint_export_table(c.get(), t.name.c_str(),
                                                 (dir + "_" + t.name + suffix).c_str(), 1),
                SHARDREC_OK)
          << shardrec_last_error();
  }
  // Imports into FP8 tables at world 4 (ranks_per_node 2): rows split otherwise than at export.
  for (const std::string suffix : {"", "32"}) {
    SCOPED_TRACE("from the " + std::string(suffix.empty() ? "FP8" : "fp32") + " export");
    Scenario w = s;
    w.world = 4;
    PlanPtr plan = MakePlan(w);
    ASSERT_NE(plan, nullptr);
    std::vector<std::vector<float>> got;
    SpawnRanks(w.world, [&](int r) {
      CollPtr c = CreateRank(w, plan.get(), r, w.seed);
      ASSERT_NE(c, nullptr);
      for (const RefTable& t : w.tables)
        ASSERT_EQ(shardrec_checkpoint_import_table(c.get(), t.name.c_str(),
                                                   (dir + "_" + t.name + suffix).c_str(), 1),
                  SHARDREC_OK)
            << shardrec_last_error();
      const auto mine = Snapshot(c.get(), w);  // collective
      if (r == 0) got = mine;
    });
    ASSERT_EQ(got.size(), saved.size());
    const auto& from = suffix.empty() ? saved : saved32;
    for (size_t t = 0; t < s.tables.size(); ++t) {
      std::vector<float> want = from[t * per_table];
      for (size_t row = 0; row * s.tables[t].dim < want.size(); ++row)
        RoundRowToFp8(want.data() + row * s.tables[t].dim, s.tables[t].dim, s.tables[t].dtype);
      EXPECT_EQ(std::memcmp(got[t * per_table].data(), want.data(), sizeof(float) * want.size()), 0)
          << "table " << t << " weights";
      for (size_t k = 1; k < per_table; ++k)  // optimizer state: as exported
        EXPECT_EQ(std::memcmp(got[t * per_table + k].data(), from[t * per_table + k].data(),
                              sizeof(float) * from[t * per_table + k].size()),
                  0)
            << "table " << t << " state " << k;
    }
  }
}

// Dynamic tables do not take FP8 rows yet: creation says so.
TEST(EmbeddingFp8Mixed, DynamicTablesRefuseFp8) {
  shardrec_table_config_t table;
  shardrec_table_config_init(&table, SHARDREC_TABLE_CONFIG_VERSION);
  table.name = "dyn";
  table.rows = 64;
  table.dim = 8;
  table.dtype = SHARDREC_DTYPE_FP8_E4M3;
  shardrec_dynamic_table_config_t dyn;
  shardrec_dynamic_table_config_init(&dyn, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
  table.dynamic = &dyn;
  PlanPtr plan = OneTablePlan(table);
  ASSERT_NE(plan, nullptr);
  shardrec_optimizer_config_t opt;
  shardrec_optimizer_config_init(&opt, SHARDREC_OPTIMIZER_CONFIG_VERSION);
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, &o),
            SHARDREC_EUNSUPPORTED);
  EXPECT_EQ(c, nullptr);
  const std::string msg = shardrec_last_error();
  EXPECT_NE(msg.find("table 'dyn': dynamic tables do not take fp8_e4m3 weights yet"),
            std::string::npos)
      << msg;
}

// Tiered tables do not take FP8 rows yet: creation says so, naming the table.
TEST(EmbeddingFp8Mixed, TieredTablesRefuseFp8) {
  Scenario s =
      DTypeScenario(1, SHARDREC_DTYPE_FP8_E4M3, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string dir = ::testing::TempDir() + "fp8_tier";
  shardrec_table_tier_t tier = SHARDREC_TABLE_TIER_INIT;
  tier.table = "t1";
  tier.dir = dir.c_str();
  tier.cache_bytes = 1 << 16;
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.tiers = &tier;
  o.num_tiers = 1;
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, &o),
            SHARDREC_EUNSUPPORTED);
  EXPECT_EQ(c, nullptr);
  const std::string msg = shardrec_last_error();
  EXPECT_NE(msg.find("table 't1' stores fp8_e4m3 rows: tiered tables do not take FP8 weights"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace shardrec::testing
