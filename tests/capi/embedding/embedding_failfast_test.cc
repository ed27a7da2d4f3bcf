// Fail-fast after a peer failure (issue finding 8): once a collective of a collection failed,
// the collection's next call fails at once with SHARDREC_EUSAGE naming the first error, on the
// private input communicator as on the main one, instead of waiting out another timeout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kTimeoutMs = 500;

// Rank 0 trains step 0 with rank 1, then `fail` makes rank 1 miss (or break) the backward
// of step 1; rank 0's backward fails with `first_code`, and its next forward must return
// EUSAGE well before another timeout could pass.
void CheckFailFast(shardrec_status_t first_code, bool abort_peer) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  auto batches = MakeBatches(s, ref);
  auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  shardrec_comm_t* comms[2] = {nullptr, nullptr};
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = kTimeoutMs;
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &o), SHARDREC_OK) << shardrec_last_error();
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  std::atomic<bool> rank0_done{false};
  SpawnRanks(2, [&](int r) {
    // Rank 0 releases rank 1 however it leaves (an ASSERT returns early).
    struct Release {
      std::atomic<bool>* flag;
      bool mine;
      ~Release() {
        if (mine) *flag = true;
      }
    } release{&rank0_done, r == 0};
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), comms[r], &opt, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    std::vector<float> out(static_cast<size_t>(batches[0][r].batch_size * ref.output_dim()));
    for (int step = 0; step < 2; ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, false);
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      if (step == 1) break;  // rank 0 runs this backward below; rank 1 never does
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << shardrec_last_error();
    }
    if (r == 1) {
      if (abort_peer) shardrec_comm_abort(comms[1]);  // rank 0 sees its connections reset
      while (!rank0_done.load()) std::this_thread::sleep_for(milliseconds(10));
      return;
    }
    shardrec_status_t rc =
        shardrec_embedding_backward(c, grads[1][0].data(), grads[1][0].size(), nullptr);
    EXPECT_EQ(rc, first_code) << shardrec_last_error();
    KjtHolder kjt(batches[0][0], s.num_features, false);
    for (int attempt = 0; attempt < 2; ++attempt) {
      const auto start = Clock::now();
      rc = shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr);
      const auto took = Clock::now() - start;
      EXPECT_EQ(rc, SHARDREC_EUSAGE) << shardrec_last_error();
      EXPECT_NE(std::string(shardrec_last_error()).find("earlier error"), std::string::npos)
          << shardrec_last_error();
      EXPECT_LT(took, milliseconds(kTimeoutMs / 5)) << "attempt " << attempt;
    }
  });
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

TEST(EmbeddingFailFast, AfterATimedOutBackwardTheNextForwardFailsAtOnce) {
  CheckFailFast(SHARDREC_ETIMEOUT, false);
}

TEST(EmbeddingFailFast, AfterAPeerFailureTheNextForwardFailsAtOnce) {
  CheckFailFast(SHARDREC_EREMOTE, true);
}

// A forward blocked in its all-to-all (rank 1 never joins it) returns SHARDREC_EABORTED within a
// second of shardrec_comm_abort() on the communicator the collection was built on, from another
// thread, although the timeout is 30 s; rank 1's next forwards then fail promptly.
TEST(EmbeddingFailFast, AbortFromAnotherThreadUnblocksAForwardWithinASecond) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  auto batches = MakeBatches(s, ref);
  PlanPtr plan = MakePlan(s);
  shardrec_comm_t* comms[2] = {nullptr, nullptr};
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 30000;
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &o), SHARDREC_OK) << shardrec_last_error();
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_t* colls[2] = {nullptr, nullptr};
  SpawnRanks(2, [&](int r) {
    ASSERT_EQ(shardrec_embedding_create(&colls[r], plan.get(), comms[r], &opt, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
  });
  ASSERT_TRUE(colls[0] != nullptr && colls[1] != nullptr);
  CollPtr c0(colls[0]), c1(colls[1]);
  std::vector<float> out(static_cast<size_t>(batches[0][0].batch_size * ref.output_dim()));
  KjtHolder kjt(batches[0][0], s.num_features, false);
  shardrec_status_t rc = SHARDREC_OK;
  Clock::time_point returned;
  std::thread blocked([&] {
    rc = shardrec_embedding_forward(c0.get(), kjt.view(), out.data(), out.size(), nullptr);
    returned = Clock::now();
  });
  std::this_thread::sleep_for(milliseconds(300));
  const auto aborted_at = Clock::now();
  EXPECT_EQ(shardrec_comm_abort(comms[0]), SHARDREC_OK);
  blocked.join();
  const auto took = std::chrono::duration_cast<milliseconds>(returned - aborted_at).count();
  std::printf("[abort] embedding forward returned %lld ms after the abort (timeout 30 s)\n",
              static_cast<long long>(took));
  EXPECT_EQ(rc, SHARDREC_EABORTED);
  EXPECT_LE(took, 1000);
  EXPECT_EQ(shardrec_embedding_forward(c0.get(), kjt.view(), out.data(), out.size(), nullptr),
            SHARDREC_EABORTED);
  // So does a started input distribution, at once rather than at its wait, leaving nothing in
  // flight.
  EXPECT_EQ(shardrec_embedding_input_dist_start(c0.get(), kjt.view(), nullptr), SHARDREC_EABORTED);
  EXPECT_EQ(shardrec_embedding_input_dist_wait(c0.get(), nullptr), SHARDREC_EUSAGE);
  // Rank 1: once its side has seen the connection to rank 0 close (a few ms; a call started in
  // that window can miss it and wait for its timeout, a Gloo race documented in
  // docs/launch.md), its next forward fails at once with EREMOTE and the one after with EUSAGE.
  std::this_thread::sleep_for(milliseconds(200));
  KjtHolder kjt1(batches[0][1], s.num_features, false);
  std::vector<float> out1(static_cast<size_t>(batches[0][1].batch_size * ref.output_dim()));
  auto start = Clock::now();
  EXPECT_EQ(shardrec_embedding_forward(c1.get(), kjt1.view(), out1.data(), out1.size(), nullptr),
            SHARDREC_EREMOTE)
      << shardrec_last_error();
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  start = Clock::now();
  EXPECT_EQ(shardrec_embedding_forward(c1.get(), kjt1.view(), out1.data(), out1.size(), nullptr),
            SHARDREC_EUSAGE)
      << shardrec_last_error();
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  EXPECT_EQ(shardrec_embedding_input_dist_start(c1.get(), kjt1.view(), nullptr), SHARDREC_EUSAGE);
  EXPECT_NE(std::string(shardrec_last_error()).find("earlier error"), std::string::npos)
      << shardrec_last_error();
  c0.reset();
  c1.reset();
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

// Creating a collection of a large table spends seconds writing its initial weights; an abort
// from another thread used to wait for all of them (15-18 s for a 60M x 16 table). Creation now
// stops between blocks of rows: here a 1 GiB table (16M x 16) aborted 50 ms in returns EABORTED
// within a second, and *out is untouched.
TEST(EmbeddingFailFast, AbortStopsACreationThatIsInitialisingItsWeights) {
  shardrec_table_config_t table = SHARDREC_TABLE_CONFIG_INIT;
  table.name = "large";
  table.rows = int64_t{16} << 20;
  table.dim = 16;
  PlanPtr plan = OneTablePlan(table);
  ASSERT_NE(plan, nullptr);
  shardrec_comm_t* comm = nullptr;
  ASSERT_EQ(shardrec_comm_create_local_group(&comm, 1, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  int marker = 0;
  shardrec_embedding_t* c = reinterpret_cast<shardrec_embedding_t*>(&marker);
  Clock::time_point aborted_at;
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    aborted_at = Clock::now();
    EXPECT_EQ(shardrec_comm_abort(comm), SHARDREC_OK);
  });
  const shardrec_status_t rc = shardrec_embedding_create(&c, plan.get(), comm, nullptr, nullptr);
  const Clock::time_point returned = Clock::now();
  aborter.join();
  const auto took = std::chrono::duration_cast<milliseconds>(returned - aborted_at).count();
  std::printf("[abort] embedding create returned %lld ms after the abort\n",
              static_cast<long long>(took));
  EXPECT_EQ(rc, SHARDREC_EABORTED) << shardrec_last_error();
  EXPECT_LE(took, 1000);
  EXPECT_EQ(c, reinterpret_cast<shardrec_embedding_t*>(&marker));
  shardrec_comm_destroy(comm);
}

}  // namespace
}  // namespace shardrec::testing
