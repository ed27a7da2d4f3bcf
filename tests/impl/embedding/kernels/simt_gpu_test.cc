// The CUDA twins (impl/embedding/kernels/cuda) on a real GPU against the CPU twins, bit for bit,
// on the inputs of the CPU-executed tests (simt_fixtures.h): pooled (SUM, per-id weighted) and
// sequence lookups over fp32/fp16/bf16 tables of every width, all jobs of a rank in one launch
// and batches that fill the grid; the backward's grouping and aggregated rows; the fused update
// of every optimizer with every weight dtype, weight-decay mode and rounding mode; hot rows split
// across blocks; the two-phase update of column shards; a row outside its shard reported as a
// status. MEAN pooling is SUM plus a divide the collection does outside the kernels, so it has
// no kernel of its own to compare. Needs a CUDA device: without one the binary exits with 77,
// which ctest reports as skipped. Deterministic builds only (SHARDREC_DETERMINISTIC_FP=ON).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/optim/optimizer.h"
#include "tests/impl/embedding/kernels/gpu_buffers.h"
#include "tests/impl/embedding/kernels/simt_fixtures.h"

extern "C" const char* shardrec_test_skip_reason() {
  return shardrec::embedding::kernels::gpu::NoDeviceReason();
}

namespace shardrec::embedding::kernels {
namespace {

using gpu::Arena;
using gpu::Download;

bool SameBits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

// Every case runs on its own stream: the twins only enqueue, and the test synchronises.
class Gpu : public ::testing::Test {
 public:
  ExecContext Ctx() const { return ExecContext::Cuda(0, stream_); }
  void Sync() const { gpu::Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 protected:
  void SetUp() override { gpu::Check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  void TearDown() override { (void)cudaStreamDestroy(stream_); }

 private:
  cudaStream_t stream_ = nullptr;
};

// The CPU twin's and the device's outputs of `jobs` (host pointers), both starting from `init`.
struct LookupResult {
  std::vector<float> twin, device;
};

LookupResult RunBoth(const Gpu& g, std::vector<LookupJob> jobs,
                     const std::vector<const Table*>& tables, const std::vector<float>& init) {
  const ExecContext ctx = g.Ctx();
  LookupResult r{init, init};
  for (LookupJob& j : jobs) j.out = r.twin.data();
  EXPECT_TRUE(Lookup(ExecContext(), jobs).ok());
  Arena arena;
  float* out = arena.Copy(init);
  std::vector<LookupJob> dev = jobs;
  for (size_t i = 0; i < dev.size(); ++i) {
    dev[i].weights = gpu::DeviceWeights(arena, *tables[i]);
    dev[i].run = gpu::DeviceRun(arena, jobs[i].run);
    dev[i].out = out;
  }
  void* status = arena.Bytes(cuda::StatusBytes());
  gpu::Check(cudaMemset(status, 0, cuda::StatusBytes()), "cudaMemset");
  const Status st = cuda::Lookup(ctx, dev, status);
  EXPECT_TRUE(st.ok()) << st.ToString();
  const Status read = cuda::ReadStatus(ctx, status, "lookup");
  EXPECT_TRUE(read.ok()) << read.ToString();
  g.Sync();
  r.device = Download(out, init.size());
  return r;
}

const int32_t kWidths[] = {1, 3, 4, 7, 8, 16, 17, 32, 64, 100, 128, 129, 256, 300, 520};

class GpuLookup : public Gpu {};

TEST_F(GpuLookup, PooledBagsEqualTheCpuTwinBitForBit) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int32_t cols : kWidths) {
      Table table(37, cols, cols + 3, dt, 7);
      Bags bags = MakeBags(45, 9, 37, 11 + cols, /*long_every=*/10, /*long_len=*/70);
      for (bool weighted : {false, true}) {
        const int64_t stride = cols + 5;
        LookupJob job{table.View(), bags.Run(weighted), nullptr, stride};
        const std::vector<float> init(bags.num_bags() * stride, -7.0f);
        LookupResult r = RunBoth(*this, {job}, {&table}, init);
        EXPECT_TRUE(SameBits(r.twin.data(), r.device.data(), init.size() * 4))
            << DTypeName(dt) << " cols " << cols << " weighted " << weighted;
      }
    }
  }
}

TEST_F(GpuLookup, SequenceRowsEqualTheCpuTwinBitForBit) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int32_t cols : kWidths) {
      Table table(20, cols, cols, dt, 8);
      Bags ids = MakeBags(1, 60, 20, 5, 0, 0);
      for (bool weighted : {false, true}) {
        BagRun run{nullptr, static_cast<int64_t>(ids.rows.size()), ids.rows.data(),
                   weighted ? ids.weights.data() : nullptr, 3 * cols};
        const std::vector<float> init((ids.rows.size() + 3) * cols, 9.0f);
        LookupResult r =
            RunBoth(*this, {LookupJob{table.View(), run, nullptr, cols}}, {&table}, init);
        EXPECT_TRUE(SameBits(r.twin.data(), r.device.data(), init.size() * 4))
            << DTypeName(dt) << " cols " << cols;
      }
    }
  }
}

// Tables of mixed widths and dtypes at different io offsets; 300 jobs take three launches.
TEST_F(GpuLookup, EveryJobOfARankTogether) {
  for (int num_tables : {6, 300}) {
    std::vector<Table> tables;
    std::vector<Bags> bags;
    const int32_t dims[] = {4, 16, 64, 128, 200, 8};
    const DType types[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
    tables.reserve(num_tables);
    bags.reserve(num_tables);
    for (int t = 0; t < num_tables; ++t) {
      tables.emplace_back(50, dims[t % 6], dims[t % 6], types[t % 3], 20 + t);
      bags.push_back(MakeBags(30 + t % 7, 6, 50, 40 + t, 9, 40));
    }
    const int64_t out_stride = 520;
    std::vector<LookupJob> jobs;
    std::vector<const Table*> views;
    int64_t at = 0;
    for (int t = 0; t < num_tables; ++t) {
      BagRun run = bags[t].Run(t % 2 == 0);
      run.io_offset = at * out_stride + 7 * (t % 6);
      jobs.push_back(LookupJob{tables[t].View(), run, nullptr, out_stride});
      views.push_back(&tables[t]);
      at += run.num_bags;
    }
    const std::vector<float> init(at * out_stride, 1.5f);
    LookupResult r = RunBoth(*this, jobs, views, init);
    EXPECT_TRUE(SameBits(r.twin.data(), r.device.data(), init.size() * 4)) << num_tables;
  }
}

// Enough bags to need every block of the grid several times over (grid-stride loops), short and
// long bags, 16-bit and fp32 tables.
TEST_F(GpuLookup, BatchesLargerThanTheGridEqualTheCpuTwin) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    for (int32_t cols : {16, 128, 384}) {
      Table table(20000, cols, cols, dt, 3);
      Bags bags = MakeBags(40000, 30, 20000, 9 + cols, /*long_every=*/97, /*long_len=*/600);
      const std::vector<float> init(bags.num_bags() * cols, 0.5f);
      LookupResult r =
          RunBoth(*this, {LookupJob{table.View(), bags.Run(true), nullptr, cols}}, {&table}, init);
      EXPECT_TRUE(SameBits(r.twin.data(), r.device.data(), init.size() * 4))
          << DTypeName(dt) << " cols " << cols;
    }
  }
}

// A row outside the shard is never read: left out, and the status block names its position.
TEST_F(GpuLookup, AnOutOfRangeRowBecomesAStatusNotATrap) {
  Table table(10, 8, 8, DType::kFloat32, 1);
  std::vector<int64_t> offsets = {0, 2, 5};
  std::vector<int64_t> rows = {1, 2, 3, 10, -4};
  Arena arena;
  BagRun run = gpu::DeviceRun(arena, BagRun{offsets.data(), 2, rows.data(), nullptr, 0});
  float* out = arena.Alloc<float>(16);
  gpu::Check(cudaMemset(out, 0, 64), "cudaMemset");
  LookupJob job{gpu::DeviceWeights(arena, table), run, out, 8};
  void* status = arena.Bytes(cuda::StatusBytes());
  gpu::Check(cudaMemset(status, 0, cuda::StatusBytes()), "cudaMemset");
  ASSERT_TRUE(cuda::Lookup(Ctx(), std::span<const LookupJob>(&job, 1), status).ok());
  const Status st = cuda::ReadStatus(Ctx(), status, "lookup");
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("position 3"), std::string::npos) << st.ToString();
  const std::vector<float> got = Download(out, 16);
  for (int c = 0; c < 8; ++c) EXPECT_EQ(got[8 + c], table.At(3, c));
  // The read cleared the block: the next step starts clean.
  EXPECT_TRUE(cuda::ReadStatus(Ctx(), status, "lookup").ok());
}

// ---- Backward -------------------------------------------------------------------------------

// The runs of a case on the device, with the counts the host knows.
struct DeviceCase {
  std::vector<BagRun> runs;
  std::vector<int64_t> num_ids;
  const float* grads = nullptr;

  DeviceCase(Arena& arena, const std::vector<BagRun>& host, const std::vector<float>& g) {
    for (const BagRun& r : host) {
      runs.push_back(gpu::DeviceRun(arena, r));
      num_ids.push_back(r.num_ids());
    }
    grads = arena.Copy(g);
  }
  cuda::DeviceRuns View(int64_t num_rows) const { return {runs, num_ids, num_rows}; }
  int64_t total() const {
    int64_t n = 0;
    for (int64_t k : num_ids) n += k;
    return n;
  }
};

class GpuBackward : public Gpu {};

// Aggregated gradients of `runs` by both twins; returns whether rows and bits are equal.
::testing::AssertionResult AggregateBoth(const Gpu& g, const ExecContext& ctx,
                                         const std::vector<BagRun>& runs,
                                         const std::vector<float>& grads, int64_t stride,
                                         int32_t cols, int64_t num_rows) {
  int64_t n = 0;
  for (const BagRun& r : runs) n += r.num_ids();
  std::vector<uint8_t> ws(BackwardWorkspaceBytes(ExecContext(), n, cols, 0));
  int64_t twin_unique = 0;
  if (!GroupRows(ExecContext(), runs, ws.data(), ws.size(), &twin_unique).ok())
    return ::testing::AssertionFailure() << "CPU GroupRows";
  std::vector<int64_t> twin_rows(twin_unique);
  std::vector<float> twin_grads(twin_unique * cols);
  if (!AggregateGrads(ExecContext(), runs, grads.data(), stride, cols, 0.25f, ws.data(),
                      twin_rows.data(), twin_grads.data())
           .ok())
    return ::testing::AssertionFailure() << "CPU AggregateGrads";

  Arena arena;
  DeviceCase dc(arena, runs, grads);
  const size_t bytes = cuda::BackwardWorkspaceBytes(ctx, n, cols, 0);
  void* dws = arena.Bytes(bytes);
  int64_t* unique = arena.Alloc<int64_t>(n);
  float* rg = arena.Alloc<float>(n * cols);
  int64_t dev_unique = -1;
  Status st = cuda::GroupRows(ctx, dc.View(num_rows), dws, bytes, &dev_unique);
  if (st.ok())
    st = cuda::AggregateGrads(ctx, dc.View(num_rows), dc.grads, stride, cols, 0.25f, dws, unique,
                              rg);
  if (!st.ok()) return ::testing::AssertionFailure() << st.ToString();
  g.Sync();
  if (dev_unique != twin_unique)
    return ::testing::AssertionFailure() << dev_unique << " unique rows, twin " << twin_unique;
  if (Download(unique, twin_unique) != twin_rows)
    return ::testing::AssertionFailure() << "unique rows differ";
  const std::vector<float> got = Download(rg, twin_unique * cols);
  if (!SameBits(got.data(), twin_grads.data(), got.size() * 4))
    return ::testing::AssertionFailure() << "row gradients differ";
  return ::testing::AssertionSuccess();
}

TEST_F(GpuBackward, AggregatedRowsEqualTheCpuTwinBitForBit) {
  for (int32_t cols : {1, 5, 16, 64, 100, 130, 300}) {
    for (bool weighted : {false, true}) {
      BackwardCase bc(cols, weighted, 100 + cols);
      EXPECT_TRUE(AggregateBoth(*this, Ctx(), bc.runs, bc.grads, bc.stride, cols, 40))
          << "cols " << cols << " weighted " << weighted;
    }
  }
}

// `steps` fused steps on both twins from the same shard; returns the two shards.
std::pair<Shard, Shard> FusedBoth(const Gpu& g, const ExecContext& ctx,
                                  const optim::OptimizerConfig& cfg,
                                  const std::vector<BagRun>& runs, const std::vector<float>& grads,
                                  int64_t stride, const Shard& start, int steps) {
  Shard twin = start;
  Arena arena;
  gpu::DeviceShard dev(arena, start);
  DeviceCase dc(arena, runs, grads);
  const int32_t cols = start.p.cols;
  const int64_t n = dc.total();
  const int ns = optim::NumRowStats(cfg.type);
  std::vector<uint8_t> ws(BackwardWorkspaceBytes(ExecContext(), n, cols, ns));
  const size_t bytes = cuda::BackwardWorkspaceBytes(ctx, n, cols, ns);
  void* dws = arena.Bytes(bytes);
  for (int64_t step = 1; step <= steps; ++step) {
    int64_t num_unique = 0;
    EXPECT_TRUE(GroupRows(ExecContext(), runs, ws.data(), ws.size(), &num_unique).ok());
    EXPECT_TRUE(FusedBackward(ExecContext(), runs, grads.data(), stride, 0.5f, cfg, step, cols,
                              twin.p, ws.data())
                    .ok());
    Status st = cuda::GroupRows(ctx, dc.View(start.p.rows), dws, bytes, nullptr);
    if (st.ok())
      st = cuda::FusedBackward(ctx, dc.View(start.p.rows), dc.grads, stride, 0.5f, cfg, step, cols,
                               dev.p, dws);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  g.Sync();
  return {twin, dev.Fetch(start)};
}

TEST_F(GpuBackward, FusedUpdateEqualsTheCpuTwinForEveryOptimizerAndDtype) {
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
            const Shard start(cfg, dt, 40, cols, 9);
            auto [twin, dev] = FusedBoth(*this, Ctx(), cfg, bc.runs, bc.grads, bc.stride, start, 2);
            EXPECT_TRUE(twin == dev) << optim::OptimizerName(cfg.type) << " " << DTypeName(dt)
                                     << " sr " << sr << " decay " << int(mode) << " cols " << cols;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 6 * 5 * 3 * 4);
}

// One row holds most ids of a large batch: its thousands of chunks are summed by many teams and
// combined by the block tree, and the result is still the twin's (and so the same every run).
TEST_F(GpuBackward, AVeryHotRowSplitsAcrossTeamsAndKeepsTheBits) {
  std::mt19937 rng(5);
  Bags bags;
  for (int64_t b = 0; b < 20000; ++b) {
    for (int k = 0; k < 10; ++k) {
      bags.rows.push_back(rng() % 10 < 6 ? 3 : static_cast<int64_t>(rng() % 1000));
      bags.weights.push_back(static_cast<float>(rng() % 1000) / 500.0f - 1.0f);
    }
    bags.offsets.push_back(static_cast<int64_t>(bags.rows.size()));
  }
  for (int32_t cols : {64, 300}) {
    std::vector<float> grads(bags.num_bags() * cols);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& g : grads) g = u(rng);
    const std::vector<BagRun> runs = {bags.Run(true)};
    EXPECT_TRUE(AggregateBoth(*this, Ctx(), runs, grads, cols, cols, 1000)) << cols;
    for (auto type : {optim::OptimizerType::kAdam, optim::OptimizerType::kLamb,
                      optim::OptimizerType::kRowWiseAdagrad}) {
      for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
        optim::OptimizerConfig cfg;
        cfg.type = type;
        cfg.learning_rate = 0.01f;
        cfg.stochastic_rounding = dt != DType::kFloat32;
        const Shard start(cfg, dt, 1000, cols, 2);
        auto [twin, dev] = FusedBoth(*this, Ctx(), cfg, runs, grads, cols, start, 1);
        EXPECT_TRUE(twin == dev) << optim::OptimizerName(type) << " " << DTypeName(dt) << " cols "
                                 << cols;
      }
    }
  }
}

// Column shards: phase 1 on the device, statistics summed over the row, phase 2 on the device,
// against optim::PartialRowStats and optim::Apply on the host.
TEST_F(GpuBackward, TwoPhaseUpdateOfColumnShardsEqualsTheCpuTwin) {
  for (int type = 0; type < optim::kNumOptimizerTypes; ++type) {
    for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      optim::OptimizerConfig cfg;
      cfg.type = static_cast<optim::OptimizerType>(type);
      cfg.learning_rate = 0.1f;
      cfg.weight_decay = 0.02f;
      cfg.weight_decay_mode = optim::WeightDecayMode::kL2;
      cfg.stochastic_rounding = dt == DType::kFloat16;
      const int32_t cols = 37, full_dim = 100;
      const Shard start(cfg, dt, 30, cols, 4);
      Shard twin = start;
      const std::vector<int64_t> rows = {0, 3, 4, 17, 29};
      std::vector<float> g(rows.size() * cols);
      for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.7f * static_cast<float>(i));
      const int ns = optim::NumRowStats(cfg.type);
      std::vector<float> stats(rows.size() * 2, 0.0f);
      optim::RowUpdate up{rows, g.data()};
      if (ns > 0) optim::PartialRowStats(ExecContext(), cfg, 3, twin.p, up, stats.data());

      Arena arena;
      gpu::DeviceShard dev(arena, start);
      const int64_t* drows = arena.Copy(rows);
      optim::RowUpdate dup{std::span<const int64_t>(drows, rows.size()), arena.Copy(g)};
      float* dstats = arena.Alloc<float>(stats.size());
      ASSERT_TRUE(cuda::PartialRowStats(Ctx(), cfg, 3, dev.p, dup, dstats).ok());
      Sync();
      if (ns > 0) {
        const std::vector<float> got = Download(dstats, rows.size() * ns);
        EXPECT_TRUE(SameBits(got.data(), stats.data(), got.size() * 4))
            << optim::OptimizerName(cfg.type) << " " << DTypeName(dt) << " statistics";
      }
      // The other column shards' statistics arrive and are added in shard order.
      for (float& s : stats) s = s + 1.25f;
      optim::Apply(ExecContext(), cfg, 3, full_dim, twin.p, up, ns > 0 ? stats.data() : nullptr);
      const float* dfull = arena.Copy(stats);
      ASSERT_TRUE(cuda::Apply(Ctx(), cfg, 3, full_dim, dev.p, dup, ns > 0 ? dfull : nullptr).ok());
      Sync();
      EXPECT_TRUE(twin == dev.Fetch(start))
          << optim::OptimizerName(cfg.type) << " " << DTypeName(dt);
    }
  }
}

}  // namespace
}  // namespace shardrec::embedding::kernels
