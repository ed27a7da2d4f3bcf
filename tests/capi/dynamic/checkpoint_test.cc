// Checkpoints of dynamic tables through the C API: a checkpoint saved at world 1, 2 or 4 loads
// under another world and plan (table-wise, row-wise, column-wise) with every row bit-exact
// (probed by a forward of one id per bag; ids, rows and optimizer state compared bit for bit
// through table exports), and training then goes on as the original's; at the
// same plan with eviction and admission it goes on bit-exactly; a corrupt file or too small a
// capacity fails on every rank and changes nothing.
#include "shardrec/checkpoint.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kSteps = 6;  // the stream: a checkpoint after kSaveAt steps
constexpr int32_t kSaveAt = 3;

struct Side {
  int32_t world;
  int32_t sharding;
  int64_t capacity;
  int32_t ranks_per_node = 0;  // 0: the world (one node)
};

// What one run does, in order: create; maybe load `load`; train steps [from, mid); maybe try to
// load `bad` (which must fail); maybe save to `save`; probe; train steps [mid, to).
struct RunSpec {
  std::string load, bad, save;
  int32_t from = 0, mid = 0, to = 0;
  shardrec_status_t bad_code = SHARDREC_OK;  // what loading `bad` returns on every rank
  const shardrec_checkpoint_options_t* load_options = nullptr;
  // Non-empty: right after the load (or the save), each table is exported with its optimizer
  // state to this directory and the files' bytes kept in Result::exports.
  std::string export_dir = "";
};

struct Result {
  std::vector<std::vector<float>> out;  // per trained step, the global output
  std::vector<float> probe;
  int64_t evicted = 0;               // rows evicted over the whole run, every rank and table
  std::vector<int64_t> saved_size;   // per table, its rows when it was saved
  std::vector<std::string> exports;  // RunSpec::export_dir: per table, the export's bytes
};

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Result RunSide(DynScenario s, const Side& side, const Stream& st, const RunSpec& spec) {
  s.base.world = side.world;
  s.base.ranks_per_node = side.ranks_per_node > 0 ? side.ranks_per_node : side.world;
  s.base.sharding = {side.sharding, side.sharding};
  for (RefTable& t : s.base.tables) t.rows = side.capacity;
  const int64_t dim = DynOutputDim(s);
  Result res;
  res.out.assign(static_cast<size_t>(spec.to - spec.from),
                 std::vector<float>(static_cast<size_t>(kGlobalBatch * dim)));
  res.probe.assign(static_cast<size_t>(st.probe.batch_size * dim), 0.0f);
  PlanPtr plan = MakeDynPlan(s);
  if (plan == nullptr) return res;
  std::vector<int64_t> evicted(static_cast<size_t>(side.world), 0);
  std::vector<std::vector<int64_t>> sizes(static_cast<size_t>(side.world),
                                          std::vector<int64_t>(2, 0));
  SpawnRanks(side.world, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), side.world, r, &coll);
    shardrec_embedding_t* c = coll.get();
    if (c == nullptr) return;
    // The collection averages gradients over the ranks: world x the sample's gradient makes
    // every world train on the same sums (an exact scaling by 1, 2 or 4).
    auto train = [&](int32_t step) {
      ForwardSlice(c, st.batches[step], side.world, r, dim,
                   res.out[static_cast<size_t>(step - spec.from)].data());
      BackwardSlice(c, st.grads[step], side.world, r, dim, static_cast<float>(side.world));
    };
    // Every id's row and optimizer state, gathered in id order (the same bytes at any plan).
    auto export_tables = [&] {
      for (const char* table : {"t0", "t1"}) {
        const std::string path = spec.export_dir + "/" + table + ".safetensors";
        ASSERT_EQ(shardrec_checkpoint_export_table(c, table, path.c_str(), 1), SHARDREC_OK)
            << "rank " << r << ": " << shardrec_last_error();
      }
    };
    if (!spec.load.empty()) {
      ASSERT_EQ(shardrec_checkpoint_load(c, spec.load.c_str(), spec.load_options), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
      if (!spec.export_dir.empty()) export_tables();
    }
    for (int32_t step = spec.from; step < spec.mid; ++step) train(step);
    if (!spec.bad.empty()) {
      EXPECT_EQ(shardrec_checkpoint_load(c, spec.bad.c_str(), nullptr), spec.bad_code)
          << "rank " << r << ": " << shardrec_last_error();
    }
    if (!spec.save.empty()) {
      ASSERT_EQ(shardrec_checkpoint_save(c, spec.save.c_str(), nullptr), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
      if (!spec.export_dir.empty() && spec.load.empty()) export_tables();
      for (int t = 0; t < 2; ++t) {
        shardrec_dynamic_table_stats_t stats;
        shardrec_dynamic_table_stats_init(&stats, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
        ASSERT_EQ(shardrec_embedding_dynamic_stats(c, t == 0 ? "t0" : "t1", &stats), SHARDREC_OK);
        sizes[static_cast<size_t>(r)][static_cast<size_t>(t)] = stats.size;
      }
    }
    ForwardSlice(c, st.probe, side.world, r, dim, res.probe.data());
    for (int32_t step = spec.mid; step < spec.to; ++step) train(step);
    for (const char* table : {"t0", "t1"}) {
      shardrec_dynamic_table_stats_t stats;
      shardrec_dynamic_table_stats_init(&stats, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
      ASSERT_EQ(shardrec_embedding_dynamic_stats(c, table, &stats), SHARDREC_OK);
      evicted[static_cast<size_t>(r)] += stats.total_evicted;
    }
  });
  if (!spec.export_dir.empty()) {
    for (const char* table : {"t0", "t1"})
      res.exports.push_back(ReadBytes(spec.export_dir + "/" + table + ".safetensors"));
  }
  res.evicted = std::accumulate(evicted.begin(), evicted.end(), int64_t{0});
  res.saved_size.assign(2, 0);
  for (const auto& per_rank : sizes)
    for (int t = 0; t < 2; ++t)
      res.saved_size[static_cast<size_t>(t)] += per_rank[static_cast<size_t>(t)];
  return res;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tol,
                const std::string& what) {
  std::string first;
  EXPECT_EQ(CountMismatches(got, want, tol, tol == 0.0f ? 0.0f : 1e-6f, &first), 0u)
      << what << ": " << first;
}

std::string Name(const Side& s) {
  const char* kinds[] = {"DP", "TW", "RW", "CW", "TWRW", "TWCW", "GRID"};
  return std::string(kinds[s.sharding]) + "@" + std::to_string(s.world) +
         (s.ranks_per_node > 0 ? "/" + std::to_string(s.ranks_per_node) : "");
}

// Saved at every world of {1, 2, 4} and plan, loaded at every other: the probe (every id's row,
// through a SUM or single-id MEAN bag) is bit-exact, and the continued training equals the
// original's continued training (to the fixed tables' tolerance across worlds: sums of
// gradients run in another order; bit-exact at the same world and plan).
TEST(DynamicCheckpoint, ReshardsAcrossWorldsAndPlans) {
  const std::vector<Side> sides = {{1, SHARDREC_SHARDING_TABLE_WISE, 64},
                                   {2, SHARDREC_SHARDING_ROW_WISE, 64},
                                   {4, SHARDREC_SHARDING_ROW_WISE, 96},
                                   {2, SHARDREC_SHARDING_COLUMN_WISE, 48},
                                   {4, SHARDREC_SHARDING_TABLE_WISE, 64}};
  for (int32_t optimizer : {SHARDREC_OPTIMIZER_ADAM, SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD}) {
    DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, optimizer, 64, 24);
    const Stream st = MakeStream(s, DynOutputDim(s), kSteps);
    for (size_t a = 0; a < sides.size(); ++a) {
      const std::string dir = FreshDir("reshard_" + std::to_string(a));
      RunSpec save_spec{"", "", dir, 0, kSaveAt, kSteps};
      save_spec.export_dir = FreshDir("reshard_export_" + std::to_string(a));
      const Result orig = RunSide(s, sides[a], st, save_spec);
      ASSERT_EQ(orig.exports.size(), 2u);
      for (size_t b = 0; b < sides.size(); ++b) {
        if (b != a && b != (a + 1) % sides.size() && b != (a + 2) % sides.size()) continue;
        const std::string what = "optimizer " + std::to_string(optimizer) + ", saved at " +
                                 Name(sides[a]) + ", loaded at " + Name(sides[b]);
        RunSpec load_spec{dir, "", "", kSaveAt, kSaveAt, kSteps};
        load_spec.export_dir = FreshDir("reshard_export_loaded");
        const Result got = RunSide(s, sides[b], st, load_spec);
        ExpectNear(got.probe, orig.probe, 0.0f, what + ", probe");
        // Every id, row and optimizer state as saved, bit for bit, whatever the plan.
        ASSERT_EQ(got.exports.size(), 2u);
        for (size_t t = 0; t < 2; ++t) {
          EXPECT_GT(orig.exports[t].size(), 100u);
          EXPECT_TRUE(got.exports[t] == orig.exports[t]) << what << ", export of table " << t;
        }
        const float tol = b == a ? 0.0f : 1e-5f;
        for (int32_t step = kSaveAt; step < kSteps; ++step)
          ExpectNear(got.out[static_cast<size_t>(step - kSaveAt)],
                     orig.out[static_cast<size_t>(step)], tol,
                     what + ", step " + std::to_string(step));
      }
    }
  }
}

// The data-parallel and node-local types (two ranks per node) in the same resharding ring with
// row-wise and table-wise, each loaded at its own plan (bit-exact training) and at the next one:
// a data-parallel table saves one copy and loads as any plan, and any plan's checkpoint loads into
// every copy of a data-parallel table; probes bit-exact.
TEST(DynamicCheckpoint, ReshardsDataParallelAndNodeLocal) {
  // Each side loads the previous one's save: DP -> RW -> DP, then DP -> TWRW -> GRID -> TWCW ->
  // TW -> DP.
  const std::vector<Side> sides = {
      {2, SHARDREC_SHARDING_DATA_PARALLEL, 64}, {2, SHARDREC_SHARDING_ROW_WISE, 64},
      {4, SHARDREC_SHARDING_DATA_PARALLEL, 48}, {4, SHARDREC_SHARDING_TABLE_ROW_WISE, 64, 2},
      {4, SHARDREC_SHARDING_GRID, 96, 2},       {4, SHARDREC_SHARDING_TABLE_COLUMN_WISE, 64, 2},
      {1, SHARDREC_SHARDING_TABLE_WISE, 64}};
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_ADAM, 64, 24);
  const Stream st = MakeStream(s, DynOutputDim(s), kSteps);
  for (size_t a = 0; a < sides.size(); ++a) {
    const std::string dir = FreshDir("reshard_dp_" + std::to_string(a));
    const Result orig = RunSide(s, sides[a], st, {"", "", dir, 0, kSaveAt, kSteps});
    for (size_t b : {a, (a + 1) % sides.size()}) {
      const std::string what = "saved at " + Name(sides[a]) + ", loaded at " + Name(sides[b]);
      const Result got = RunSide(s, sides[b], st, {dir, "", "", kSaveAt, kSaveAt, kSteps});
      ExpectNear(got.probe, orig.probe, 0.0f, what + ", probe");
      const float tol = b == a ? 0.0f : 1e-5f;
      for (int32_t step = kSaveAt; step < kSteps; ++step)
        ExpectNear(got.out[static_cast<size_t>(step - kSaveAt)],
                   orig.out[static_cast<size_t>(step)], tol,
                   what + ", step " + std::to_string(step));
    }
  }
}

// At capacity with LRU / LFU / TTL eviction and an admission threshold (once with admission
// counts that decay every 3 forwards, a schedule the load must carry on): the same plan's load
// goes on bit-exactly (last-seen forwards, counts, the forward counter and the admission counts
// are restored).
TEST(DynamicCheckpoint, SamePlanWithEvictionAndAdmissionIsBitExact) {
  const std::pair<int32_t, int64_t> cases[] = {{SHARDREC_EVICTION_LRU, 0},
                                               {SHARDREC_EVICTION_LFU, 0},
                                               {SHARDREC_EVICTION_TTL, 0},
                                               {SHARDREC_EVICTION_LRU, 3}};
  for (const auto& [eviction, decay] : cases) {
    DynScenario s =
        MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 12, 24);
    for (auto& d : s.dynamic) {
      d.eviction = eviction;
      d.admission_threshold = 2;
      d.ttl_steps = 1;
      d.admission_decay_steps = decay;
    }
    const Stream st = MakeStream(s, DynOutputDim(s), kSteps);
    const Side side{2, SHARDREC_SHARDING_ROW_WISE, 12};
    const std::string dir = FreshDir("evict");
    const Result orig = RunSide(s, side, st, {"", "", dir, 0, kSaveAt, kSteps});
    const Result got = RunSide(s, side, st, {dir, "", "", kSaveAt, kSaveAt, kSteps});
    const std::string what =
        "eviction " + std::to_string(eviction) + " decay " + std::to_string(decay);
    EXPECT_GT(orig.evicted, 0) << what;  // the continued run evicts rows
    ExpectNear(got.probe, orig.probe, 0.0f, what + ", probe");
    for (int32_t step = kSaveAt; step < kSteps; ++step)
      ExpectNear(got.out[static_cast<size_t>(step - kSaveAt)], orig.out[static_cast<size_t>(step)],
                 0.0f, what + ", step " + std::to_string(step));
  }
}

// bf16 of x, rounded to nearest even, widened back (what allow_dtype_change stores).
float RoundToBf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &b, 4);
  return x;
}

// The load options apply to dynamic tables: an fp32 Adam checkpoint loads into a bf16 table
// trained with SGD (allow_dtype_change, reset_optimizer_state), streamed (allow_partial_load,
// which dynamic tables stage anyway): t0's rows are the saved rows rounded to bf16, t1's exact.
TEST(DynamicCheckpoint, LoadOptionsConvertAndReset) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAM, 64, 24);
  const Stream st = MakeStream(s, DynOutputDim(s), kSteps);
  const std::string dir = FreshDir("options");
  const Result orig =
      RunSide(s, {2, SHARDREC_SHARDING_ROW_WISE, 64}, st, {"", "", dir, 0, kSaveAt, kSaveAt});
  DynScenario other = s;
  other.base.tables[0].dtype = SHARDREC_DTYPE_BFLOAT16;
  other.base.optimizer.type = SHARDREC_OPTIMIZER_SGD;
  shardrec_checkpoint_options_t o;
  ASSERT_EQ(shardrec_checkpoint_options_init(&o, SHARDREC_CHECKPOINT_OPTIONS_VERSION), SHARDREC_OK);
  RunSpec spec{dir, "", "", kSaveAt, kSaveAt, kSaveAt};
  // Loaded with the options; then again without them, which fails (the dtype and the optimizer
  // differ) and changes nothing.
  spec.load_options = &o;
  spec.bad = dir;
  spec.bad_code = SHARDREC_EINVAL;
  o.allow_dtype_change = 1;
  o.reset_optimizer_state = 1;
  o.allow_partial_load = 1;
  const Result got = RunSide(other, {4, SHARDREC_SHARDING_TABLE_WISE, 64}, st, spec);
  std::vector<float> want = orig.probe;
  const int64_t dim = DynOutputDim(s);
  for (size_t i = 0; i < want.size(); ++i)
    if (static_cast<int64_t>(i) % dim < 8) want[i] = RoundToBf16(want[i]);
  ExpectNear(got.probe, want, 0.0f, "probe");
}

// A flipped byte in a rank file, and a checkpoint with more rows than a new plan's row block has
// slots, fail the load on every rank and change nothing: the run goes on bit-exactly as one that
// never tried.
TEST(DynamicCheckpoint, CorruptFileOrTooSmallCapacityChangesNothing) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAM, 64, 24);
  const Stream st = MakeStream(s, DynOutputDim(s), kSteps);
  const Side big{1, SHARDREC_SHARDING_TABLE_WISE, 64};
  const std::string dir = FreshDir("corrupt");
  (void)RunSide(s, big, st, {"", "", dir, 0, kSteps, kSteps});
  const std::string corrupt = FreshDir("corrupt_copy");
  std::filesystem::copy(dir, corrupt);
  bool flipped = false;
  for (const auto& e : std::filesystem::directory_iterator(corrupt)) {
    if (e.path().extension() != ".safetensors") continue;
    std::FILE* f = std::fopen(e.path().c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, -3, SEEK_END);  // inside the last record: a dynamic table's rows
    const int ch = std::fgetc(f);
    std::fseek(f, -3, SEEK_END);
    std::fputc(ch ^ 0x40, f);
    std::fclose(f);
    flipped = true;
  }
  ASSERT_TRUE(flipped);
  for (const Side& side :
       {Side{2, SHARDREC_SHARDING_ROW_WISE, 64}, Side{2, SHARDREC_SHARDING_ROW_WISE, 8},
        Side{4, SHARDREC_SHARDING_COLUMN_WISE, 8}}) {
    // Capacity 64 reads the corrupt copy; capacity 8 (fewer slots than the saved rows) the
    // valid checkpoint.
    const std::string bad = side.capacity == 64 ? corrupt : dir;
    const shardrec_status_t code = side.capacity == 64 ? SHARDREC_ECORRUPT : SHARDREC_EINVAL;
    const Result want = RunSide(s, side, st, {"", "", "", 0, 2, kSteps});
    const Result got = RunSide(s, side, st, {"", bad, "", 0, 2, kSteps, code});
    ExpectNear(got.probe, want.probe, 0.0f, Name(side) + " probe");
    for (int32_t step = 0; step < kSteps; ++step)
      ExpectNear(got.out[static_cast<size_t>(step)], want.out[static_cast<size_t>(step)], 0.0f,
                 Name(side) + " step " + std::to_string(step));
  }
}

// The manifest's format_version of the checkpoint in dir.
int FormatVersion(const std::string& dir) {
  std::ifstream f(dir + "/manifest.json");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t at = text.find("\"format_version\":");
  if (at == std::string::npos) return -1;
  return std::atoi(text.c_str() + at + std::strlen("\"format_version\":"));
}

// A checkpoint with dynamic tables is format version 2 and one of fixed tables only stays
// version 1 (docs/checkpoint-format.md#versions), so a reader of version 1 refuses the first as
// a newer format; a version this library does not know is refused the same way, on every rank,
// with nothing changed.
TEST(DynamicCheckpoint, FormatVersionMarksDynamicTables) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAM, 64, 24);
  const Stream st = MakeStream(s, DynOutputDim(s), kSteps);
  const Side side{2, SHARDREC_SHARDING_ROW_WISE, 64};
  const std::string dir = FreshDir("version");
  (void)RunSide(s, side, st, {"", "", dir, 0, kSaveAt, kSaveAt});
  EXPECT_EQ(FormatVersion(dir), 2);
  const std::string newer = FreshDir("version_newer");
  std::filesystem::copy(dir, newer);
  {
    std::ifstream f(newer + "/manifest.json");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string key = "\"format_version\": 2";
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << text.substr(0, 200);
    // Version 5 is read too (dynamic tiered tables' store snapshots): 6 is the first newer one.
    text.replace(at, key.size(), "\"format_version\": 6");
    std::ofstream(newer + "/manifest.json", std::ios::trunc) << text;
  }
  const Result want = RunSide(s, side, st, {"", "", "", 0, 2, kSaveAt});
  const Result got = RunSide(s, side, st, {"", newer, "", 0, 2, kSaveAt, SHARDREC_EUNSUPPORTED});
  ExpectNear(got.probe, want.probe, 0.0f, "probe after the refused load");

  DynScenario f = s;
  f.fixed = true;
  for (RefTable& t : f.base.tables) t.rows = 64;
  PlanPtr plan = MakeDynPlan(f);
  ASSERT_NE(plan, nullptr);
  const std::string fixed_dir = FreshDir("version_fixed");
  const shardrec_optimizer_config_t opt = ToCOptimizer(f.base.optimizer);
  SpawnRanks(1, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, r), &opt, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    ASSERT_EQ(shardrec_checkpoint_save(c, fixed_dir.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  });
  EXPECT_EQ(FormatVersion(fixed_dir), 1);
}

// Writes a column-wise checkpoint of world 2 with dynamic tables and, per table, every pool id's
// row (from the probe after the save) and the rows saved, for read_with_safetensors.py --dynamic,
// which reassembles each table's id -> row map with the Python `safetensors` package.
// SHARDREC_DYNAMIC_CHECKPOINT_PY_DIR names the output directory for the Python step.
TEST(DynamicCheckpointPython, WritesCheckpointForPython) {
  const char* env = std::getenv("SHARDREC_DYNAMIC_CHECKPOINT_PY_DIR");
  const std::string dir = env && *env ? std::string(env) : FreshDir("python");
  std::filesystem::create_directories(dir);
  DynScenario s =
      MakeDynScenario(1, SHARDREC_SHARDING_COLUMN_WISE, SHARDREC_OPTIMIZER_ADAM, 64, 24);
  const Stream st = MakeStream(s, DynOutputDim(s), kSteps);
  const Result res = RunSide(s, {2, SHARDREC_SHARDING_COLUMN_WISE, 64}, st,
                             {"", "", dir + "/ckpt", 0, kSteps, kSteps});
  const int64_t dim = DynOutputDim(s), n = st.probe.batch_size;
  for (int t = 0; t < 2; ++t) {
    const std::string name = t == 0 ? "t0" : "t1";
    const int64_t tdim = s.base.tables[static_cast<size_t>(t)].dim, col = t == 0 ? 0 : 8;
    std::vector<float> rows;
    for (int64_t i = 0; i < n; ++i)
      rows.insert(rows.end(), res.probe.begin() + i * dim + col,
                  res.probe.begin() + i * dim + col + tdim);
    const auto& ids = s.pools[static_cast<size_t>(t)];
    std::ofstream(dir + "/" + name + ".ids.i64", std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()),
               static_cast<std::streamsize>(ids.size() * sizeof(int64_t)));
    std::ofstream(dir + "/" + name + ".rows.f32", std::ios::binary)
        .write(reinterpret_cast<const char*>(rows.data()),
               static_cast<std::streamsize>(rows.size() * sizeof(float)));
    std::ofstream(dir + "/" + name + ".size") << res.saved_size[static_cast<size_t>(t)];
    EXPECT_GT(res.saved_size[static_cast<size_t>(t)], 0) << name;
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt/manifest.json"));
}

}  // namespace
}  // namespace shardrec::testing
