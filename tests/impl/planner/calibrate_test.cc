// planner::Calibrate times the gather with the kernel it is handed (CalibrateOptions::bag_sum:
// the C API hands it the collections' lookup), not with a loop of its own: the bags it passes
// are well formed, the sums land where a lookup writes them, and a slow kernel's figure stays
// within what its own time allows. The shared-memory figures are the probe's it is handed
// (CalibrateOptions::shm_probe: the C API hands it one over its communicators).
#include "impl/planner/calibrate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "impl/core/thread_pool.h"

namespace shardrec::planner {
namespace {

std::atomic<int> calls{0};
std::atomic<bool> well_formed{true};

// Checks the bags, then sums them as the scalar reference would.
void CheckedBagSum(const float* table, int64_t table_rows, int32_t row_floats,
                   const int64_t* offsets, int64_t num_bags, const int64_t* rows, float* out) {
  ++calls;
  if (table == nullptr || row_floats <= 0 || num_bags <= 0 || offsets[0] != 0) well_formed = false;
  for (int64_t b = 0; b < num_bags; ++b) {
    if (offsets[b + 1] <= offsets[b]) well_formed = false;
    for (int32_t c = 0; c < row_floats; ++c) out[b * row_floats + c] = 0.0f;
    for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) {
      if (rows[i] < 0 || rows[i] >= table_rows) {
        well_formed = false;
        continue;
      }
      for (int32_t c = 0; c < row_floats; ++c)
        out[b * row_floats + c] += table[rows[i] * row_floats + c];
    }
  }
}

// A kernel that takes at least 20 ms per call, whatever it is asked to sum.
void SlowBagSum(const float* table, int64_t table_rows, int32_t row_floats, const int64_t* offsets,
                int64_t num_bags, const int64_t* rows, float* out) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CheckedBagSum(table, table_rows, row_floats, offsets, num_bags, rows, out);
}

TEST(Calibrate, TimesTheGatherWithTheKernelItIsGiven) {
  CalibrateOptions o;
  o.ranks_per_node = 2;  // two threads gather at once
  o.budget_ms = 100.0;
  o.bag_sum = &CheckedBagSum;
  calls = 0;
  well_formed = true;
  Calibration fast;
  ASSERT_TRUE(Calibrate(o, &fast).ok());
  // Every gathering thread, every round: two ranks gather at once, on at most one thread per CPU.
  const int threads = std::min(2, UsableCpus());
  EXPECT_GE(calls.load(), 2 * threads);  // the uncounted first round and at least one more
  EXPECT_EQ(calls.load() % threads, 0);
  EXPECT_TRUE(well_formed.load());
  EXPECT_GT(fast.gather_bw, 0.0);

  o.bag_sum = &SlowBagSum;
  calls = 0;
  Calibration slow;
  ASSERT_TRUE(Calibrate(o, &slow).ok());
  EXPECT_TRUE(well_formed.load());
  EXPECT_GE(calls.load(), 2 * threads);  // the slow kernel is what ran
  // A round reads 240000 rows of 256 bytes per thread; with >= 20 ms per call a rank is credited
  // at most 61.44 MB / 20 ms = 3.072 MB per ms: the kernel's time is what was measured. (Not
  // compared with the fast kernel's figure: on a loaded machine that one can fall as low.)
  EXPECT_GT(slow.gather_bw, 0.0);
  EXPECT_LE(slow.gather_bw, 61.44e6 / 20.0);
}

TEST(Calibrate, WithoutAKernelUsesItsOwnLoop) {
  CalibrateOptions o;
  o.budget_ms = 50.0;
  Calibration c;
  ASSERT_TRUE(Calibrate(o, &c).ok());
  EXPECT_GT(c.gather_bw, 0.0);
  EXPECT_GT(c.stream_bw, 0.0);
  EXPECT_FALSE(c.shm.available);  // no probe: not measured
  EXPECT_EQ(c.shm.bw, 0.0);
}

std::atomic<double> probe_budget{-1.0};

Status AvailableProbe(double budget_ms, SharedMemoryFigures* out) {
  probe_budget = budget_ms;
  *out = {true, 1234.5, 0.0042};
  return Status::Ok();
}

// A transport the group did not take: whatever it left in the figures is not reported.
Status UnavailableProbe(double /*budget_ms*/, SharedMemoryFigures* out) {
  *out = {false, 99.0, 1.0};
  return Status::Ok();
}

Status FailingProbe(double /*budget_ms*/, SharedMemoryFigures* /*out*/) {
  return Status::Timeout("probe: peer did not answer");
}

TEST(Calibrate, ReportsTheSharedMemoryProbesFigures) {
  CalibrateOptions o;
  o.budget_ms = 50.0;
  o.shm_probe = &AvailableProbe;
  Calibration c;
  ASSERT_TRUE(Calibrate(o, &c).ok());
  EXPECT_TRUE(c.shm.available);
  EXPECT_EQ(c.shm.bw, 1234.5);
  EXPECT_EQ(c.shm.latency, 0.0042);
  EXPECT_GT(c.loopback_bw, 0.0);         // the loopback figures are still measured
  EXPECT_EQ(probe_budget.load(), 10.0);  // one of five equal shares of the budget

  o.shm_probe = &UnavailableProbe;
  ASSERT_TRUE(Calibrate(o, &c).ok());
  EXPECT_FALSE(c.shm.available);
  EXPECT_EQ(c.shm.bw, 0.0);
  EXPECT_EQ(c.shm.latency, 0.0);

  o.shm_probe = &FailingProbe;
  const Status s = Calibrate(o, &c);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_NE(s.message().find("probe"), std::string::npos);
}

}  // namespace
}  // namespace shardrec::planner
