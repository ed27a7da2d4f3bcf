// The single-source bodies of a backward from a device gradient (kernels/simt/grad_body.h) on the
// host executors against the host functions: the packing against PackGradients over random plans
// (every rank of a world routes a batch; MEAN, weighted or not, empty bags), bit for bit, and the
// non-finite check against the first non-finite element CheckGradFinite names.
#include "impl/embedding/kernels/simt/grad_body.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "impl/core/simt.h"
#include "impl/embedding/backward.h"
#include "impl/embedding/output_dist.h"
#include "tests/impl/embedding/kernels/route_host_exec.h"
#include "tests/impl/embedding/route_cases.h"
#include "tests/impl/embedding/same_bytes.h"

namespace shardrec::embedding {
namespace {

namespace sb = kernels::simt_body;

using testing::SameBytes;

// The jobs DeviceStep::QueuePack makes: per (destination, unit) with returned rows, in
// PackGradients' order, the other ranks' rows into `send` and this rank's into `self`.
std::vector<sb::PackJob> Jobs(const Layout& l, const RoutedBatch& rb, float* send, float* self) {
  std::vector<sb::PackJob> jobs;
  int64_t k = 0;
  float* others = send;
  float* own = self;
  for (int32_t d = 0; d < l.world; ++d) {
    float*& dst = d == l.rank ? own : others;
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;
      const Unit& unit = l.units[u];
      const Pair& pair = l.pairs[unit.pair];
      sb::PackJob j;
      j.targets = rb.ret_target.data() + k;
      j.dst = dst;
      j.div = pair.mean ? rb.mean_div.data() + static_cast<int64_t>(unit.pair) * rb.batch_size
                        : nullptr;
      j.count = count;
      j.col = pair.out_offset + unit.col_offset;
      j.cols = unit.cols;
      jobs.push_back(j);
      k += count;
      dst += count * unit.cols;
    }
  }
  return jobs;
}

TEST(GradBody, PackGivesPackGradientsBitsOverRandomPlans) {
  std::mt19937 rng(31);
  int plans = 0;
  size_t rows_packed = 0;
  for (int attempt = 0; attempt < 2000 && plans < 150; ++attempt) {
    testing::Case c;
    if (!testing::RandomCase(rng, &c)) continue;
    testing::BatchData d;
    testing::RandomBatch(rng, c, false, &d);
    RoutedBatch rb;
    if (!RouteBatch(ExecContext(), c.layout, RouteOptions{}, d.batch, &rb).ok()) continue;
    ++plans;
    const Layout& l = c.layout;
    const int64_t rows = l.sequence ? rb.num_values : rb.batch_size;
    std::vector<float> grad(static_cast<size_t>(rows * l.output_dim));
    for (float& g : grad) g = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 37.0f;
    if (!grad.empty()) grad[rng() % grad.size()] = -0.0f;  // copied bit for bit
    // Message sizes: the other ranks' rows, then this rank's own.
    size_t send_floats = 0, self_floats = 0;
    for (int32_t dd = 0; dd < l.world; ++dd)
      for (int32_t u : l.units_to_rank[dd])
        (dd == l.rank ? self_floats : send_floats) +=
            static_cast<size_t>(rb.ret_count[u]) * l.units[u].cols;
    std::vector<float> want_send(send_floats, 7.0f), want_self(self_floats, 7.0f);
    PackGradients(ExecContext(), l, rb, grad.data(), want_send.data(), want_self.data());
    std::vector<float> got_send(send_floats, 9.0f), got_self(self_floats, 9.0f);
    const std::vector<sb::PackJob> jobs = Jobs(l, rb, got_send.data(), got_self.data());
    std::vector<int64_t> first{0};
    for (const sb::PackJob& j : jobs) first.push_back(first.back() + j.count);
    sb::PackParams p;
    p.grad = grad.data();
    p.stride = l.output_dim;
    p.num_jobs = static_cast<int64_t>(jobs.size());
    p.jobs = jobs.data();
    p.first_row = first.data();
    simt::HostWarp w(0);
    for (int64_t item = 0; item < first.back(); ++item) sb::PackItem(w, p, item);
    rows_packed += static_cast<size_t>(first.back());
    ASSERT_TRUE(SameBytes(want_send.data(), got_send.data(), 4 * send_floats)) << plans;
    ASSERT_TRUE(SameBytes(want_self.data(), got_self.data(), 4 * self_floats)) << plans;
  }
  EXPECT_GE(plans, 100);
  EXPECT_GE(rows_packed, 1000u);
}

TEST(GradBody, FiniteCheckFindsTheFirstNonFiniteElement) {
  std::mt19937 rng(4);
  for (int round = 0; round < 200; ++round) {
    std::vector<float> x(1 + rng() % 300);
    for (float& v : x) v = static_cast<float>(rng() % 100) - 50.0f;
    int64_t want = -1;
    const int bad = static_cast<int>(rng() % 4);
    for (int k = 0; k < bad; ++k) {
      const size_t i = rng() % x.size();
      x[i] = k % 2 == 0 ? std::nanf("") : -std::numeric_limits<float>::infinity();
      if (want < 0 || static_cast<int64_t>(i) < want) want = static_cast<int64_t>(i);
    }
    int64_t flag = -5;
    sb::FiniteResult result;
    result.inv_first = 12345;  // cleared by the steps
    sb::FiniteParams p;
    p.x = x.data();
    p.n = static_cast<int64_t>(x.size());
    p.flag_value = 3;
    p.flag = &flag;
    p.result = &result;
    sb::HostRouteExec ex;
    sb::FiniteSteps(ex, p);
    EXPECT_EQ(sb::HasMin(result.inv_first) ? sb::MinOf(result.inv_first) : -1, want);
    EXPECT_EQ(flag, want >= 0 ? 3 : 0);
    if (want >= 0) {
      EXPECT_EQ(std::memcmp(&result.value, &x[static_cast<size_t>(want)], 4), 0);
    }
  }
}

}  // namespace
}  // namespace shardrec::embedding
