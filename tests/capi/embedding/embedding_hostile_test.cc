// Hostile input through the public C API (issue findings 1, 6 and 9): sizes that overflow, NaN
// and infinite values, and two threads on one handle. Every rejection is clear, reaches every
// rank, changes nothing, and the next valid step still pairs up across ranks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>

#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

bool BitEqual(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return false;
    if (std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

class EmbeddingHostile : public ::testing::TestWithParam<int32_t> {
 protected:
  // GetParam(): the sharding type of every table (data-parallel only is the case where the old
  // code read a NULL lengths array).
  void SetUp() override {
    s_ = StandardScenario(2, GetParam(), SHARDREC_POOLING_SUM);
    s_.optimizer.type = SHARDREC_OPTIMIZER_ADAGRAD;
    s_.weighted = true;
    s_.steps = 3;
    ReferenceModel ref(s_.num_features, s_.tables, s_.optimizer, s_.seed, s_.world);
    batches_ = MakeBatches(s_, ref);
    grads_ = MakeGrads(s_, batches_, ref.output_dim());
    plan_ = MakePlan(s_);
  }

  // Forward + backward of batch `step` on rank r; returns the forward output.
  std::vector<float> Step(int r, shardrec_embedding_t* c, int step) {
    KjtHolder kjt(batches_[step][r], s_.num_features, false);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    std::vector<float> out(static_cast<size_t>(batches_[step][r].batch_size * dim));
    EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_EQ(
        shardrec_embedding_backward(c, grads_[step][r].data(), grads_[step][r].size(), nullptr),
        SHARDREC_OK)
        << shardrec_last_error();
    return out;
  }

  // Trains step 0, runs `body`, then step 1; checks that the outputs of step 1 equal those of a
  // collection that never saw `body` (so a rejected call changed nothing and ranks stayed paired).
  void Run(const shardrec_embedding_options_t* options,
           const std::function<void(int, shardrec_embedding_t*)>& body) {
    const shardrec_optimizer_config_t opt = ToCOptimizer(s_.optimizer);
    std::vector<std::vector<float>> clean(s_.world), hostile(s_.world);
    for (bool with_body : {false, true}) {
      SpawnRanks(s_.world, [&](int r) {
        shardrec_embedding_t* c = nullptr;
        ASSERT_EQ(shardrec_embedding_create(&c, plan_.get(), GroupComm(s_.world, r), &opt, options),
                  SHARDREC_OK)
            << shardrec_last_error();
        CollPtr coll(c);
        Step(r, c, 0);
        if (with_body) {
          const auto before = Snapshot(c, s_);
          body(r, c);
          EXPECT_TRUE(BitEqual(before, Snapshot(c, s_))) << "rank " << r << " changed state";
        }
        (with_body ? hostile : clean)[r] = Step(r, c, 1);
      });
    }
    for (int r = 0; r < s_.world; ++r)
      EXPECT_EQ(0, std::memcmp(clean[r].data(), hostile[r].data(), clean[r].size() * 4))
          << "rank " << r << ": the step after the rejection differs";
  }

  Scenario s_;
  std::vector<std::vector<RefBatch>> batches_;
  std::vector<std::vector<std::vector<float>>> grads_;
  PlanPtr plan_;
};

// num_features * batch_size wrapped to 0 in the old check, so a batch without lengths or ids
// passed; now the bad rank names the overflow and its peer learns, on both forward paths.
TEST_P(EmbeddingHostile, OverflowingBatchSizeIsRejectedOnEveryRank) {
  Run(nullptr, [&](int r, shardrec_embedding_t* c) {
    for (bool async : {false, true}) {
      SCOPED_TRACE(async ? "input_dist_start" : "forward");
      shardrec_kjt_view_t view = SHARDREC_KJT_VIEW_INIT;
      KjtHolder good(batches_[1][r], s_.num_features, false);
      if (r == 1) {
        view.batch_size = int64_t{1} << 62;  // x 4 features = 2^64, which wrapped to 0
        view.num_features = static_cast<size_t>(s_.num_features);
      } else {
        view = *good.view();
      }
      int64_t dim = 0;
      shardrec_embedding_output_dim(c, &dim);
      std::vector<float> out(static_cast<size_t>(batches_[1][r].batch_size * dim));
      shardrec_status_t rc;
      if (async) {
        rc = shardrec_embedding_input_dist_start(c, &view, nullptr);
        if (rc == SHARDREC_OK) rc = shardrec_embedding_input_dist_wait(c, nullptr);
      } else {
        rc = shardrec_embedding_forward(c, &view, out.data(), out.size(), nullptr);
      }
      EXPECT_EQ(rc, SHARDREC_EINVAL) << "rank " << r;
      const std::string msg = shardrec_last_error();
      EXPECT_NE(msg.find(r == 1 ? "overflows" : "rank 1 rejected"), std::string::npos) << msg;
    }
  });
}

TEST_P(EmbeddingHostile, NonFiniteWeightsAndGradientsAreRejected) {
  Run(nullptr, [&](int r, shardrec_embedding_t* c) {
    // A NaN per-id weight on rank 1.
    RefBatch b = batches_[1][r];
    if (r == 1) b.weights[b.weights.size() / 2] = std::numeric_limits<float>::quiet_NaN();
    KjtHolder kjt(b, s_.num_features, false);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    std::vector<float> out(static_cast<size_t>(b.batch_size * dim));
    EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_EINVAL);
    std::string msg = shardrec_last_error();
    EXPECT_NE(msg.find(r == 1 ? "is not finite" : "rank 1 rejected"), std::string::npos) << msg;
    if (r == 1) {
      EXPECT_NE(msg.find("feature '"), std::string::npos) << msg;
    }
    // An infinite gradient element on rank 0, after a good forward.
    KjtHolder good(batches_[1][r], s_.num_features, false);
    ASSERT_EQ(shardrec_embedding_forward(c, good.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    std::vector<float> grad = grads_[1][r];
    if (r == 0) grad[3] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr), SHARDREC_EINVAL);
    msg = shardrec_last_error();
    EXPECT_NE(msg.find(r == 0 ? "not finite" : "rank 0 rejected"), std::string::npos) << msg;
    if (r == 0) {
      EXPECT_NE(msg.find("sample 0, column 3"), std::string::npos) << msg;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(ShardingTypes, EmbeddingHostile,
                         ::testing::Values(SHARDREC_SHARDING_DATA_PARALLEL,
                                           SHARDREC_SHARDING_ROW_WISE,
                                           SHARDREC_SHARDING_TABLE_WISE));

// With the check off, a NaN weight flows into the output (the documented trade for speed).
TEST(EmbeddingNonFinite, AllowPolicyLetsValuesThrough) {
  Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  s.weighted = true;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  auto batches = MakeBatches(s, ref);
  PlanPtr plan = MakePlan(s);
  shardrec_embedding_options_t o;
  ASSERT_EQ(shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION), SHARDREC_OK);
  EXPECT_EQ(o.non_finite, SHARDREC_NON_FINITE_CHECK);
  o.non_finite = SHARDREC_NON_FINITE_ALLOW;
  shardrec_embedding_t* c = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), nullptr, &o), SHARDREC_OK)
      << shardrec_last_error();
  CollPtr coll(c);
  RefBatch b = batches[0][0];
  ASSERT_GT(b.lengths[0], 0);
  b.weights[0] = std::numeric_limits<float>::quiet_NaN();  // feature 0, sample 0
  KjtHolder kjt(b, s.num_features, false);
  std::vector<float> out(static_cast<size_t>(b.batch_size * ref.output_dim()));
  ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_TRUE(std::isnan(out[0]));
  // An unknown policy value is refused; a version-1 struct (no such field) gets the check.
  o.non_finite = 7;
  EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), nullptr, &o),
            SHARDREC_EINVAL);
  shardrec_embedding_options_t v1;
  ASSERT_EQ(shardrec_embedding_options_init(&v1, 1), SHARDREC_OK);
  EXPECT_EQ(v1.version, 1u);
}

// Tables on ordinary pages compute the same bits as on huge pages; unknown values are refused.
TEST(EmbeddingTableMemory, SmallPagesGiveTheSameResults) {
  Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  auto batches = MakeBatches(s, ref);
  PlanPtr plan = MakePlan(s);
  std::vector<float> outs[2];
  for (int k = 0; k < 2; ++k) {
    shardrec_embedding_options_t o;
    ASSERT_EQ(shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION), SHARDREC_OK);
    EXPECT_EQ(o.table_memory, SHARDREC_TABLE_MEMORY_HUGE_PAGES);
    o.table_memory = k == 0 ? SHARDREC_TABLE_MEMORY_HUGE_PAGES : SHARDREC_TABLE_MEMORY_SMALL_PAGES;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), nullptr, &o), SHARDREC_OK);
    CollPtr coll(c);
    KjtHolder kjt(batches[0][0], s.num_features, false);
    outs[k].resize(static_cast<size_t>(batches[0][0].batch_size * ref.output_dim()));
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), outs[k].data(), outs[k].size(), nullptr),
              SHARDREC_OK);
  }
  EXPECT_EQ(outs[0], outs[1]);
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.table_memory = 9;
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), nullptr, &o),
            SHARDREC_EINVAL);
  // Thread counts: negative, or more than any host has (a pool of 2^20 threads would exhaust
  // the address space on stacks), are refused; 1024 is the largest accepted.
  for (int32_t threads : {-1, 1025, 1 << 20}) {
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.num_threads = threads;
    EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), nullptr, &o),
              SHARDREC_EINVAL)
        << threads;
    EXPECT_NE(std::string(shardrec_last_error()).find("num_threads"), std::string::npos);
    EXPECT_EQ(c, nullptr);
  }
}

// Tables larger than the host's available memory: Linux would map them (overcommit) and the
// process would die writing the initial weights. Creation refuses them with ENOMEM instead, before
// touching any memory, and the communicator stays usable.
TEST(EmbeddingTableMemory, MoreThanTheHostHasIsRefusedBeforeAnyWrite) {
  const uint64_t kb = MemAvailableKiB();
  if (kb == 0) GTEST_SKIP() << "no MemAvailable in /proc/meminfo: the check does not apply here";
  const int32_t dim = 64;
  const uint64_t bytes = kb * 1024 + (uint64_t{1} << 30);  // 1 GiB more than is available
  shardrec_table_config_t table = SHARDREC_TABLE_CONFIG_INIT;
  table.name = "huge";
  table.rows = static_cast<int64_t>(bytes / (sizeof(float) * dim)) + 1;
  table.dim = dim;
  PlanPtr plan = OneTablePlan(table);  // the planner is told there is room
  ASSERT_NE(plan, nullptr);
  int marker = 0;
  shardrec_embedding_t* c = reinterpret_cast<shardrec_embedding_t*>(&marker);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), nullptr, nullptr),
            SHARDREC_ENOMEM);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(std::string(shardrec_last_error()).find("MemAvailable"), std::string::npos)
      << shardrec_last_error();
  // Creation never completed: nothing to destroy, and *out is untouched (set only on success).
  EXPECT_EQ(c, reinterpret_cast<shardrec_embedding_t*>(&marker));
  float v = 1.0f;
  EXPECT_EQ(shardrec_comm_allreduce(GroupComm(1, 0), &v, &v, 1, SHARDREC_DTYPE_FLOAT32,
                                    SHARDREC_REDUCE_SUM, nullptr),
            SHARDREC_OK);
}

// While a mesh sync runs (here: held inside its hook), the mesh and the collection are in use:
// a second thread gets EUSAGE at once, and so does a call back into them from the hook. The hook
// makes the overlap certain instead of timing-dependent.
struct HookState {
  shardrec_comm_t* replica = nullptr;
  shardrec_mesh_t* mesh = nullptr;
  shardrec_embedding_t* coll = nullptr;
  bool probe = false;  // rank 0 probes, rank 1 only averages
  shardrec_status_t from_callback = SHARDREC_OK;
  shardrec_status_t from_thread_coll = SHARDREC_OK;
  shardrec_status_t from_thread_mesh = SHARDREC_OK;
  std::string thread_message;
};

int32_t ProbingHook(void* data, size_t count, int32_t dtype, void* payload) {
  auto* st = static_cast<HookState*>(payload);
  if (st->probe) {
    int64_t steps = 0;
    st->from_callback = shardrec_embedding_num_steps(st->coll, &steps);
    std::thread intruder([st] {
      int64_t n = 0;
      st->from_thread_coll = shardrec_embedding_num_steps(st->coll, &n);
      st->thread_message = shardrec_last_error();
      st->from_thread_mesh = shardrec_mesh_step(st->mesh, st->coll, nullptr);
    });
    intruder.join();
    st->probe = false;
  }
  return shardrec_comm_allreduce(st->replica, data, data, count, dtype, SHARDREC_REDUCE_AVG,
                                 nullptr);
}

TEST(EmbeddingConcurrentUse, SecondThreadOnAHandleGetsEusage) {
  Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakePlan(s);
  std::vector<HookState> states(2);
  SpawnRanks(2, [&](int r) {
    shardrec_mesh_options_t mo;
    shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
    mo.sharding_group_size = 1;  // two replicas of one shard: the hook runs on both ranks
    shardrec_mesh_t* mesh = nullptr;
    ASSERT_EQ(shardrec_mesh_create(&mesh, GroupComm(2, r), &mo), SHARDREC_OK)
        << shardrec_last_error();
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_mesh_embedding_create(&c, mesh, plan.get(), nullptr, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    HookState& st = states[r];
    ASSERT_EQ(shardrec_mesh_replica_comm(&st.replica, mesh), SHARDREC_OK);
    st.mesh = mesh;
    st.coll = c;
    st.probe = r == 0;
    ASSERT_EQ(shardrec_mesh_set_sync_hook(mesh, ProbingHook, &st), SHARDREC_OK);
    EXPECT_EQ(shardrec_mesh_sync(mesh, c, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
        << shardrec_last_error();
    if (r == 0) {
      EXPECT_EQ(st.from_callback, SHARDREC_EUSAGE);
      EXPECT_EQ(st.from_thread_coll, SHARDREC_EUSAGE);
      EXPECT_EQ(st.from_thread_mesh, SHARDREC_EUSAGE);
      EXPECT_NE(st.thread_message.find("in use by another thread"), std::string::npos)
          << st.thread_message;
    }
    // Free again once the sync returned.
    int64_t steps = -1;
    EXPECT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
    shardrec_comm_destroy(st.replica);
    shardrec_embedding_destroy(c);
    shardrec_mesh_destroy(mesh);
  });
}

// Two threads hammering one collection: every call returns OK or EUSAGE, nothing crashes.
TEST(EmbeddingConcurrentUse, HammeringOneHandleNeverCrashes) {
  Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  auto batches = MakeBatches(s, ref);
  auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  shardrec_embedding_t* c = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), nullptr, nullptr),
            SHARDREC_OK);
  CollPtr coll(c);
  std::atomic<int> busy{0}, other{0};
  auto work = [&] {
    KjtHolder kjt(batches[0][0], s.num_features, false);
    std::vector<float> out(static_cast<size_t>(batches[0][0].batch_size * ref.output_dim()));
    for (int i = 0; i < 300; ++i) {
      for (shardrec_status_t rc :
           {shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
            shardrec_embedding_backward(c, grads[0][0].data(), grads[0][0].size(), nullptr)}) {
        if (rc == SHARDREC_EUSAGE) {
          ++busy;
        } else if (rc != SHARDREC_OK) {
          ++other;
        }
      }
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(other.load(), 0);
}

}  // namespace
}  // namespace shardrec::testing
