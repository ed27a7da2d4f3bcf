// The single-source bodies of the data-parallel tables' device backward (kernels/simt/dp_body.h),
// of the counted row phases (kernels/simt/row_phase_body.h) and of the column shards' statistics
// sum (kernels/simt/stats_body.h), on the host executors against the host code: the accumulation
// against AccumulateDataParallel (SparseUpdater's loop) over random plans with data-parallel tables
// (every rank of a world routes a batch; SUM, MEAN with empty bags, sequence, weighted or not) and
// over hot rows, bit for bit; the compaction against the host's touched-row loop, and its gate; the
// counted row phase against optim::PartialRowStats and optim::Apply on the first `count` rows; the
// statistics sum against FullRowStats' order.
#include "impl/embedding/kernels/simt/dp_body.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "impl/core/simt.h"
#include "impl/embedding/dp_accumulate.h"
#include "impl/embedding/gpu/dp.h"
#include "impl/embedding/kernels/simt/row_phase_body.h"
#include "impl/embedding/kernels/simt/stats_body.h"
#include "impl/optim/optimizer.h"
#include "tests/impl/embedding/kernels/route_host_exec.h"
#include "tests/impl/embedding/kernels/simt_host_exec.h"
#include "tests/impl/embedding/route_cases.h"
#include "tests/impl/embedding/same_bytes.h"

namespace shardrec::embedding {
namespace {

using testing::SameBytes;

namespace sb = kernels::simt_body;

// The device steps' scratch in host memory.
struct Scratch {
  std::vector<uint8_t> bytes;
  sb::DpScratch s;
  Scratch(int64_t ids, int64_t keys) {
    void* temp = nullptr;
    bytes.assign(sb::CarveDp(nullptr, ids, keys, 64, &s, &temp), 0xcd);
    sb::CarveDp(bytes.data(), ids, keys, 64, &s, &temp);
  }
};

// The accumulation body over batch `rb`'s data-parallel ids into `block` (pre-filled with
// garbage: the steps clear it), its parameters made as DeviceDataParallel makes them; the tables,
// records and scratch stay for the compaction.
struct DeviceRun {
  DpStaticTables st;
  std::vector<sb::DpPair> pairs;
  std::vector<int64_t> first;
  std::vector<float> block;
  std::unique_ptr<Scratch> scratch;
  sb::DpParams p;

  DeviceRun(const Layout& l, const RoutedBatch& rb, const std::vector<float>& grad) {
    st = MakeDpStaticTables(l, MakeDpBlockLayout(l));
    MakeDpPairs(l, st, rb, rb.dp_offsets.data(), rb.mean_div.data(), &pairs, &first);
    block.assign(l.dp_grad_size, 12345.0f);
    p.grad = grad.data();
    p.stride = l.output_dim;
    p.batch_size = rb.batch_size;
    p.num_pairs = static_cast<int64_t>(pairs.size());
    p.pairs = pairs.data();
    p.pair_first = first.data();
    p.num_ids = static_cast<int64_t>(rb.dp_rows.size());
    p.rows = rb.dp_rows.data();
    p.weights = rb.dp_weights.empty() ? nullptr : rb.dp_weights.data();
    p.pos = rb.dp_pos.empty() ? nullptr : rb.dp_pos.data();
    p.num_tables = static_cast<int64_t>(st.tables.size());
    p.tables = st.tables.data();
    p.key_first = st.key_first.data();
    p.num_keys = st.key_first.back();
    p.dense = block.data();
    p.dense_floats = static_cast<int64_t>(l.dp_grad_size);
    scratch = std::make_unique<Scratch>(p.num_ids, p.num_keys);
    sb::HostExec ex;
    sb::DpAccumulateSteps(ex, p, scratch->s);
  }
};

std::vector<float> RandomGrad(std::mt19937& rng, size_t n) {
  std::vector<float> g(n);
  for (float& v : g) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 37.0f;
  if (!g.empty()) g[rng() % g.size()] = -0.0f;
  return g;
}

TEST(DpBody, AccumulationAndCompactionGiveTheHostsBitsOverRandomPlans) {
  std::mt19937 rng(77);
  int plans = 0;
  size_t ids = 0, touched_rows = 0;
  for (int attempt = 0; attempt < 6000 && plans < 200; ++attempt) {
    testing::Case c;
    if (!testing::RandomCase(rng, &c) || c.layout.dp_tables.empty()) continue;
    testing::BatchData d;
    testing::RandomBatch(rng, c, false, &d);
    RoutedBatch rb;
    if (!RouteBatch(ExecContext(), c.layout, RouteOptions{}, d.batch, &rb).ok()) continue;
    ++plans;
    const Layout& l = c.layout;
    const int64_t rows = l.sequence ? rb.num_values : rb.batch_size;
    const std::vector<float> grad = RandomGrad(rng, static_cast<size_t>(rows * l.output_dim));
    std::vector<float> want(l.dp_grad_size, 0.0f);
    AccumulateDataParallel(l, MakeDpBlockLayout(l), rb, grad.data(), want.data());
    DeviceRun run(l, rb, grad);
    sb::DpParams& p = run.p;
    ids += rb.dp_rows.size();
    ASSERT_TRUE(SameBytes(want.data(), run.block.data(), 4 * want.size()))
        << "plan " << plans << ": " << rb.dp_rows.size() << " ids";
    // Compaction (a rank's block stands in for the all-reduced one): the host's loop.
    const float scale = 1.0f / static_cast<float>(1 + plans % 3);
    const int64_t keys = p.num_keys;
    std::vector<int64_t> rows_out(static_cast<size_t>(keys), -1);
    std::vector<float> grads_out(l.dp_grad_size, -3.0f);
    std::vector<int64_t> counts(p.num_tables, -1);
    int64_t gate = plans % 5 == 0 ? 2 : 0;
    p.scale = scale;
    p.rows_out = rows_out.data();
    p.grads_out = grads_out.data();
    p.counts_out = counts.data();
    p.gate = plans % 2 == 0 ? &gate : nullptr;
    sb::HostExec ex;
    sb::DpCompactSteps(ex, p, run.scratch->s);
    const DpBlockLayout at = MakeDpBlockLayout(l);
    for (size_t k = 0; k < l.dp_tables.size(); ++k) {
      const int32_t t = l.dp_tables[k];
      const int32_t dim = l.plan->tables[t].dim;
      std::vector<int64_t> want_rows;
      std::vector<float> want_grads;
      for (int64_t r = 0; r < l.plan->tables[t].rows; ++r) {
        if (want[at.touch_at[t] + r] == 0.0f) continue;
        want_rows.push_back(r);
        for (int32_t cc = 0; cc < dim; ++cc)
          want_grads.push_back(want[at.grad_at[t] + r * dim + cc] * scale);
      }
      touched_rows += want_rows.size();
      const bool shut = p.gate != nullptr && gate != 0;
      EXPECT_EQ(counts[k], shut ? 0 : static_cast<int64_t>(want_rows.size())) << plans;
      const int64_t* got_rows = rows_out.data() + p.key_first[k];
      const float* got_grads = grads_out.data() + at.grad_at[t];
      ASSERT_TRUE(SameBytes(want_rows.data(), got_rows, 8 * want_rows.size())) << plans;
      ASSERT_TRUE(SameBytes(want_grads.data(), got_grads, 4 * want_grads.size())) << plans;
    }
  }
  EXPECT_GE(plans, 150);
  EXPECT_GE(ids, 1000u);
  EXPECT_GE(touched_rows, 500u);
}

// One data-parallel table of 3 rows read by two MEAN features, 300 samples of up to 12 ids, every
// third id weighted heavily: rows with hundreds of ids, summed in the host's order.
TEST(DpBody, HotRowsGiveTheHostsBits) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 2;
  plan->local_world_size = 2;
  plan->features = {{"a", 1.0f}, {"b", 1.0f}};
  sharding::TableConfig tc;
  tc.name = "hot";
  tc.rows = 3;
  tc.dim = 40;  // more than a warp of columns
  tc.pooling = sharding::PoolingType::kMean;
  tc.features = {0, 1};
  plan->tables.push_back(tc);
  plan->table_plans.push_back(sharding::MakeDataParallel(tc, 2));
  Layout l;
  ASSERT_TRUE(BuildLayout(plan, 1, {optim::OptimizerType::kSgd}, &l).ok());
  std::mt19937 rng(5);
  const int64_t B = 300;
  std::vector<int32_t> lengths(2 * B);
  std::vector<int64_t> values;
  std::vector<float> weights;
  for (auto& len : lengths) {
    len = static_cast<int32_t>(rng() % 13);
    for (int32_t k = 0; k < len; ++k) {
      values.push_back(static_cast<int64_t>(rng() % 3));
      weights.push_back(values.size() % 3 == 0 ? 1e3f : static_cast<float>(rng() % 100) / 9.0f);
    }
  }
  Batch b;
  b.batch_size = B;
  b.num_features = 2;
  b.lengths = lengths.data();
  b.num_lengths = lengths.size();
  b.values = values.data();
  b.values_dtype = DType::kInt64;
  b.num_values = values.size();
  b.weights = weights.data();
  b.num_weights = weights.size();
  RoutedBatch rb;
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{}, b, &rb).ok());
  const std::vector<float> grad = RandomGrad(rng, static_cast<size_t>(B * l.output_dim));
  std::vector<float> want(l.dp_grad_size, 0.0f);
  AccumulateDataParallel(l, MakeDpBlockLayout(l), rb, grad.data(), want.data());
  const DeviceRun run(l, rb, grad);
  EXPECT_GE(rb.dp_rows.size(), 2000u);
  ASSERT_TRUE(SameBytes(want.data(), run.block.data(), 4 * want.size()));
}

// The counted row phases update exactly the first *count rows, as optim::PartialRowStats and
// optim::Apply do on those rows; a count of 0 (a shut gate) changes nothing.
TEST(DpBody, CountedRowPhasesUpdateTheFirstCountRows) {
  for (const auto type : {optim::OptimizerType::kSgd, optim::OptimizerType::kRowWiseAdagrad,
                          optim::OptimizerType::kAdam, optim::OptimizerType::kLamb}) {
    for (const int64_t count : {int64_t{0}, int64_t{3}, int64_t{7}}) {
      SCOPED_TRACE(::testing::Message() << optim::OptimizerName(type) << " count " << count);
      optim::OptimizerConfig config;
      config.type = type;
      config.learning_rate = 0.1f;
      const int64_t rows = 9, max_rows = 7;
      const int32_t cols = 12;
      std::mt19937 rng(3);
      const auto fill = [&](std::vector<float>* v, size_t n) {
        v->resize(n);
        for (float& x : *v) x = static_cast<float>(rng() % 200) / 50.0f;
      };
      std::vector<float> w0, m1, m2, grads;
      fill(&w0, rows * cols);
      const auto specs = optim::StateSpecs(type);
      fill(&m1, rows * cols);
      fill(&m2, rows * cols);
      fill(&grads, max_rows * cols);
      const std::vector<int64_t> list = {4, 0, 8, 2, 5, 1, 7};
      const int ns = optim::NumRowStats(type);
      // Host: the first `count` rows.
      std::vector<float> wh = w0, m1h = m1, m2h = m2;
      auto shard = [&](std::vector<float>& w, std::vector<float>& a, std::vector<float>& b2) {
        optim::ShardParams s;
        s.weights = w.data();
        s.rows = rows;
        s.cols = cols;
        s.stride = cols;
        if (!specs.empty()) s.states.push_back(a.data());
        if (specs.size() > 1) s.states.push_back(b2.data());
        return s;
      };
      optim::ShardParams hs = shard(wh, m1h, m2h);
      const optim::RowUpdate up{std::span<const int64_t>(list.data(), static_cast<size_t>(count)),
                                grads.data()};
      std::vector<float> hstats(static_cast<size_t>(max_rows * ns), 0.0f);
      if (ns > 0) optim::PartialRowStats(ExecContext(), config, 4, hs, up, hstats.data());
      optim::Apply(ExecContext(), config, 4, cols, hs, up, ns > 0 ? hstats.data() : nullptr);
      // Body: launched for max_rows, the count read from "device" memory.
      std::vector<float> wd = w0, m1d = m1, m2d = m2;
      optim::ShardParams ds = shard(wd, m1d, m2d);
      std::vector<float> dstats(static_cast<size_t>(max_rows * ns), 0.0f);
      sb::RowPhaseParams q;
      q.rows = list.data();
      q.grads = grads.data();
      q.count = &count;
      q.max_rows = max_rows;
      q.ns = ns;
      simt::HostWarp hw(0);
      if (ns > 0) {
        q.p = optim::MakeRowParams(config, 4, cols, ds);
        q.stats = dstats.data();
        q.phase = 1;
        for (int64_t i = 0; i < sb::RowPhaseItems(q); ++i) sb::RowPhaseItem(hw, q, i);
      }
      q.p = optim::MakeRowParams(config, 4, cols, ds);
      q.full = ns > 0 ? dstats.data() : nullptr;
      q.phase = 2;
      for (int64_t i = 0; i < sb::RowPhaseItems(q); ++i) sb::RowPhaseItem(hw, q, i);
      EXPECT_TRUE(SameBytes(wh.data(), wd.data(), 4 * wh.size()));
      EXPECT_TRUE(SameBytes(m1h.data(), m1d.data(), 4 * m1h.size()));
      EXPECT_TRUE(SameBytes(m2h.data(), m2d.data(), 4 * m2h.size()));
      if (count == 0) {
        EXPECT_TRUE(SameBytes(w0.data(), wd.data(), 4 * w0.size()));
      }
    }
  }
}

// A column shard's full statistics summed from its sources (own and siblings') in launches of at
// most kMaxSumSources, each after the first adding onto the last: the host's order (from +0, one
// source after another, as SparseUpdater::FullRowStats), over the first *count rows only.
TEST(StatsBody, SourcesAddInTheHostsOrderOverTheCountedRows) {
  std::mt19937 rng(12);
  for (const int sources : {1, 2, 5, 16, 17, 40}) {
    const int64_t K = 2, max_rows = 9, count = 6;
    std::vector<std::vector<float>> src(static_cast<size_t>(sources));
    for (auto& v : src) {
      v.resize(static_cast<size_t>(max_rows * K));
      for (float& x : v) x = static_cast<float>(rng() % 1000) / 7.0f + 1e-3f;
    }
    std::vector<float> want(static_cast<size_t>(max_rows * K), -5.0f);
    for (int64_t k = 0; k < count * K; ++k) {
      float acc = 0.0f;
      for (const auto& v : src) acc += v[static_cast<size_t>(k)];
      want[static_cast<size_t>(k)] = acc;
    }
    std::vector<float> got(static_cast<size_t>(max_rows * K), -5.0f);
    for (int first = 0; first < sources; first += sb::kMaxSumSources) {
      sb::SumSourcesParams p;
      p.num_sources = std::min(sources - first, sb::kMaxSumSources);
      for (int k = 0; k < p.num_sources; ++k) p.sources[k] = src[first + k].data();
      p.accumulate = first > 0 ? 1 : 0;
      p.row_floats = K;
      p.max_rows = max_rows;
      p.count = &count;
      p.dst = got.data();
      sb::HostRouteExec ex;
      sb::SumSourcesSteps(ex, p);
    }
    EXPECT_TRUE(SameBytes(want.data(), got.data(), 4 * want.size())) << sources << " sources";
  }
}

}  // namespace
}  // namespace shardrec::embedding
