// The backward through kernels::device and the fake embedding plugin (see
// device_dispatch_test.cc): GroupRows + FusedBackward for every optimizer, and the column-shard
// path GroupRows + AggregateGrads + PartialRowStats + Apply, each against the host kernels on
// host copies of the same data, bit for bit (weights, optimizer states, and the intermediate
// unique rows, row gradients and statistics).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "impl/core/half.h"
#include "impl/embedding/gpu/dispatch.h"
#include "tests/impl/embedding/kernels/fake_device_buffers.h"

namespace shardrec::embedding::kernels {
namespace {

using testing::DeviceArena;
using testing::DeviceCtx;
using testing::SameBits;

constexpr int64_t kRows = 40;

// A shard in host memory and its device twin (same bytes).
struct Shard {
  std::vector<uint8_t> weights;
  std::vector<std::vector<float>> states;
  optim::ShardParams host, device;
};

Shard MakeShard(const optim::OptimizerConfig& c, DType dt, int32_t cols, int32_t col_offset,
                DeviceArena& dev, std::mt19937& rng) {
  Shard s;
  const int64_t stride = cols + 1;
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  const size_t n = static_cast<size_t>(kRows * stride);
  s.weights.resize(n * DTypeSize(dt));
  for (size_t i = 0; i < n; ++i) {
    const float v = d(rng);
    if (dt == DType::kFloat32) {
      std::memcpy(s.weights.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = dt == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
      std::memcpy(s.weights.data() + 2 * i, &h, 2);
    }
  }
  for (const optim::StateSpec& spec : optim::StateSpecs(c.type))
    s.states.emplace_back(static_cast<size_t>(spec.row_wise ? kRows : kRows * cols), 0.0f);
  s.host = {s.weights.data(), dt, kRows, cols, stride, {}, 77, 1000, col_offset};
  s.device = s.host;
  s.device.weights = dev.Upload(s.weights);
  for (auto& st : s.states) {
    s.host.states.push_back(st.data());
    s.device.states.push_back(dev.Upload(st));
  }
  return s;
}

::testing::AssertionResult SameShard(Shard& s, DeviceArena& dev) {
  auto w = dev.Download(static_cast<const uint8_t*>(s.device.weights), s.weights.size());
  if (auto r = SameBits(s.weights, w, "weights"); !r) return r;
  for (size_t i = 0; i < s.states.size(); ++i)
    if (auto r = SameBits(s.states[i], dev.Download(s.device.states[i], s.states[i].size()),
                          "state " + std::to_string(i));
        !r)
      return r;
  return ::testing::AssertionSuccess();
}

// Three runs of one shard (pooled weighted with duplicates, pooled unweighted, sequence), their
// gradients, on the host and on the device.
struct Batch {
  std::vector<std::vector<int64_t>> offsets, rows;
  std::vector<std::vector<float>> weights;
  std::vector<float> grads;
  std::vector<BagRun> host, device;
  std::vector<int64_t> num_ids;
  int64_t grad_stride = 0;
  const float* device_grads = nullptr;

  DeviceRuns Host() const { return {host, num_ids, kRows}; }
  DeviceRuns Device() const { return {device, num_ids, kRows}; }
};

Batch MakeBatch(int32_t cols, DeviceArena& dev, std::mt19937& rng) {
  Batch b;
  b.grad_stride = cols + 3;
  std::uniform_int_distribution<int64_t> row(0, 11), len(0, 4);  // few rows: many duplicates
  std::uniform_real_distribution<float> w(-1.5f, 1.5f);
  int64_t io = 0;
  for (int kind = 0; kind < 3; ++kind) {
    const bool pooled = kind < 2, weighted = kind != 1;
    const int64_t bags = 7;
    std::vector<int64_t> off, rows;
    std::vector<float> wt;
    if (pooled) off.push_back(0);
    for (int64_t g = 0; g < bags; ++g) {
      const int64_t n = pooled ? len(rng) : 1;
      for (int64_t k = 0; k < n; ++k) {
        rows.push_back(kind == 2 ? row(rng) + 20 : row(rng));
        if (weighted) wt.push_back(w(rng));
      }
      if (pooled) off.push_back(static_cast<int64_t>(rows.size()));
    }
    b.offsets.push_back(off);
    b.rows.push_back(rows);
    b.weights.push_back(wt);
    b.num_ids.push_back(static_cast<int64_t>(rows.size()));
    b.host.push_back({nullptr, bags, nullptr, nullptr, io});
    io += bags * b.grad_stride;
  }
  for (size_t r = 0; r < b.host.size(); ++r) {
    BagRun& h = b.host[r];
    h.offsets = b.offsets[r].empty() ? nullptr : b.offsets[r].data();
    h.rows = b.rows[r].data();
    h.weights = b.weights[r].empty() ? nullptr : b.weights[r].data();
    BagRun d = h;
    d.offsets = h.offsets != nullptr ? dev.Upload(b.offsets[r]) : nullptr;
    d.rows = dev.Upload(b.rows[r]);
    d.weights = h.weights != nullptr ? dev.Upload(b.weights[r]) : nullptr;
    b.device.push_back(d);
  }
  b.grads.resize(static_cast<size_t>(io));
  for (float& g : b.grads) g = w(rng);
  b.device_grads = dev.Upload(b.grads);
  return b;
}

optim::OptimizerConfig Config(optim::OptimizerType t) {
  optim::OptimizerConfig c;
  c.type = t;
  c.learning_rate = 0.05f;
  c.weight_decay = 0.01f;
  c.weight_decay_mode = t == optim::OptimizerType::kAdam || t == optim::OptimizerType::kLamb
                            ? optim::WeightDecayMode::kDecoupled
                            : optim::WeightDecayMode::kL2;
  c.seed = 99;
  return c;
}

struct FusedCase {
  optim::OptimizerType type;
  DType dtype;
  bool stochastic;
};

std::string CaseName(const ::testing::TestParamInfo<FusedCase>& i) {
  return std::string(optim::OptimizerName(i.param.type)) + "_" + DTypeName(i.param.dtype) +
         (i.param.stochastic ? "_sr" : "");
}

class FusedDispatch : public ::testing::TestWithParam<FusedCase> {};

TEST_P(FusedDispatch, MatchesTheHostKernelsBitForBit) {
  SHARDREC_REQUIRE_DEVICE();
  const FusedCase fc = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(fc.type) * 7 + 3);
  DeviceArena dev;
  ASSERT_TRUE(dev.ok());
  optim::OptimizerConfig c = Config(fc.type);
  c.stochastic_rounding = fc.stochastic;
  const int32_t cols = 16;
  Shard s = MakeShard(c, fc.dtype, cols, 0, dev, rng);
  Batch b = MakeBatch(cols, dev, rng);
  int64_t ids = 0;
  for (int64_t n : b.num_ids) ids += n;
  const int ns = optim::NumRowStats(c.type);
  size_t ws_bytes = 0;
  ASSERT_TRUE(device::BackwardWorkspaceBytes(DeviceCtx(), ids, cols, ns, &ws_bytes).ok());
  void* ws_d = dev.Alloc(ws_bytes);
  std::vector<uint8_t> ws_h(BackwardWorkspaceBytes(ExecContext(), ids, cols, ns));
  for (int64_t step = 1; step <= 2; ++step) {
    int64_t unique_h = 0, unique_d = -1;
    ASSERT_TRUE(GroupRows(ExecContext(), b.host, ws_h.data(), ws_h.size(), &unique_h).ok());
    Status st = device::GroupRows(DeviceCtx(), b.Device(), ws_d, ws_bytes, &unique_d);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(dev.Sync());
    EXPECT_EQ(unique_h, unique_d);
    ASSERT_TRUE(FusedBackward(ExecContext(), b.host, b.grads.data(), b.grad_stride, 0.5f, c, step,
                              cols, s.host, ws_h.data())
                    .ok());
    st = device::FusedBackward(DeviceCtx(), b.Device(), b.device_grads, b.grad_stride, 0.5f, c,
                               step, cols, s.device, ws_d);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(SameShard(s, dev)) << optim::OptimizerName(c.type) << " step " << step;
  }
  if (!testing::FakePlugin()) return;  // the refusals below are the fake's (a GPU would fault)
  // Host memory where the device needs its own is refused, naming the argument.
  Status st = device::FusedBackward(DeviceCtx(), b.Device(), b.grads.data(), b.grad_stride, 0.5f, c,
                                    3, cols, s.device, ws_d);
  EXPECT_NE(st.message().find("'grads' of run 0"), std::string::npos) << st.ToString();
  st = device::FusedBackward(DeviceCtx(), b.Device(), b.device_grads, b.grad_stride, 0.5f, c, 3,
                             cols, s.host, ws_d);
  EXPECT_NE(st.message().find("shard weights"), std::string::npos) << st.ToString();
  st = device::GroupRows(DeviceCtx(), b.Host(), ws_d, ws_bytes, nullptr);
  EXPECT_NE(st.message().find("'offsets' of run 0"), std::string::npos) << st.ToString();
  st = device::GroupRows(DeviceCtx(), b.Device(), ws_h.data(), ws_h.size(), nullptr);
  EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.ToString();
  if (!s.states.empty()) {
    optim::ShardParams mixed = s.device;
    mixed.states[0] = s.host.states[0];
    st = device::FusedBackward(DeviceCtx(), b.Device(), b.device_grads, b.grad_stride, 0.5f, c, 3,
                               cols, mixed, ws_d);
    EXPECT_NE(st.message().find("optimizer state momentum1"), std::string::npos) << st.ToString();
  }
  EXPECT_TRUE(SameShard(s, dev)) << "a refused call changed nothing";
}

INSTANTIATE_TEST_SUITE_P(
    AllOptimizers, FusedDispatch,
    ::testing::Values(FusedCase{optim::OptimizerType::kSgd, DType::kFloat32, false},
                      FusedCase{optim::OptimizerType::kAdagrad, DType::kFloat32, false},
                      FusedCase{optim::OptimizerType::kRowWiseAdagrad, DType::kFloat32, false},
                      FusedCase{optim::OptimizerType::kAdam, DType::kFloat32, false},
                      FusedCase{optim::OptimizerType::kPartialRowWiseAdam, DType::kFloat32, false},
                      FusedCase{optim::OptimizerType::kLamb, DType::kFloat32, false},
                      FusedCase{optim::OptimizerType::kAdam, DType::kFloat16, true},
                      FusedCase{optim::OptimizerType::kRowWiseAdagrad, DType::kBFloat16, true}),
    CaseName);

// A column shard (columns 8..15 of a 16-wide table) whose row statistics must be summed across
// ranks: the two phases run separately, with the other shard's statistics added on the host.
// 16-bit cases round stochastically, so the shard's place in its table (key, row and column
// offsets) must arrive intact.
class ColumnShardDispatch : public ::testing::TestWithParam<FusedCase> {};

TEST_P(ColumnShardDispatch, MatchesTheHostKernelsBitForBit) {
  SHARDREC_REQUIRE_DEVICE();
  const FusedCase cc = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(cc.type) + 40);
  DeviceArena dev;
  ASSERT_TRUE(dev.ok());
  optim::OptimizerConfig c = Config(cc.type);
  c.stochastic_rounding = cc.stochastic;
  const int32_t cols = 8, full_dim = 16;
  const int ns = optim::NumRowStats(c.type);
  ASSERT_GT(ns, 0);
  Shard s = MakeShard(c, cc.dtype, cols, 8, dev, rng);
  Batch b = MakeBatch(cols, dev, rng);
  int64_t ids = 0;
  for (int64_t n : b.num_ids) ids += n;
  size_t ws_bytes = 0;
  ASSERT_TRUE(device::BackwardWorkspaceBytes(DeviceCtx(), ids, cols, ns, &ws_bytes).ok());
  void* ws_d = dev.Alloc(ws_bytes);
  std::vector<uint8_t> ws_h(BackwardWorkspaceBytes(ExecContext(), ids, cols, ns));
  auto* rows_d = static_cast<int64_t*>(dev.Alloc(static_cast<size_t>(ids) * 8));
  auto* grads_d = static_cast<float*>(dev.Alloc(static_cast<size_t>(ids * cols) * 4));
  auto* partial_d = static_cast<float*>(dev.Alloc(static_cast<size_t>(ids * ns) * 4));
  std::vector<int64_t> rows_h(static_cast<size_t>(ids));
  std::vector<float> grads_h(static_cast<size_t>(ids * cols)), partial_h(ids * ns);
  for (int64_t step = 1; step <= 2; ++step) {
    int64_t u_h = 0, u_d = -1;
    ASSERT_TRUE(GroupRows(ExecContext(), b.host, ws_h.data(), ws_h.size(), &u_h).ok());
    ASSERT_TRUE(device::GroupRows(DeviceCtx(), b.Device(), ws_d, ws_bytes, &u_d).ok());
    ASSERT_TRUE(dev.Sync());
    ASSERT_EQ(u_h, u_d);
    const auto u = static_cast<size_t>(u_h);
    ASSERT_TRUE(AggregateGrads(ExecContext(), b.host, b.grads.data(), b.grad_stride, cols, 0.25f,
                               ws_h.data(), rows_h.data(), grads_h.data())
                    .ok());
    Status st = device::AggregateGrads(DeviceCtx(), b.Device(), b.device_grads, b.grad_stride, cols,
                                       0.25f, ws_d, rows_d, grads_d);
    ASSERT_TRUE(st.ok()) << st.ToString();
    rows_h.resize(u);
    grads_h.resize(u * cols);
    EXPECT_TRUE(SameBits(rows_h, dev.Download(rows_d, u), "unique rows"));
    EXPECT_TRUE(SameBits(grads_h, dev.Download(grads_d, u * cols), "row grads"));
    const optim::RowUpdate uh{rows_h, grads_h.data()};
    const optim::RowUpdate ud{std::span<const int64_t>(rows_d, u), grads_d};
    optim::PartialRowStats(ExecContext(), c, step, s.host, uh, partial_h.data());
    st = device::PartialRowStats(DeviceCtx(), c, step, s.device, ud, partial_d);
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::vector<float> ph(partial_h.begin(), partial_h.begin() + u * ns);
    std::vector<float> pd = dev.Download(partial_d, u * ns);
    EXPECT_TRUE(SameBits(ph, pd, "partial row statistics"));
    // The other column shard's statistics, as a reduce over ranks would add them.
    for (size_t i = 0; i < ph.size(); ++i) ph[i] += 0.125f * static_cast<float>(i % 5 + 1);
    const float* full_d = dev.Upload(ph);
    optim::Apply(ExecContext(), c, step, full_dim, s.host, uh, ph.data());
    st = device::Apply(DeviceCtx(), c, step, full_dim, s.device, ud, full_d);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(SameShard(s, dev)) << optim::OptimizerName(c.type) << " step " << step;
    rows_h.resize(static_cast<size_t>(ids));
    grads_h.resize(static_cast<size_t>(ids * cols));
    if (!testing::FakePlugin()) continue;  // the fake's refusals (a GPU would fault)
    // Host statistics or rows are refused.
    st = device::Apply(DeviceCtx(), c, step, full_dim, s.device, ud, ph.data());
    EXPECT_NE(st.message().find("full_stats"), std::string::npos) << st.ToString();
    st = device::PartialRowStats(DeviceCtx(), c, step, s.device, uh, partial_d);
    EXPECT_NE(st.message().find("update rows"), std::string::npos) << st.ToString();
    st = device::AggregateGrads(DeviceCtx(), b.Device(), b.device_grads, b.grad_stride, cols, 0.25f,
                                ws_d, rows_h.data(), grads_d);
    EXPECT_NE(st.message().find("unique_rows"), std::string::npos) << st.ToString();
  }
  EXPECT_TRUE(SameShard(s, dev)) << "a refused call changed nothing";
}

INSTANTIATE_TEST_SUITE_P(
    RowStatistics, ColumnShardDispatch,
    ::testing::Values(FusedCase{optim::OptimizerType::kRowWiseAdagrad, DType::kFloat32, false},
                      FusedCase{optim::OptimizerType::kLamb, DType::kFloat32, false},
                      FusedCase{optim::OptimizerType::kLamb, DType::kBFloat16, true},
                      FusedCase{optim::OptimizerType::kRowWiseAdagrad, DType::kFloat16, true}),
    CaseName);

}  // namespace
}  // namespace shardrec::embedding::kernels
