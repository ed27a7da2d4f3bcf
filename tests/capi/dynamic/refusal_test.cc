// Dynamic tables through the C API, what must change nothing or be refused: a batch rejected on
// any rank inserts nothing anywhere (row-wise, data-parallel, grid), also when the ranks mix plain
// and pipelined forwards; GPU collections, the full-table accessors, state exports and table
// imports refuse dynamic tables (replica syncs merge them by key: mesh_test.cc); every
// sharding type plans and its JSON round-trips; stats of an unknown table are refused; the plan
// JSON carries the dynamic config; version-2 table config arrays still plan.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/plan.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr float kRtol = 1e-5f, kAtol = 1e-6f;

// How the last rank spoils the forward between two steps.
enum class Spoil { kNegativeLength, kOutputLength };

// The last rank spoils a forward between two steps while every batch is full of new ids: the
// forward fails on every rank, no stat moves, and training then goes on exactly as the reference
// that never saw the batch. A wrong output length reaches the peers in the input exchange (a
// plain forward) or in an agreement after it (a pipelined one, which learns its output buffer
// last): either way the ranks agree before any row is inserted.
void RejectedForwardInsertsNothing(int world, Spoil spoil,
                                   int32_t sharding = SHARDREC_SHARDING_ROW_WISE) {
  SCOPED_TRACE("world " + std::to_string(world) + " sharding " + std::to_string(sharding));
  DynScenario s = MakeDynScenario(world, sharding, 3, 96, 24);
  s.base.ranks_per_node = 2;
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  const RefRun want = RunReference(s, batches, grads);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const int64_t dim = DynOutputDim(s);
  SpawnRanks(world, [&](int r) {
    CollPtr coll = CreateDynCollection(s, plan.get(), world, r);
    ASSERT_NE(coll, nullptr);
    shardrec_embedding_t* c = coll.get();
    const int32_t steps = s.base.steps;
    for (int32_t step = 0; step <= steps; ++step) {
      if (step == 2) {
        const auto t0 = StatsOf(c, "t0"), t1 = StatsOf(c, "t1");
        RefBatch bad = batches[0][r];
        for (int64_t& x : bad.ids) x ^= 0x5a5a5a5a5a5a5a5all;  // ids no step has seen
        const bool spoils = r == world - 1;
        if (spoils && spoil == Spoil::kNegativeLength) bad.lengths[0] = -1;
        KjtHolder kjt(bad, s.base.num_features, false);
        std::vector<float> out(static_cast<size_t>(bad.batch_size * dim));
        const size_t out_len =
            out.size() - (spoils && spoil == Spoil::kOutputLength && !out.empty() ? 1 : 0);
        EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out_len, nullptr),
                  SHARDREC_EINVAL)
            << "rank " << r;
        const auto a0 = StatsOf(c, "t0"), a1 = StatsOf(c, "t1");
        EXPECT_EQ(std::memcmp(&t0, &a0, sizeof(t0)), 0) << "rank " << r;
        EXPECT_EQ(std::memcmp(&t1, &a1, sizeof(t1)), 0) << "rank " << r;
      }
      const RefBatch& batch = batches[std::min(step, steps - 1)][r];
      KjtHolder kjt(batch, s.base.num_features, false);
      std::vector<float> out(static_cast<size_t>(batch.batch_size * dim));
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      std::string first;
      EXPECT_EQ(CountMismatches(out, want.out[step][r], kRtol, kAtol, &first), 0u)
          << "rank " << r << " forward " << step << ": " << first;
      if (step == steps) break;
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << shardrec_last_error();
    }
  });
}

TEST(DynamicTableRefusal, RejectedBatchInsertsNothingOnAnyRank) {
  RejectedForwardInsertsNothing(2, Spoil::kNegativeLength);
}

TEST(DynamicTableRefusal, WrongOutputLengthInsertsNothingOnAnyRank) {
  RejectedForwardInsertsNothing(1, Spoil::kOutputLength);
  RejectedForwardInsertsNothing(2, Spoil::kOutputLength);
}

// A forward whose backward has not run yet, then a forward the ranks refuse together (rank 1's
// output length): the backward that follows fails on every rank instead of training the first
// batch with the second one's gradient, and nothing steps.
TEST(DynamicTableRefusal, RefusedForwardLeavesNoBatchToTrain) {
  DynScenario s = MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, 3, 96, 24);
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  const int64_t dim = DynOutputDim(s);
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), &opt, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    KjtHolder kjt(batches[0][r], s.base.num_features, false);
    std::vector<float> out(static_cast<size_t>(batches[0][r].batch_size * dim));
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    const size_t bad_len = r == 1 ? out.size() - 1 : out.size();
    EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), bad_len, nullptr),
              SHARDREC_EINVAL);
    const auto& g = grads[0][r];
    EXPECT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_EUSAGE);
    EXPECT_NE(std::string(shardrec_last_error()).find("last forward failed"), std::string::npos)
        << shardrec_last_error();
    int64_t steps = -1;
    ASSERT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
    EXPECT_EQ(steps, 0) << "rank " << r;
    // A forward that goes through makes its batch the one to train again.
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  });
}

// A plain forward agrees in its input exchange, a pipelined one after it (its output buffer comes
// last): ranks that mix the two still agree. Rank 0 calls shardrec_embedding_forward, rank 1 the
// pipelined calls. Rank 1's short output refuses the forward on both ranks with nothing inserted;
// then the two train a step to the reference's output on each rank, and a second step with plain
// forwards on both. Row-wise, and data-parallel (whose gather sizes ride on either agreement).
TEST(DynamicTableRefusal, PlainAndPipelinedForwardsOnDifferentRanksAgree) {
  for (int32_t sharding : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_DATA_PARALLEL}) {
    SCOPED_TRACE("sharding " + std::to_string(sharding));
    DynScenario s = MakeDynScenario(2, sharding, 3, 96, 24);
    const auto batches = MakeDynBatches(s);
    const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
    const RefRun want = RunReference(s, batches, grads);
    PlanPtr plan = MakeDynPlan(s);
    ASSERT_NE(plan, nullptr);
    const int64_t dim = DynOutputDim(s);
    SpawnRanks(2, [&](int r) {
      CollPtr coll = CreateDynCollection(s, plan.get(), 2, r);
      ASSERT_NE(coll, nullptr);
      shardrec_embedding_t* c = coll.get();
      for (int32_t step = 0; step < 2; ++step) {
        KjtHolder kjt(batches[step][r], s.base.num_features, false);
        std::vector<float> out(static_cast<size_t>(batches[step][r].batch_size * dim));
        auto forward = [&](size_t out_len) {
          if (r == 0 || step == 1)
            return shardrec_embedding_forward(c, kjt.view(), out.data(), out_len, nullptr);
          EXPECT_EQ(shardrec_embedding_input_dist_start(c, kjt.view(), nullptr), SHARDREC_OK)
              << shardrec_last_error();
          EXPECT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK)
              << shardrec_last_error();
          return shardrec_embedding_forward_distributed(c, out.data(), out_len, nullptr);
        };
        if (step == 0) {
          EXPECT_EQ(forward(r == 1 ? out.size() - 1 : out.size()), SHARDREC_EINVAL) << "rank " << r;
          EXPECT_EQ(StatsOf(c, "t0").size, 0) << "rank " << r;
          EXPECT_EQ(StatsOf(c, "t1").size, 0) << "rank " << r;
        }
        ASSERT_EQ(forward(out.size()), SHARDREC_OK)
            << "rank " << r << " step " << step << ": " << shardrec_last_error();
        std::string first;
        EXPECT_EQ(CountMismatches(out, want.out[step][r], kRtol, kAtol, &first), 0u)
            << "rank " << r << " step " << step << ": " << first;
        const auto& g = grads[step][r];
        ASSERT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_OK)
            << shardrec_last_error();
      }
    });
  }
}

// A data-parallel table gathers its ids only after the agreement, and a node-local one routes
// after it: a refused forward inserts nothing there either.
TEST(DynamicTableRefusal, RejectedForwardInsertsNothingDataParallelAndNodeLocal) {
  RejectedForwardInsertsNothing(2, Spoil::kNegativeLength, SHARDREC_SHARDING_DATA_PARALLEL);
  RejectedForwardInsertsNothing(2, Spoil::kOutputLength, SHARDREC_SHARDING_DATA_PARALLEL);
  RejectedForwardInsertsNothing(4, Spoil::kOutputLength, SHARDREC_SHARDING_GRID);
}

TEST(DynamicTableRefusal, GpuCollectionRefuses) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, 0, 16, 8);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.device_type = SHARDREC_DEVICE_CUDA;
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), nullptr, &o),
            SHARDREC_EUNSUPPORTED);
  EXPECT_NE(std::string(shardrec_last_error()).find("dynamic"), std::string::npos)
      << shardrec_last_error();
  EXPECT_EQ(c, nullptr);
}

// A plan's JSON, its hash, the plan read back from that JSON and that plan's hash.
// Plans one 16 x 4 dynamic table read by one feature with `dyn`, expecting SHARDREC_EINVAL and
// no plan (the message is the caller's to check).
void ExpectOneTablePlanRefused(const shardrec_dynamic_table_config_t& dyn) {
  shardrec_feature_config_t f;
  shardrec_feature_config_init(&f, SHARDREC_FEATURE_CONFIG_VERSION);
  f.name = "f";
  const int32_t reads = 0;
  shardrec_table_config_t t;
  shardrec_table_config_init(&t, SHARDREC_TABLE_CONFIG_VERSION);
  t.name = "t";
  t.rows = 16;
  t.dim = 4;
  t.features = &reads;
  t.num_features = 1;
  t.dynamic = &dyn;
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  shardrec_plan_t* refused = nullptr;
  EXPECT_EQ(shardrec_plan_create(&refused, &t, 1, &f, 1, &topo, nullptr, 0), SHARDREC_EINVAL);
  EXPECT_EQ(refused, nullptr);
}

struct JsonRoundTrip {
  std::string text;
  uint64_t hash = 0, hash_back = 0;
  PlanPtr back;
};
JsonRoundTrip RoundTrip(const shardrec_plan_t* plan) {
  JsonRoundTrip r;
  char* json = nullptr;
  EXPECT_EQ(shardrec_plan_to_json(plan, &json, nullptr), SHARDREC_OK) << shardrec_last_error();
  if (json == nullptr) return r;
  r.text = json;
  shardrec_free(json);
  shardrec_plan_t* back = nullptr;
  EXPECT_EQ(shardrec_plan_from_json(&back, r.text.c_str(), r.text.size()), SHARDREC_OK)
      << shardrec_last_error();
  r.back.reset(back);
  shardrec_plan_hash(plan, &r.hash);
  if (back != nullptr) shardrec_plan_hash(back, &r.hash_back);
  return r;
}

// The planner offers every sharding type for a dynamic table (docs/dynamic-tables.md,
// "Placement"), and each plan's JSON reads back to the same hash with the dynamic config.
TEST(DynamicTableRefusal, EveryShardingTypePlansAndRoundTrips) {
  for (int32_t type : {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_TABLE_ROW_WISE,
                       SHARDREC_SHARDING_TABLE_COLUMN_WISE, SHARDREC_SHARDING_GRID}) {
    DynScenario s = MakeDynScenario(4, type, 0, 16, 8);
    s.base.ranks_per_node = 2;
    s.base.min_partition = 4;
    const std::string what = "sharding " + std::to_string(type);
    PlanPtr plan = MakeDynPlan(s);
    ASSERT_NE(plan, nullptr) << what;
    const JsonRoundTrip r = RoundTrip(plan.get());
    EXPECT_NE(r.text.find("\"dynamic\": {"), std::string::npos) << what << "\n" << r.text;
    EXPECT_EQ(r.hash, r.hash_back) << what;
  }
}

// A hand-written data-parallel plan of a dynamic table makes a collection; the full-table
// accessors, a dynamic table's state export and table import are refused; stats refuse an unknown
// table; the plan's JSON keeps the dynamic config (the admission decay too), and a plan read back
// from it hashes the same.
TEST(DynamicTableRefusal, AccessorsStatsAndPlanJson) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, 0, 16, 8);
  s.dynamic[1].eviction = SHARDREC_EVICTION_TTL;
  s.dynamic[1].ttl_steps = 7;
  s.dynamic[1].admission_threshold = 3;
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const JsonRoundTrip r = RoundTrip(plan.get());
  const std::string& text = r.text;
  EXPECT_NE(
      text.find("\"dynamic\": {\"eviction\": 3, \"admission_threshold\": 3, \"ttl_steps\": 7}"),
      std::string::npos)
      << text;
  char* stats = nullptr;
  ASSERT_EQ(shardrec_plan_stats(plan.get(), &stats, nullptr), SHARDREC_OK) << shardrec_last_error();
  EXPECT_NE(std::string(stats).find("16 (dynamic)"), std::string::npos) << stats;
  shardrec_free(stats);
  EXPECT_EQ(r.hash, r.hash_back);
  // Decaying admission counts: kept in the JSON and the hash (a plan without the decay hashes
  // differently); a negative decay is refused when the plan is made.
  {
    DynScenario d = s;
    d.dynamic[1].admission_decay_steps = 50;
    PlanPtr decaying = MakeDynPlan(d);
    ASSERT_NE(decaying, nullptr);
    const JsonRoundTrip dr = RoundTrip(decaying.get());
    EXPECT_NE(dr.text.find("\"ttl_steps\": 7, \"admission_decay_steps\": 50}"), std::string::npos)
        << dr.text;
    EXPECT_EQ(dr.hash, dr.hash_back);
    EXPECT_NE(dr.hash, r.hash);
    shardrec_dynamic_table_config_t bad;
    shardrec_dynamic_table_config_init(&bad, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
    bad.admission_threshold = 2;
    bad.admission_decay_steps = -1;
    ExpectOneTablePlanRefused(bad);
    EXPECT_NE(std::string(shardrec_last_error()).find("admission_decay_steps -1 must be >= 0"),
              std::string::npos)
        << shardrec_last_error();
  }

  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  // A plan written by hand may shard a dynamic table data-parallel (at world 1 the table-wise
  // shard is also the data-parallel one): the collection takes it.
  {
    std::string dp = text;
    const std::string tw = "\"sharding\": \"table_wise\"";
    dp.replace(dp.find(tw), tw.size(), "\"sharding\": \"data_parallel\"");
    shardrec_plan_t* dp_plan = nullptr;
    ASSERT_EQ(shardrec_plan_from_json(&dp_plan, dp.c_str(), dp.size()), SHARDREC_OK)
        << shardrec_last_error() << "\n"
        << dp;
    PlanPtr dp_ptr(dp_plan);
    shardrec_embedding_t* dp_coll = nullptr;
    EXPECT_EQ(shardrec_embedding_create(&dp_coll, dp_plan, GroupComm(1, 0), nullptr, &o),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr dp_owner(dp_coll);
    EXPECT_EQ(StatsOf(dp_coll, "t0").capacity, 16);
  }
  shardrec_embedding_t* c = nullptr;
  ASSERT_NE(r.back, nullptr);
  ASSERT_EQ(shardrec_embedding_create(&c, r.back.get(), GroupComm(1, 0), nullptr, &o), SHARDREC_OK)
      << shardrec_last_error();
  CollPtr coll(c);
  std::vector<float> w(16 * 8);
  EXPECT_EQ(shardrec_embedding_get_weights(c, "t0", w.data(), w.size()), SHARDREC_EUNSUPPORTED);
  EXPECT_EQ(shardrec_embedding_set_weights(c, "t0", w.data(), w.size()), SHARDREC_EUNSUPPORTED);
  // Table export and import of dynamic tables: table_io_test.cc.
  const auto st = StatsOf(c, "t1");
  EXPECT_EQ(st.size, 0);
  EXPECT_EQ(st.capacity, 16);
  EXPECT_EQ(st.load_factor, 0.0);
  shardrec_dynamic_table_stats_t bad;
  shardrec_dynamic_table_stats_init(&bad, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
  EXPECT_EQ(shardrec_embedding_dynamic_stats(c, "nope", &bad), SHARDREC_ENOTFOUND);
  EXPECT_EQ(shardrec_embedding_dynamic_stats(c, "t0", nullptr), SHARDREC_EINVAL);
}

// shardrec_table_config_t as version 2 of config.h laid it out (before `dynamic`).
struct TableConfigV2 {
  uint32_t version;
  const char* name;
  int64_t rows;
  int32_t dim;
  int32_t pooling;
  int32_t dtype;
  const int32_t* features;
  size_t num_features;
  int32_t init_kind;
  float init_low;
  float init_high;
  const shardrec_optimizer_config_t* optimizer;
  const char* const* feature_names;
  size_t num_feature_names;
};
static_assert(sizeof(TableConfigV2) < sizeof(shardrec_table_config_t));

// A caller built against the version-2 header passes an array of the shorter struct: it plans
// exactly what today's layout plans (fixed tables), read at its own stride.
// The admission counts saturate at 65535, so a higher threshold could never admit an id: refused
// when the plan is made and when a plan's JSON is read; 65535 itself plans.
TEST(DynamicTableRefusal, AdmissionThresholdAboveTheCountsIsRefused) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, 0, 16, 8);
  s.dynamic[1].admission_threshold = 65535;
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const JsonRoundTrip r = RoundTrip(plan.get());
  const std::string key = "\"admission_threshold\": 65535";
  const size_t at = r.text.find(key);
  ASSERT_NE(at, std::string::npos) << r.text;
  std::string text = r.text;
  text.replace(at, key.size(), "\"admission_threshold\": 65536");
  shardrec_plan_t* back = nullptr;
  EXPECT_EQ(shardrec_plan_from_json(&back, text.c_str(), text.size()), SHARDREC_EINVAL);
  EXPECT_EQ(back, nullptr);
  EXPECT_NE(
      std::string(shardrec_last_error()).find("admission threshold 65536 must be in [0, 65535]"),
      std::string::npos)
      << shardrec_last_error();
  for (int32_t threshold : {65536, 100000, INT32_MAX}) {
    shardrec_dynamic_table_config_t d;
    shardrec_dynamic_table_config_init(&d, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
    d.admission_threshold = threshold;
    ExpectOneTablePlanRefused(d);
    EXPECT_NE(std::string(shardrec_last_error()).find("must be in [0, 65535]"), std::string::npos)
        << shardrec_last_error();
  }
}

TEST(DynamicTableRefusal, VersionTwoTableArraysStillPlan) {
  const int32_t f0[] = {0}, f1[] = {1};
  const char* names[] = {"a", "b"};
  shardrec_feature_config_t features[2];
  TableConfigV2 old[2] = {};
  shardrec_table_config_t now[2];
  for (int i = 0; i < 2; ++i) {
    shardrec_feature_config_init(&features[i], SHARDREC_FEATURE_CONFIG_VERSION);
    features[i].name = names[i];
    shardrec_table_config_init(&now[i], SHARDREC_TABLE_CONFIG_VERSION);
    now[i].name = names[i];
    now[i].rows = 10 + 7 * i;
    now[i].dim = 8;
    now[i].features = i == 0 ? f0 : f1;
    now[i].num_features = 1;
    old[i].version = 2;
    old[i].name = names[i];
    old[i].rows = now[i].rows;
    old[i].dim = 8;
    old[i].features = now[i].features;
    old[i].num_features = 1;
  }
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = 2;
  shardrec_plan_t *a = nullptr, *b = nullptr;
  ASSERT_EQ(shardrec_plan_create(&a, now, 2, features, 2, &topo, nullptr, 0), SHARDREC_OK)
      << shardrec_last_error();
  PlanPtr pa(a);
  ASSERT_EQ(shardrec_plan_create(&b, reinterpret_cast<const shardrec_table_config_t*>(old), 2,
                                 features, 2, &topo, nullptr, 0),
            SHARDREC_OK)
      << shardrec_last_error();
  PlanPtr pb(b);
  uint64_t ha = 0, hb = 1;
  shardrec_plan_hash(a, &ha);
  shardrec_plan_hash(b, &hb);
  EXPECT_EQ(ha, hb);
}

}  // namespace
}  // namespace shardrec::testing
