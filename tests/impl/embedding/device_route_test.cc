// The single-source routing steps (kernels/simt/route_body.h) run on the host executor through
// RouteWith, against RouteBatch: every output field bit for bit, and every rejection with the
// same message, over random plans of every sharding type, batches, bounds policies and id types.
#include "impl/embedding/device_route.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "impl/sharding/layout.h"
#include "tests/impl/embedding/kernels/route_host_exec.h"

namespace shardrec::embedding {
namespace {

using kernels::simt_body::HostRouteExec;
using kernels::simt_body::RouteParams;

// Host memory as "device" memory. Workspaces are filled with junk before every use, so a step
// that reads memory it did not write (and RouteWith did not clear) shows up as a mismatch.
class HostBackend : public RouteBackend {
 public:
  explicit HostBackend(uint32_t seed) : rng_(seed) {}
  Status Workspace(int which, size_t bytes, void** base) override {
    auto& w = ws_[which];
    w.resize(bytes / 8 + 2);
    for (auto& x : w) x = rng_();
    *base = w.data();
    return Status::Ok();
  }
  Status ToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  Status ToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  Status Count(const RouteParams& p) override {
    HostRouteExec ex;
    kernels::simt_body::RouteCountSteps(ex, p);
    return Status::Ok();
  }
  Status Fill(const RouteParams& p) override {
    HostRouteExec ex;
    kernels::simt_body::RouteFillSteps(ex, p);
    return Status::Ok();
  }

 private:
  std::mt19937_64 rng_;
  std::vector<uint64_t> ws_[2];
};

struct Case {
  std::shared_ptr<sharding::Plan> plan;
  Layout layout;
};

// A random plan over `world` ranks (2 per node when world is 4): every sharding type, SUM/MEAN
// tables, or (sequence) NONE tables of one dim with each feature read by one table at most.
bool RandomCase(std::mt19937& rng, Case* c) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  auto plan = std::make_shared<sharding::Plan>();
  const int world = 1 + pick(4);
  plan->world_size = world;
  plan->local_world_size = world == 4 ? 2 : world;
  const int nodes = world / plan->local_world_size;
  const int nf = 1 + pick(4);
  for (int f = 0; f < nf; ++f) plan->features.push_back({"f" + std::to_string(f), 1.0f});
  const bool sequence = pick(4) == 0;
  const int nt = 1 + pick(4);
  std::vector<int> feature_tables(nf, 0);
  for (int t = 0; t < nt; ++t) {
    sharding::TableConfig tc;
    tc.name = "t" + std::to_string(t);
    tc.rows = 1 + pick(40);
    tc.dim = sequence ? 8 : 8 * (1 + pick(2));
    tc.pooling = sequence
                     ? sharding::PoolingType::kNone
                     : (pick(2) == 0 ? sharding::PoolingType::kSum : sharding::PoolingType::kMean);
    const int f = t < nf ? t : pick(nf);
    if (sequence && feature_tables[f] > 0) continue;
    tc.features = {f};
    ++feature_tables[f];
    if (!sequence && pick(3) == 0 && nf > 1) {
      const int g = pick(nf);
      if (g != f) {
        tc.features.push_back(g);
        ++feature_tables[g];
      }
    }
    sharding::TablePlan tp;
    const int node = pick(nodes);
    switch (pick(7)) {
      case 0:
        tp = sharding::MakeDataParallel(tc, world);
        break;
      case 1:
        tp = sharding::MakeTableWise(tc, pick(world));
        break;
      case 2:
        tp = sharding::MakeRowWise(tc, world);
        break;
      case 3:
        tp = sharding::MakeColumnSplit(tc, sharding::ShardingType::kColumnWise,
                                       sharding::EqualColumnWidths(tc.dim, 4),
                                       std::vector<int32_t>(tc.dim / 4, pick(world)));
        for (auto& r : tp.shards) r.rank = pick(world);
        break;
      case 4:
        tp = sharding::MakeTableRowWise(tc, node, plan->local_world_size);
        break;
      case 5: {
        std::vector<int32_t> ranks(tc.dim / 4);
        for (auto& r : ranks) r = node * plan->local_world_size + pick(plan->local_world_size);
        tp = sharding::MakeColumnSplit(tc, sharding::ShardingType::kTableColumnWise,
                                       sharding::EqualColumnWidths(tc.dim, 4), ranks);
        break;
      }
      default: {
        std::vector<int32_t> widths = sharding::EqualColumnWidths(tc.dim, 4);
        std::vector<int32_t> ns(widths.size());
        for (auto& n : ns) n = pick(nodes);
        tp = sharding::MakeGrid(tc, widths, ns, plan->local_world_size);
        break;
      }
    }
    plan->tables.push_back(tc);
    plan->table_plans.push_back(tp);
  }
  for (int f = 0; f < nf; ++f) {
    if (feature_tables[f] != 0) continue;
    if (sequence) return false;  // every feature must be read
    plan->tables[0].features.push_back(f);
  }
  c->plan = plan;
  const int rank = pick(world);
  return BuildLayout(
             plan, rank,
             std::vector<optim::OptimizerType>(plan->tables.size(), optim::OptimizerType::kSgd),
             &c->layout)
      .ok();
}

struct BatchData {
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids64;
  std::vector<int32_t> ids32;
  std::vector<float> weights;
  Batch batch;
};

// Ids mostly in range of the smallest table reading their feature, some outside any table.
void RandomBatch(std::mt19937& rng, const Case& c, bool bad_ids, BatchData* d) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const auto& plan = *c.plan;
  const int64_t B = pick(6);
  const size_t nf = plan.features.size();
  d->lengths.assign(nf * static_cast<size_t>(B), 0);
  d->ids64.clear();
  d->ids32.clear();
  d->weights.clear();
  for (size_t f = 0; f < nf; ++f) {
    int64_t rows = std::numeric_limits<int64_t>::max();
    for (const auto& t : plan.tables)
      for (int32_t g : t.features)
        if (static_cast<size_t>(g) == f) rows = std::min(rows, t.rows);
    for (int64_t b = 0; b < B; ++b) {
      const int32_t len = pick(5) == 0 ? 0 : pick(6);
      d->lengths[f * static_cast<size_t>(B) + static_cast<size_t>(b)] = len;
      for (int32_t k = 0; k < len; ++k) {
        int64_t x = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
        if (bad_ids && pick(8) == 0) x = pick(2) == 0 ? -1 - pick(3) : rows + 50 + pick(3);
        d->ids64.push_back(x);
        d->ids32.push_back(static_cast<int32_t>(x));
        d->weights.push_back(static_cast<float>(pick(1000)) / 7.0f - 30.0f);
      }
    }
  }
  const bool weighted = pick(2) == 0;
  const bool ids32 = pick(2) == 0;
  Batch& b = d->batch;
  b = Batch{};
  b.batch_size = B;
  b.num_features = static_cast<int64_t>(nf);
  b.lengths = d->lengths.data();
  b.num_lengths = d->lengths.size();
  b.values = ids32 ? static_cast<const void*>(d->ids32.data()) : d->ids64.data();
  b.values_dtype = ids32 ? DType::kInt32 : DType::kInt64;
  b.num_values = d->ids64.size();
  b.weights = weighted ? d->weights.data() : nullptr;
  b.num_weights = weighted ? d->weights.size() : 0;
}

void ExpectSameRoute(const RoutedBatch& want, const RoutedBatch& got, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(want.batch_size, got.batch_size);
  EXPECT_EQ(want.num_values, got.num_values);
  EXPECT_EQ(want.weighted, got.weighted);
  EXPECT_EQ(want.counts_send, got.counts_send);
  EXPECT_EQ(want.send_bytes, got.send_bytes);
  EXPECT_EQ(want.send, got.send);
  EXPECT_EQ(want.self_offset, got.self_offset);
  EXPECT_EQ(want.ret_count, got.ret_count);
  EXPECT_EQ(want.ret_target, got.ret_target);
  EXPECT_EQ(want.ret_floats_from, got.ret_floats_from);
  ASSERT_EQ(want.mean_div.size(), got.mean_div.size());
  EXPECT_EQ(0, std::memcmp(want.mean_div.data(), got.mean_div.data(),
                           4 * want.mean_div.size()));  // bits, not values
  EXPECT_EQ(want.dp_offsets, got.dp_offsets);
  EXPECT_EQ(want.dp_offsets_begin, got.dp_offsets_begin);
  EXPECT_EQ(want.dp_rows, got.dp_rows);
  ASSERT_EQ(want.dp_weights.size(), got.dp_weights.size());
  EXPECT_EQ(0,
            std::memcmp(want.dp_weights.data(), got.dp_weights.data(), 4 * want.dp_weights.size()));
  EXPECT_EQ(want.dp_pos, got.dp_pos);
}

// Both routes on one batch: the same status, and when accepted the same bytes.
void Compare(const Case& c, const RouteTables& tables, const BatchData& d, RouteOptions o,
             HostBackend& be, RoutedBatch* reused, int* accepted, const std::string& what) {
  RoutedBatch want;
  const Status sw = RouteBatch(ExecContext(), c.layout, o, d.batch, &want);
  const Status sg = RouteWith(c.layout, tables, o, d.batch, be, reused);
  ASSERT_EQ(sw.code(), sg.code()) << what << ": " << sw.message() << " | " << sg.message();
  ASSERT_EQ(sw.message(), sg.message()) << what;
  if (!sw.ok()) return;
  ++*accepted;
  ExpectSameRoute(want, *reused, what);
}

TEST(DeviceRoute, HostExecutionMatchesRouteBatchOverRandomPlans) {
  std::mt19937 rng(20261123);
  HostBackend be(7);
  RoutedBatch reused;  // one for every case: every field must be rewritten
  int plans = 0, accepted = 0, rejected_ids = 0;
  int types_seen[sharding::kNumShardingTypes] = {};
  for (int attempt = 0; attempt < 4000 && plans < 300; ++attempt) {
    Case c;
    if (!RandomCase(rng, &c)) continue;
    ++plans;
    for (const auto& tp : c.plan->table_plans) ++types_seen[static_cast<int>(tp.type)];
    const RouteTables tables = BuildRouteTables(c.layout);
    for (int k = 0; k < 4; ++k) {
      BatchData d;
      const bool bad = k >= 2;
      RandomBatch(rng, c, bad, &d);
      for (BoundsPolicy bp : {BoundsPolicy::kError, BoundsPolicy::kClamp, BoundsPolicy::kSkip}) {
        const int before = accepted;
        Compare(c, tables, d, RouteOptions{bp, true}, be, &reused, &accepted,
                "plan " + std::to_string(plans) + " batch " + std::to_string(k) + " policy " +
                    std::to_string(static_cast<int>(bp)));
        if (bp == BoundsPolicy::kError && bad && accepted == before) ++rejected_ids;
        if (HasFatalFailure()) return;
      }
    }
  }
  std::printf("plans %d accepted %d rejected_ids %d\n", plans, accepted, rejected_ids);
  EXPECT_GE(plans, 200);
  EXPECT_GE(accepted, 1000);
  EXPECT_GE(rejected_ids, 50);
  for (int t = 0; t < sharding::kNumShardingTypes; ++t)
    EXPECT_GE(types_seen[t], 10) << sharding::ShardingTypeName(
        static_cast<sharding::ShardingType>(t));
}

// A plan of every kind on four ranks, for the rejection cases.
Case FixedCase(int rank) {
  Case c;
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 4;
  plan->local_world_size = 2;
  plan->features = {{"a", 1.0f}, {"b", 1.0f}, {"c", 1.0f}};
  auto table = [](const char* name, int64_t rows, sharding::PoolingType pooling,
                  std::vector<int32_t> features) {
    sharding::TableConfig t;
    t.name = name;
    t.rows = rows;
    t.dim = 8;
    t.pooling = pooling;
    t.features = std::move(features);
    return t;
  };
  const auto t0 = table("rw", 10, sharding::PoolingType::kMean, {0, 1});
  const auto t1 = table("dp", 6, sharding::PoolingType::kSum, {1});
  const auto t2 = table("grid", 9, sharding::PoolingType::kSum, {2});
  plan->tables = {t0, t1, t2};
  plan->table_plans = {sharding::MakeRowWise(t0, 4), sharding::MakeDataParallel(t1, 4),
                       sharding::MakeGrid(t2, {4, 4}, {0, 1}, 2)};
  c.plan = plan;
  EXPECT_TRUE(BuildLayout(plan, rank,
                          std::vector<optim::OptimizerType>(3, optim::OptimizerType::kAdagrad),
                          &c.layout)
                  .ok());
  return c;
}

TEST(DeviceRoute, RejectionsSayWhatRouteBatchSays) {
  Case c = FixedCase(1);
  const RouteTables tables = BuildRouteTables(c.layout);
  HostBackend be(3);
  RoutedBatch reused;
  int accepted = 0;
  // B = 2: bags a0 a1 b0 b1 c0 c1.
  BatchData d;
  d.lengths = {2, 1, 0, 3, 1, 2};
  d.ids64 = {1, 9, 4, 0, 5, 2, 8, 3, 0};
  d.weights = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto reset = [&] {
    d.batch =
        Batch{2, 3, d.lengths.data(), 6, d.ids64.data(), DType::kInt64, 9, d.weights.data(), 9, {}};
  };
  const RouteOptions err{BoundsPolicy::kError, true};
  reset();
  Compare(c, tables, d, err, be, &reused, &accepted, "accepted");
  EXPECT_EQ(accepted, 1);
  struct Edit {
    const char* what;
    std::function<void()> apply;
    const char* expect;
  };
  const std::vector<Edit> edits = {
      {"negative length", [&] { d.lengths[3] = -1; }, "feature 'b' sample 1: negative length -1"},
      {"two negative lengths", [&] { d.lengths[4] = -2, d.lengths[1] = -3; },
       "feature 'a' sample 1: negative length -3"},
      {"sum", [&] { d.lengths[5] = 3; }, "lengths sum to 10 but num_values is 9"},
      {"nan weight", [&] { d.weights[6] = std::nanf(""); },
       "feature 'c' sample 0 (value position 6): weight nan is not finite"},
      {"two bad weights",
       [&] {
         d.weights[7] = -std::numeric_limits<float>::infinity();
         d.weights[2] = std::numeric_limits<float>::infinity();
       },
       "(value position 2): weight inf"},
      {"id of the dp table", [&] { d.ids64[5] = 6; },
       "feature 'b' sample 1 (value position 5): id 6 is out of range [0, 6) of table 'dp'"},
      {"first pair wins over an earlier position",
       [&] {
         d.ids64[8] = -4;  // pair (c, grid), position 8
         d.ids64[4] = 10;  // pair (b, rw): an earlier pair
         d.ids64[5] = 7;   // pair (b, dp): later than (b, rw)
       },
       "feature 'b' sample 1 (value position 4): id 10 is out of range [0, 10) of table 'rw'"},
      {"weight before id",
       [&] {
         d.ids64[0] = 99;
         d.weights[8] = std::nanf("");
       },
       "weight nan is not finite"},
      {"int32 ids",
       [&] {
         static std::vector<int32_t> ids32;
         ids32.assign(d.ids64.begin(), d.ids64.end());
         ids32[7] = 9;
         d.batch.values = ids32.data();
         d.batch.values_dtype = DType::kInt32;
       },
       "feature 'c' sample 1 (value position 7): id 9 is out of range [0, 9) of table 'grid'"},
      {"fields", [&] { d.batch.num_weights = 3; }, "num_weights is 3 but num_values is 9"},
  };
  for (const Edit& e : edits) {
    BatchData saved = d;
    reset();
    e.apply();
    RoutedBatch want;
    const Status s = RouteBatch(ExecContext(), c.layout, err, d.batch, &want);
    EXPECT_NE(s.message().find(e.expect), std::string::npos) << e.what << ": " << s.message();
    Compare(c, tables, d, err, be, &reused, &accepted, e.what);
    // Unchecked weights: the same batch passes or fails on its ids alone, as in RouteBatch.
    Compare(c, tables, d, RouteOptions{BoundsPolicy::kSkip, false}, be, &reused, &accepted,
            std::string(e.what) + " (weights unchecked)");
    d = saved;
  }
}

}  // namespace
}  // namespace shardrec::embedding
