// The single-source kernel bodies (impl/embedding/kernels/simt, impl/optim/row_body.h) executed on
// the CPU through the host warp API, against the CPU twins, bit for bit: pooled and sequence
// lookups (fp32/fp16/bf16, weighted or not, every width from 1 column to several warp slices,
// empty, short and long bags, all jobs of a rank in one launch), the backward's grouping and
// per-row sums (short and hot rows, several runs), the fused update of every optimizer with
// every weight dtype, weight-decay mode and rounding mode, and the two-phase update of column
// shards. Built with -ffp-contract=off like the twins (simt_contract_test covers contraction).
#include "impl/core/simt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "impl/core/half.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/simt/segment_order.h"
#include "impl/optim/optimizer.h"
#include "impl/optim/row_body.h"
#include "tests/impl/embedding/kernels/simt_fixtures.h"
#include "tests/impl/embedding/kernels/simt_runner.h"

namespace shardrec::embedding::kernels {
namespace {

using simt_body::DeviceStatus;

bool SameBits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

TEST(SimtWarp, TeamSumFollowsTheSharedCombineOrder) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int g : {1, 2, 4, 8, 16, 32}) {
    simt::HostTeam t(g, 0);
    simt::HostTeam::Reg<float> r;
    float a[32] = {};
    for (int l = 0; l < g; ++l) a[l] = r[l] = u(rng) * std::pow(10.0f, static_cast<float>(l % 7));
    EXPECT_EQ(t.Sum(r), simt::CombineLanes(a, g)) << g;
    EXPECT_EQ(t.Broadcast(r, g - 1), r[g - 1]);
  }
}

// A team of TeamSizeForCols(cols) lanes reduces a row of squares to the bits of the 32-lane order.
TEST(SimtWarp, NarrowTeamsGiveTheThirtyTwoLaneOrder) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(0.0f, 3.0f);
  for (int cols : {1, 3, 4, 5, 8, 17, 31, 64, 100, 128, 129, 300, 1000}) {
    std::vector<float> x(cols);
    for (float& v : x) v = u(rng) * u(rng);
    float ref[32] = {};
    for (int c = 0; c < cols; ++c) ref[simt::LaneOfColumn(c)] += x[c];
    const float want = simt::CombineLanes(ref, 32);
    const int g = simt::TeamSizeForCols(cols);
    simt::HostTeam t(g, 0);
    simt::HostTeam::Reg<float> acc;
    t.ForEachLane([&](int l) {
      float s = 0.0f;
      for (int q = l; q < (cols + 3) / 4; q += g)
        for (int c = 4 * q; c < 4 * q + 4 && c < cols; ++c) s = s + x[c];
      acc[l] = s;
    });
    EXPECT_EQ(t.Sum(acc), want) << cols;
  }
}

// The level-by-level tree is the recursive one: left = the largest power of two below m.
float TreeRef(const std::vector<float>& p, size_t lo, size_t m) {
  if (m == 1) return p[lo];
  size_t h = 1;
  while (h * 2 < m) h *= 2;
  return TreeRef(p, lo, h) + TreeRef(p, lo + h, m - h);
}

TEST(SimtSegmentOrder, TreeLevelsEqualTheRecursiveTree) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t m = 1; m <= 70; ++m) {
    std::vector<float> p(m);
    for (float& v : p) v = u(rng) * 1000.0f;
    std::vector<float> q = p;
    simt_body::TreeCombine(q.data(), static_cast<int64_t>(m), 1);
    EXPECT_EQ(q[0], TreeRef(p, 0, m)) << m;
  }
  EXPECT_EQ(simt_body::HotChunks(32), 0);
  EXPECT_EQ(simt_body::HotChunks(33), 2);
  EXPECT_EQ(simt_body::SegmentChunks(1000), 32);
}

// ---- Lookup ---------------------------------------------------------------------------------

const int32_t kWidths[] = {1, 3, 4, 7, 8, 16, 17, 32, 64, 100, 128, 129, 256, 300, 520};

TEST(SimtLookup, PooledBagsEqualTheCpuTwinBitForBit) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int32_t cols : kWidths) {
      Table table(37, cols, cols + 3, dt, 7);
      // Short bags, empty bags, and a few long ones (several id loads per team).
      Bags bags = MakeBags(45, 9, 37, 11 + cols, /*long_every=*/10, /*long_len=*/70);
      for (bool weighted : {false, true}) {
        const int64_t stride = cols + 5;
        std::vector<float> twin(bags.num_bags() * stride, -7.0f), simt_out = twin;
        LookupJob job{table.View(), bags.Run(weighted), twin.data(), stride};
        ASSERT_TRUE(Lookup(ExecContext(), std::span<const LookupJob>(&job, 1)).ok());
        job.out = simt_out.data();
        DeviceStatus st;
        EXPECT_EQ(simt_body::RunLookup(std::span<const LookupJob>(&job, 1), &st), 1);
        EXPECT_EQ(st.code, simt_body::kStatusOk);
        EXPECT_TRUE(SameBits(twin.data(), simt_out.data(), twin.size() * 4))
            << DTypeName(dt) << " cols " << cols << " weighted " << weighted;
      }
    }
  }
}

TEST(SimtLookup, SequenceRowsEqualTheCpuTwinBitForBit) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int32_t cols : kWidths) {
      Table table(20, cols, cols, dt, 8);
      Bags ids = MakeBags(1, 60, 20, 5, 0, 0);  // one bag: its ids become sequence rows
      for (bool weighted : {false, true}) {
        BagRun run{nullptr, static_cast<int64_t>(ids.rows.size()), ids.rows.data(),
                   weighted ? ids.weights.data() : nullptr, 3 * cols};
        std::vector<float> twin((ids.rows.size() + 3) * cols, 9.0f), simt_out = twin;
        LookupJob job{table.View(), run, twin.data(), cols};
        ASSERT_TRUE(Lookup(ExecContext(), std::span<const LookupJob>(&job, 1)).ok());
        job.out = simt_out.data();
        simt_body::RunLookup(std::span<const LookupJob>(&job, 1), nullptr);
        EXPECT_TRUE(SameBits(twin.data(), simt_out.data(), twin.size() * 4))
            << DTypeName(dt) << " cols " << cols;
      }
    }
  }
}

// Tables of mixed widths and dtypes, runs placed at different io offsets: one launch, and the
// twin's bits.
TEST(SimtLookup, EveryJobOfARankGoesIntoOneLaunch) {
  std::vector<Table> tables;
  std::vector<Bags> bags;
  const int32_t dims[] = {4, 16, 64, 128, 200, 8};
  const DType types[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  for (int t = 0; t < 6; ++t) {
    tables.emplace_back(50, dims[t], dims[t], types[t % 3], 20 + t);
    bags.push_back(MakeBags(30 + t, 6, 50, 40 + t, 9, 40));
  }
  const int64_t out_stride = 520;
  std::vector<float> twin(200 * out_stride, 1.5f), simt_out = twin;
  std::vector<LookupJob> jobs;
  int64_t at = 0;
  for (int t = 0; t < 6; ++t) {
    BagRun run = bags[t].Run(t % 2 == 0);
    run.io_offset = at * out_stride + 7 * t;
    jobs.push_back(LookupJob{tables[t].View(), run, twin.data(), out_stride});
    at += run.num_bags;
  }
  ASSERT_TRUE(Lookup(ExecContext(), jobs).ok());
  for (LookupJob& j : jobs) j.out = simt_out.data();
  EXPECT_EQ(simt_body::RunLookup(jobs, nullptr), 1);
  EXPECT_TRUE(SameBits(twin.data(), simt_out.data(), twin.size() * 4));
}

// A row outside the shard is never read: it is left out and reported through the status block.
TEST(SimtLookup, AnOutOfRangeRowIsReportedNotRead) {
  Table table(10, 8, 8, DType::kFloat32, 1);
  std::vector<int64_t> offsets = {0, 2, 5};
  std::vector<int64_t> rows = {1, 2, 3, 10, -4};
  std::vector<float> out(16, 0.0f);
  LookupJob job{table.View(), BagRun{offsets.data(), 2, rows.data(), nullptr, 0}, out.data(), 8};
  DeviceStatus st;
  simt_body::RunLookup(std::span<const LookupJob>(&job, 1), &st);
  EXPECT_EQ(st.code, simt_body::kStatusRowOutOfRange);
  EXPECT_EQ(simt_body::FirstPosition(st), 3u);
  for (int c = 0; c < 8; ++c) EXPECT_EQ(out[8 + c], table.At(3, c));
}

// ---- Backward -------------------------------------------------------------------------------

TEST(SimtBackward, AggregatedRowsEqualTheCpuTwinBitForBit) {
  for (int32_t cols : {1, 5, 16, 64, 100, 130, 300}) {
    for (bool weighted : {false, true}) {
      BackwardCase bc(cols, weighted, 100 + cols);
      const int64_t n = bc.num_ids();
      std::vector<uint8_t> ws(BackwardWorkspaceBytes(ExecContext(), n, cols, 0));
      int64_t num_unique = 0;
      ASSERT_TRUE(GroupRows(ExecContext(), bc.runs, ws.data(), ws.size(), &num_unique).ok());
      std::vector<int64_t> twin_rows(num_unique);
      std::vector<float> twin_grads(num_unique * cols);
      ASSERT_TRUE(AggregateGrads(ExecContext(), bc.runs, bc.grads.data(), bc.stride, cols, 0.25f,
                                 ws.data(), twin_rows.data(), twin_grads.data())
                      .ok());
      std::vector<int64_t> rows(n, -1);
      std::vector<float> grads(n * cols, 0.0f);
      simt_body::RowSink sink;
      sink.unique_out = rows.data();
      sink.grads_out = grads.data();
      simt_body::SimtBackward sb;
      sb.Run(bc.runs, 40, bc.grads.data(), bc.stride, cols, 0.25f, sink);
      ASSERT_EQ(sb.mem.num_unique, num_unique);
      rows.resize(num_unique);
      EXPECT_EQ(rows, twin_rows);
      EXPECT_TRUE(SameBits(grads.data(), twin_grads.data(), twin_grads.size() * 4))
          << "cols " << cols << " weighted " << weighted;
      // The hot rows really went through the chunk tree.
      EXPECT_GT(sb.mem.hot_off[n], 0);
    }
  }
}

TEST(SimtBackward, FusedUpdateEqualsTheCpuTwinForEveryOptimizerAndDtype) {
  int checked = 0;
  for (int type = 0; type < optim::kNumOptimizerTypes; ++type) {
    for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (bool sr : {false, true}) {
        if (sr && dt == DType::kFloat32) continue;
        for (auto mode : {optim::WeightDecayMode::kNone, optim::WeightDecayMode::kL2,
                          optim::WeightDecayMode::kDecoupled}) {
          for (int32_t cols : {3, 16, 64, 130}) {
            optim::OptimizerConfig cfg;
            cfg.type = static_cast<optim::OptimizerType>(type);
            cfg.learning_rate = 0.05f;
            cfg.eps = 1e-3f;
            cfg.weight_decay = mode == optim::WeightDecayMode::kNone ? 0.0f : 0.01f;
            cfg.weight_decay_mode = mode;
            cfg.stochastic_rounding = sr;
            cfg.seed = 77;
            BackwardCase bc(cols, type % 2 == 0, 500 + cols + type);
            Shard twin(cfg, dt, 40, cols, 9), simt_shard = twin;
            for (int64_t step = 1; step <= 2; ++step) {
              const int64_t n = bc.num_ids();
              const int ns = optim::NumRowStats(cfg.type);
              std::vector<uint8_t> ws(BackwardWorkspaceBytes(ExecContext(), n, cols, ns));
              int64_t num_unique = 0;
              ASSERT_TRUE(
                  GroupRows(ExecContext(), bc.runs, ws.data(), ws.size(), &num_unique).ok());
              ASSERT_TRUE(FusedBackward(ExecContext(), bc.runs, bc.grads.data(), bc.stride, 0.5f,
                                        cfg, step, cols, twin.p, ws.data())
                              .ok());
              simt_body::RowSink sink;
              sink.fused = true;
              sink.params = optim::MakeRowParams(cfg, step, cols, simt_shard.p);
              simt_body::SimtBackward sb;
              sb.Run(bc.runs, 40, bc.grads.data(), bc.stride, cols, 0.5f, sink);
            }
            EXPECT_TRUE(twin == simt_shard)
                << optim::OptimizerName(cfg.type) << " " << DTypeName(dt) << " sr " << sr
                << " decay " << int(mode) << " cols " << cols;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 6 * 5 * 3 * 4);
}

// The gate of a backward agreed on the device (GateSteps between the grouping and the row steps):
// shut, the fused update changes no weight or state and the aggregation writes no row, hot rows
// included (their chunks never reach the tree); open, both equal the ungated steps; the count
// copied for device readers is the unique rows, or 0 when shut.
TEST(SimtBackward, AShutGateUpdatesNothingAndAnOpenOneChangesNothing) {
  optim::OptimizerConfig cfg;
  cfg.type = optim::OptimizerType::kAdam;
  cfg.learning_rate = 0.05f;
  for (int32_t cols : {16, 130}) {
    BackwardCase bc(cols, true, 900 + cols);
    const Shard start(cfg, DType::kFloat32, 40, cols, 9);
    Shard ungated = start, open = start, shut = start;
    const auto run = [&](Shard& sh, const int64_t* gate, int64_t* count) {
      simt_body::RowSink sink;
      sink.fused = true;
      sink.params = optim::MakeRowParams(cfg, 1, cols, sh.p);
      simt_body::SimtBackward sb;
      sb.Run(bc.runs, 40, bc.grads.data(), bc.stride, cols, 0.5f, sink, gate, count);
      return sb.mem.num_unique;
    };
    const int64_t zero = 0, one = 1;
    int64_t open_count = -1, shut_count = -1;
    const int64_t unique = run(ungated, nullptr, nullptr);
    run(open, &zero, &open_count);
    run(shut, &one, &shut_count);
    EXPECT_TRUE(ungated == open) << cols;
    EXPECT_TRUE(shut == start) << cols;
    EXPECT_FALSE(ungated == start) << cols;
    EXPECT_EQ(open_count, unique);
    EXPECT_EQ(shut_count, 0);
    // Aggregation behind a shut gate writes nothing.
    const int64_t n = bc.num_ids();
    std::vector<int64_t> rows(static_cast<size_t>(n), -9);
    std::vector<float> grads(static_cast<size_t>(n * cols), -9.0f);
    simt_body::RowSink agg;
    agg.unique_out = rows.data();
    agg.grads_out = grads.data();
    simt_body::SimtBackward sb;
    sb.Run(bc.runs, 40, bc.grads.data(), bc.stride, cols, 0.5f, agg, &one, nullptr);
    for (int64_t r : rows) EXPECT_EQ(r, -9);
    for (float g : grads) EXPECT_EQ(g, -9.0f);
  }
}

// Column shards: phase 1 on each shard, statistics summed over the row, phase 2: the team bodies
// equal optim::PartialRowStats and optim::Apply.
TEST(SimtBackward, TwoPhaseUpdateOfColumnShardsEqualsTheCpuTwin) {
  for (auto type :
       {optim::OptimizerType::kRowWiseAdagrad, optim::OptimizerType::kPartialRowWiseAdam,
        optim::OptimizerType::kLamb, optim::OptimizerType::kAdam}) {
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
      optim::OptimizerConfig cfg;
      cfg.type = type;
      cfg.learning_rate = 0.1f;
      cfg.weight_decay = 0.02f;
      cfg.weight_decay_mode = optim::WeightDecayMode::kL2;
      const int32_t cols = 37, full_dim = 100;
      Shard twin(cfg, dt, 30, cols, 4), simt_shard = twin;
      std::vector<int64_t> rows = {0, 3, 4, 17, 29};
      std::vector<float> g(rows.size() * cols);
      for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.7f * static_cast<float>(i));
      const int ns = optim::NumRowStats(type);
      std::vector<float> stats(rows.size() * 2, 0.0f), simt_stats = stats;
      optim::RowUpdate up{rows, g.data()};
      if (ns > 0) optim::PartialRowStats(ExecContext(), cfg, 3, twin.p, up, stats.data());
      const optim::RowParams rp = optim::MakeRowParams(cfg, 3, full_dim, simt_shard.p);
      const int gsize = simt::TeamSizeForCols(cols);
      for (size_t u = 0; u < rows.size() && ns > 0; ++u) {
        simt::HostTeam t(gsize, 0);
        const optim::RowStats st = optim::RowPhase1(t, rp, rows[u], g.data() + u * cols);
        simt_stats[u * ns] = st.v0;
        if (ns > 1) simt_stats[u * ns + 1] = st.v1;
      }
      EXPECT_TRUE(SameBits(stats.data(), simt_stats.data(), stats.size() * 4));
      // The other column shards' statistics arrive and are added in shard order.
      for (float& s : stats) s = s + 1.25f;
      optim::Apply(ExecContext(), cfg, 3, full_dim, twin.p, up, ns > 0 ? stats.data() : nullptr);
      for (size_t u = 0; u < rows.size(); ++u) {
        simt::HostTeam t(gsize, 0);
        optim::RowStats st;
        if (ns > 0) st.v0 = stats[u * ns];
        if (ns > 1) st.v1 = stats[u * ns + 1];
        optim::RowPhase2(t, rp, rows[u], g.data() + u * cols, st);
      }
      EXPECT_TRUE(twin == simt_shard) << optim::OptimizerName(type) << " " << DTypeName(dt);
    }
  }
}

// Runs = source ranks x features of a shard: world 129 with 3 features sharing one table gives
// 387 runs, more than one run table holds (kMaxRuns, a kernel parameter). The per-id step goes
// as several launches and the grouping still sees one shard: row 5 is in every run (a hot row
// whose ids come from every run table), and the result equals the CPU twin bit for bit, the
// aggregated gradients and a fused update alike.
TEST(SimtBackward, MoreRunsThanOneRunTableHoldsEqualTheCpuTwin) {
  constexpr int kRanks = 129, kFeatures = 3, kRows = 40;
  constexpr int32_t kCols = 20;
  const int64_t stride = kCols + 1;
  std::vector<Bags> bags;
  std::vector<BagRun> runs;
  int64_t at = 0;
  for (int r = 0; r < kRanks * kFeatures; ++r) bags.push_back(MakeBags(3, 3, kRows, 900 + r, 0, 0));
  for (Bags& b : bags) {
    b.rows.insert(b.rows.begin(), 5);
    b.weights.insert(b.weights.begin(), 0.5f);
    for (size_t i = 1; i < b.offsets.size(); ++i) ++b.offsets[i];
    BagRun run = b.Run(true);
    run.io_offset = at * stride;
    at += run.num_bags + 1;
    runs.push_back(run);
  }
  ASSERT_GT(runs.size(), static_cast<size_t>(simt_body::kMaxRuns));
  EXPECT_EQ(simt_body::MakeRunSlices(runs).tables().size(), 4u);
  std::vector<float> grads(at * stride);
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& g : grads) g = u(rng);
  int64_t n = 0;
  for (const BagRun& r : runs) n += r.num_ids();

  std::vector<uint8_t> ws(BackwardWorkspaceBytes(ExecContext(), n, kCols, 0));
  int64_t num_unique = 0;
  ASSERT_TRUE(GroupRows(ExecContext(), runs, ws.data(), ws.size(), &num_unique).ok());
  std::vector<int64_t> twin_rows(num_unique);
  std::vector<float> twin_grads(num_unique * kCols);
  ASSERT_TRUE(AggregateGrads(ExecContext(), runs, grads.data(), stride, kCols, 0.25f, ws.data(),
                             twin_rows.data(), twin_grads.data())
                  .ok());
  std::vector<int64_t> rows(n, -1);
  std::vector<float> sums(n * kCols, 0.0f);
  simt_body::RowSink sink;
  sink.unique_out = rows.data();
  sink.grads_out = sums.data();
  simt_body::SimtBackward sb;
  sb.Run(runs, kRows, grads.data(), stride, kCols, 0.25f, sink);
  ASSERT_EQ(sb.mem.num_unique, num_unique);
  rows.resize(num_unique);
  EXPECT_EQ(rows, twin_rows);
  EXPECT_TRUE(SameBits(sums.data(), twin_grads.data(), twin_grads.size() * 4));
  EXPECT_GT(sb.mem.hot_off[n], 0);  // row 5 went through the chunk tree

  optim::OptimizerConfig cfg;
  cfg.type = optim::OptimizerType::kRowWiseAdagrad;
  cfg.learning_rate = 0.05f;
  cfg.eps = 1e-3f;
  Shard twin(cfg, DType::kFloat32, kRows, kCols, 9), simt_shard = twin;
  std::vector<uint8_t> ws1(BackwardWorkspaceBytes(ExecContext(), n, kCols, 1));
  ASSERT_TRUE(GroupRows(ExecContext(), runs, ws1.data(), ws1.size(), &num_unique).ok());
  ASSERT_TRUE(FusedBackward(ExecContext(), runs, grads.data(), stride, 0.5f, cfg, 1, kCols, twin.p,
                            ws1.data())
                  .ok());
  simt_body::RowSink fused;
  fused.fused = true;
  fused.params = optim::MakeRowParams(cfg, 1, kCols, simt_shard.p);
  simt_body::SimtBackward sf;
  sf.Run(runs, kRows, grads.data(), stride, kCols, 0.5f, fused);
  EXPECT_TRUE(twin == simt_shard);
}

}  // namespace
}  // namespace shardrec::embedding::kernels
