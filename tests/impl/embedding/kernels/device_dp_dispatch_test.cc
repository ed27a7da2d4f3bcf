// The data-parallel steps, the counted row phases and the gated grouping through the plugin table
// (gpu/dispatch.h): under the fake embedding plugin the entries check every array
// against the live device blocks and run the single-source bodies on the host executor; under the
// real plugin (the gpu registration) the CUDA twins run (cuda/dp.cu, cuda/backward.cu), and
// without a device every case skips. The results are the host code's bits. A plugin built before
// these entries loads, and only they report kUnsupported.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "impl/embedding/dp_accumulate.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/dp.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/kernels.h"
#include "tests/impl/embedding/kernels/fake_device_buffers.h"
#include "tests/impl/embedding/route_cases.h"
#include "tests/impl/embedding/same_bytes.h"

namespace shardrec::embedding {
namespace {

using testing::SameBytes;

namespace dk = kernels::device;
namespace sb = kernels::simt_body;
using kernels::testing::DeviceArena;
using kernels::testing::DeviceCtx;
using kernels::testing::SameBits;

// Random plans with data-parallel tables: the accumulation from a device gradient and, on the
// accumulated block, the compaction (a gate shut every third case) give the host loop's bits.
TEST(DeviceDpDispatch, AccumulationAndCompactionAreTheHosts) {
  SHARDREC_REQUIRE_DEVICE();
  std::mt19937 rng(91);
  int plans = 0;
  for (int attempt = 0; attempt < 4000 && plans < 40; ++attempt) {
    testing::Case c;
    if (!testing::RandomCase(rng, &c) || c.layout.dp_tables.empty()) continue;
    testing::BatchData d;
    testing::RandomBatch(rng, c, false, &d);
    RoutedBatch rb;
    if (!RouteBatch(ExecContext(), c.layout, RouteOptions{}, d.batch, &rb).ok()) continue;
    ++plans;
    const Layout& l = c.layout;
    const int64_t rows = l.sequence ? rb.num_values : rb.batch_size;
    std::vector<float> grad(static_cast<size_t>(std::max<int64_t>(rows, 1) * l.output_dim));
    for (float& g : grad) g = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 37.0f;
    const DpBlockLayout at = MakeDpBlockLayout(l);
    std::vector<float> want(l.dp_grad_size, 0.0f);
    AccumulateDataParallel(l, at, rb, grad.data(), want.data());

    DeviceArena dev;
    const DpStaticTables st = MakeDpStaticTables(l, at);
    std::vector<sb::DpPair> pairs;
    std::vector<int64_t> first;
    const int64_t* d_offsets = dev.Upload(rb.dp_offsets);
    const float* d_div = dev.Upload(rb.mean_div);
    MakeDpPairs(l, st, rb, d_offsets, d_div, &pairs, &first);
    sb::DpParams p;
    p.grad = dev.Upload(grad);
    p.stride = l.output_dim;
    p.batch_size = rb.batch_size;
    p.num_pairs = static_cast<int64_t>(pairs.size());
    p.pairs = dev.Upload(pairs);
    p.pair_first = dev.Upload(first);
    p.num_ids = static_cast<int64_t>(rb.dp_rows.size());
    p.rows = dev.Upload(rb.dp_rows);
    p.weights = dev.Upload(rb.dp_weights);
    p.pos = dev.Upload(rb.dp_pos);
    p.num_tables = static_cast<int64_t>(st.tables.size());
    p.tables = dev.Upload(st.tables);
    p.key_first = dev.Upload(st.key_first);
    p.num_keys = st.key_first.back();
    p.dense = static_cast<float*>(dev.Alloc(4 * l.dp_grad_size));
    p.dense_floats = static_cast<int64_t>(l.dp_grad_size);
    p.rows_out = static_cast<int64_t*>(dev.Alloc(8 * static_cast<size_t>(p.num_keys)));
    p.grads_out = static_cast<float*>(dev.Alloc(4 * l.dp_grad_size));
    p.counts_out = static_cast<int64_t*>(dev.Alloc(8 * st.tables.size()));
    const std::vector<int64_t> gate = {plans % 3 == 0 ? 1 : 0};
    p.gate = dev.Upload(gate);
    p.scale = 0.5f;
    size_t ws = 0;
    ASSERT_TRUE(dk::DpWorkspaceBytes(DeviceCtx(), p.num_ids, p.num_keys, &ws).ok());
    void* w = dev.Alloc(ws);
    ASSERT_TRUE(dk::DpStep(DeviceCtx(), p, sb::kDpAccumulate, w, ws).ok());
    ASSERT_TRUE(dev.Sync());
    ASSERT_TRUE(SameBits(want, dev.Download(p.dense, l.dp_grad_size), "dense block"))
        << "plan " << plans;
    ASSERT_TRUE(dk::DpStep(DeviceCtx(), p, sb::kDpCompact, w, ws).ok());
    const auto counts = dev.Download(p.counts_out, st.tables.size());
    const auto got_rows = dev.Download(p.rows_out, static_cast<size_t>(p.num_keys));
    const auto got_grads = dev.Download(p.grads_out, l.dp_grad_size);
    for (size_t k = 0; k < l.dp_tables.size(); ++k) {
      const int32_t t = l.dp_tables[k];
      const int32_t dim = l.plan->tables[t].dim;
      std::vector<int64_t> rows_k;
      std::vector<float> grads_k;
      for (int64_t r = 0; r < l.plan->tables[t].rows; ++r) {
        if (want[at.touch_at[t] + r] == 0.0f) continue;
        rows_k.push_back(r);
        for (int32_t cc = 0; cc < dim; ++cc)
          grads_k.push_back(want[at.grad_at[t] + r * dim + cc] * 0.5f);
      }
      EXPECT_EQ(counts[k], gate[0] != 0 ? 0 : static_cast<int64_t>(rows_k.size()));
      EXPECT_TRUE(SameBytes(rows_k.data(), got_rows.data() + st.key_first[k], 8 * rows_k.size()));
      EXPECT_TRUE(SameBytes(grads_k.data(), got_grads.data() + at.grad_at[t], 4 * grads_k.size()));
    }
  }
  EXPECT_GE(plans, 30);
}

// A shard in host memory and its device twin.
struct Shard {
  std::vector<float> weights;
  std::vector<std::vector<float>> states;
  optim::ShardParams host, device;
};

Shard MakeShard(const optim::OptimizerConfig& c, int64_t rows, int32_t cols, DeviceArena& dev) {
  Shard s;
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  s.weights.resize(static_cast<size_t>(rows * cols));
  for (float& x : s.weights) x = u(rng);
  for (const optim::StateSpec& spec : optim::StateSpecs(c.type))
    s.states.emplace_back(static_cast<size_t>(spec.row_wise ? rows : rows * cols), 0.25f);
  s.host = {s.weights.data(), DType::kFloat32, rows, cols, cols, {}, 5, 0, 0};
  s.device = s.host;
  s.device.weights = dev.Upload(s.weights);
  for (auto& st : s.states) {
    s.host.states.push_back(st.data());
    s.device.states.push_back(dev.Upload(st));
  }
  return s;
}

::testing::AssertionResult SameShard(Shard& s, DeviceArena& dev) {
  if (auto r = SameBits(s.weights,
                        dev.Download(static_cast<const float*>(s.device.weights), s.weights.size()),
                        "weights");
      !r)
    return r;
  for (size_t i = 0; i < s.states.size(); ++i)
    if (auto r = SameBits(s.states[i], dev.Download(s.device.states[i], s.states[i].size()),
                          "state " + std::to_string(i));
        !r)
      return r;
  return ::testing::AssertionSuccess();
}

// The optimizer's two phases over the first *count of a row list give optim::PartialRowStats and
// optim::Apply's bits on those rows; a count of 0 changes nothing.
TEST(DeviceDpDispatch, CountedRowPhasesAreTheHostsOnTheFirstCountRows) {
  SHARDREC_REQUIRE_DEVICE();
  for (const auto type : {optim::OptimizerType::kSgd, optim::OptimizerType::kRowWiseAdagrad,
                          optim::OptimizerType::kAdam, optim::OptimizerType::kLamb}) {
    for (const int64_t count : {int64_t{0}, int64_t{4}, int64_t{6}}) {
      SCOPED_TRACE(::testing::Message() << optim::OptimizerName(type) << " count " << count);
      DeviceArena dev;
      optim::OptimizerConfig c;
      c.type = type;
      c.learning_rate = 0.1f;
      const int32_t cols = 20;
      Shard s = MakeShard(c, 12, cols, dev);
      const std::vector<int64_t> rows = {3, 0, 11, 7, 2, 9};
      std::vector<float> grads(rows.size() * cols);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 37);
      const int ns = optim::NumRowStats(type);
      const optim::RowUpdate up{std::span<const int64_t>(rows.data(), static_cast<size_t>(count)),
                                grads.data()};
      std::vector<float> stats(rows.size() * static_cast<size_t>(ns), 0.0f);
      if (ns > 0) optim::PartialRowStats(ExecContext(), c, 3, s.host, up, stats.data());
      optim::Apply(ExecContext(), c, 3, cols, s.host, up, ns > 0 ? stats.data() : nullptr);
      kernels::CountedRows cr;
      cr.rows = dev.Upload(rows);
      cr.grads = dev.Upload(grads);
      cr.count = dev.Upload(std::vector<int64_t>{count});
      cr.max_rows = static_cast<int64_t>(rows.size());
      float* d_stats = ns > 0 ? dev.Upload(std::vector<float>(rows.size() * ns, 0.0f)) : nullptr;
      if (ns > 0) {
        ASSERT_TRUE(
            dk::RowPhaseCounted(DeviceCtx(), c, 3, cols, s.device, cr, d_stats, nullptr, 1).ok());
      }
      ASSERT_TRUE(
          dk::RowPhaseCounted(DeviceCtx(), c, 3, cols, s.device, cr, nullptr, d_stats, 2).ok());
      ASSERT_TRUE(dev.Sync());
      EXPECT_TRUE(SameShard(s, dev));
    }
  }
}

// The gated grouping: a shut gate leaves the fused update behind it without a row to update (and
// the device count 0); an open one gives the ungated bits and the unique-row count.
TEST(DeviceDpDispatch, AShutGateEmptiesTheGrouping) {
  SHARDREC_REQUIRE_DEVICE();
  optim::OptimizerConfig c;
  c.type = optim::OptimizerType::kAdam;
  c.learning_rate = 0.05f;
  const int32_t cols = 16;
  std::vector<int64_t> offsets = {0}, rows;
  for (int b = 0; b < 60; ++b) {
    for (int k = 0; k <= b % 4; ++k) rows.push_back((b * 7 + k) % 5);  // a few hot rows
    offsets.push_back(static_cast<int64_t>(rows.size()));
  }
  std::vector<float> grads(60 * cols);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * static_cast<float>(i % 101);
  for (const int64_t gate : {int64_t{1}, int64_t{0}}) {
    SCOPED_TRACE(::testing::Message() << "gate " << gate);
    DeviceArena dev;
    Shard gated = MakeShard(c, 12, cols, dev);
    Shard plain = MakeShard(c, 12, cols, dev);
    const std::vector<float> start = gated.weights;
    const kernels::BagRun run{dev.Upload(offsets), 60, dev.Upload(rows), nullptr, 0};
    const std::vector<kernels::BagRun> runs = {run};
    const std::vector<int64_t> num_ids = {static_cast<int64_t>(rows.size())};
    const kernels::DeviceRuns dr{runs, num_ids, 12};
    const float* d_grads = dev.Upload(grads);
    size_t ws_bytes = 0;
    ASSERT_TRUE(dk::BackwardWorkspaceBytes(DeviceCtx(), num_ids[0], cols, 0, &ws_bytes).ok());
    void* ws = dev.Alloc(ws_bytes);
    int64_t* count = dev.Upload(std::vector<int64_t>{-1});
    ASSERT_TRUE(dk::GroupRowsGated(DeviceCtx(), dr, ws, ws_bytes, nullptr, count,
                                   dev.Upload(std::vector<int64_t>{gate}))
                    .ok());
    ASSERT_TRUE(
        dk::FusedBackward(DeviceCtx(), dr, d_grads, cols, 0.5f, c, 1, cols, gated.device, ws).ok());
    void* ws2 = dev.Alloc(ws_bytes);
    ASSERT_TRUE(dk::GroupRows(DeviceCtx(), dr, ws2, ws_bytes, nullptr).ok());
    ASSERT_TRUE(
        dk::FusedBackward(DeviceCtx(), dr, d_grads, cols, 0.5f, c, 1, cols, plain.device, ws2)
            .ok());
    ASSERT_TRUE(dev.Sync());
    const auto w_gated =
        dev.Download(static_cast<const float*>(gated.device.weights), gated.weights.size());
    const auto w_plain =
        dev.Download(static_cast<const float*>(plain.device.weights), plain.weights.size());
    if (gate != 0) {
      EXPECT_TRUE(SameBits(start, w_gated, "weights behind a shut gate"));
      EXPECT_FALSE(SameBits(start, w_plain, "ungated weights"));
    } else {
      EXPECT_TRUE(SameBits(w_plain, w_gated, "weights behind an open gate"));
    }
    EXPECT_EQ(dev.Download(count, 1)[0], gate != 0 ? 0 : 5);
  }
}

// The statistics sum through the plugin: 20 sources in two launches (the second adding onto the
// first), the first *count rows only, the host's order.
TEST(DeviceDpDispatch, SumSourcesIsTheHostsOrder) {
  SHARDREC_REQUIRE_DEVICE();
  DeviceArena dev;
  const int64_t K = 2, max_rows = 7;
  std::vector<std::vector<float>> src(20);
  std::vector<const float*> d_src;
  for (size_t s = 0; s < src.size(); ++s) {
    src[s].resize(static_cast<size_t>(max_rows * K));
    for (size_t k = 0; k < src[s].size(); ++k)
      src[s][k] = static_cast<float>((s * 31 + k * 7) % 53) / 3.0f;
    d_src.push_back(dev.Upload(src[s]));
  }
  const std::vector<int64_t> count = {5};
  const int64_t* d_count = dev.Upload(count);
  float* dst = dev.Upload(std::vector<float>(static_cast<size_t>(max_rows * K), -1.0f));
  for (size_t first = 0; first < src.size(); first += 16) {
    kernels::simt_body::SumSourcesParams p;
    p.num_sources = static_cast<int32_t>(std::min<size_t>(16, src.size() - first));
    for (int32_t k = 0; k < p.num_sources; ++k) p.sources[k] = d_src[first + k];
    p.accumulate = first > 0 ? 1 : 0;
    p.row_floats = K;
    p.max_rows = max_rows;
    p.count = d_count;
    p.dst = dst;
    ASSERT_TRUE(dk::SumSources(DeviceCtx(), p).ok());
  }
  std::vector<float> want(static_cast<size_t>(max_rows * K), -1.0f);
  for (int64_t k = 0; k < count[0] * K; ++k) {
    float acc = 0.0f;
    for (const auto& v : src) acc += v[static_cast<size_t>(k)];
    want[static_cast<size_t>(k)] = acc;
  }
  ASSERT_TRUE(dev.Sync());
  EXPECT_TRUE(SameBits(want, dev.Download(dst, want.size()), "full statistics"));
}

}  // namespace
}  // namespace shardrec::embedding
