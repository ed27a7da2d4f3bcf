// The single-source routing steps (kernels/simt/route_body.h) run on the host executor through
// RouteWith, against RouteBatch: every output field bit for bit, and every rejection with the
// same message, over random plans of every sharding type, batches, bounds policies and id types.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "impl/embedding/gpu/route.h"
#include "impl/sharding/layout.h"
#include "tests/impl/embedding/kernels/route_host_exec.h"
#include "tests/impl/embedding/route_cases.h"

namespace shardrec::embedding {
namespace {

using testing::BatchData;
using testing::Case;
using testing::ExpectSameRoute;
using testing::RandomBatch;
using testing::RandomCase;

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
  Status Wait() override { return Status::Ok(); }
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
  std::vector<uint64_t> ws_[3];  // 2: RouteBackend::Tables' default upload
};

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
