// A training step (forward + backward with fused row-wise Adagrad) of the same collection with
// its tables stored in fp32, bf16, FP8 E4M3 or E5M2 (arg 1: 0, 2, 7 or 8, a DType value), at
// world 1 and 2 (arg 0), ranks as threads over Gloo on loopback; arg 2 = 1: the optimizer's
// stochastic_rounding (bf16 and FP8 rows). Row-wise and table-wise tables
// (FP8 rows are not split into columns). The target: an FP8 step at most 1.1x the bf16
// one. Run with --benchmark_repetitions and --benchmark_enable_random_interleaving to interleave
// the types (each repetition: kWarmupSteps untimed steps, then kTimedSteps timed ones). "Time" is
// wall time; "CPU" is the CPU time of the whole process (every rank's threads), which a machine
// shared with other work disturbs less than the wall time.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/core/fp8.h"
#include "impl/core/half.h"
#include "impl/embedding/collection.h"
#include "impl/embedding/kernels/isa/fused_rows.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/sharding/layout.h"
#include "tests/bench/rank_threads.h"
#include "tests/impl/sharding/test_plans.h"

namespace shardrec::embedding {
namespace {

using bench::RankThreads;

constexpr int64_t kBatch = 512;  // samples per rank
constexpr int32_t kPoolingFactor = 16;
// A fixed count of timed steps after a few untimed ones, so that each repetition builds its
// tables once (the iteration count's search would build them again each try, ~1.5 s of CPU a
// time) and many interleaved repetitions fit a short benchmark window.
constexpr int kWarmupSteps = 3;
constexpr int kTimedSteps = 40;

std::shared_ptr<sharding::Plan> MakePlan(int world, DType dtype) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = world;
  plan->local_world_size = world;
  plan->features = {{"user", 16.0f}, {"item", 16.0f}, {"geo", 16.0f}};
  using sharding::testing::Table;
  plan->tables = {Table("user", 1000000, 128, {0}), Table("item", 500000, 128, {1}),
                  Table("geo", 100000, 64, {2})};
  for (auto& t : plan->tables) t.dtype = dtype;
  plan->table_plans = {sharding::MakeRowWise(plan->tables[0], world),
                       sharding::MakeRowWise(plan->tables[1], world),
                       sharding::MakeTableWise(plan->tables[2], world - 1)};
  return plan;
}

void BM_Step(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const auto dtype = static_cast<DType>(state.range(1));
  const bool stochastic = state.range(2) != 0;
  state.SetLabel(std::string(DTypeName(dtype)) + (stochastic ? " stochastic" : ""));
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  if (!comm::CreateLocalGroup(world, comm::CommOptions(), &comms).ok()) {
    state.SkipWithError("cannot create the local communicator group");
    return;
  }
  auto plan = MakePlan(world, dtype);
  std::vector<std::unique_ptr<EmbeddingCollection>> colls(world);
  std::vector<std::vector<int32_t>> lengths(world);
  std::vector<std::vector<int64_t>> ids(world);
  std::vector<std::vector<float>> out(world), grad(world);
  RankThreads threads(world);
  optim::OptimizerConfig opt;
  opt.type = optim::OptimizerType::kRowWiseAdagrad;
  opt.stochastic_rounding = stochastic;
  threads.Run([&](int r) {
    std::shared_ptr<comm::Communicator> c(std::move(comms[r]));
    (void)EmbeddingCollection::Create(plan, c, &opt, CollectionOptions(), &colls[r]);
    std::mt19937_64 gen(r + 1);
    for (size_t f = 0; f < plan->features.size(); ++f) {
      for (int64_t b = 0; b < kBatch; ++b) {
        const int32_t len = 1 + static_cast<int32_t>(gen() % (2 * kPoolingFactor - 1));
        lengths[r].push_back(len);
        for (int32_t k = 0; k < len; ++k)
          ids[r].push_back(static_cast<int64_t>(gen() % plan->tables[f].rows));
      }
    }
  });
  for (int r = 0; r < world; ++r) {
    if (colls[r] == nullptr) {
      state.SkipWithError("collection creation failed");
      return;
    }
    out[r].resize(static_cast<size_t>(kBatch * colls[r]->output_dim()));
    grad[r].assign(out[r].size(), 1e-3f);
  }
  const auto step = [&] {
    threads.Run([&](int r) {
      Batch b{kBatch,
              static_cast<int64_t>(plan->features.size()),
              lengths[r].data(),
              lengths[r].size(),
              ids[r].data(),
              DType::kInt64,
              ids[r].size(),
              nullptr,
              0,
              {}};
      ThrowIfError(colls[r]->Forward(b, out[r].data(), out[r].size()));
      ThrowIfError(colls[r]->Backward(grad[r].data(), grad[r].size()));
    });
  };
  // Untimed steps first: the first touches of the tables' and workspaces' pages (the first step
  // took 20-30x a later one) are no part of a step's cost.
  for (int i = 0; i < kWarmupSteps; ++i) step();
  for (auto _ : state) step();
  state.counters["samples/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kBatch * world, benchmark::Counter::kIsRate);
  threads.Run([&](int r) { colls[r].reset(); });
}

BENCHMARK(BM_Step)
    ->ArgsProduct({{1, 2}, {0, 2, 7, 8}, {0}})
    ->ArgsProduct({{1, 2}, {2, 7}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(kTimedSteps)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// The per-row work a 16-bit or FP8 table adds to the fused backward, on one thread: 24k rows of
// 128 values each widened / decoded to fp32 and rounded / encoded back (arg 0: a DType value;
// arg 1 for FP8: 0 the fused backward's codec at the host's widest level, 1 core/fp8.h's scalar
// row functions, which the backward called before). bf16 rounds to nearest even as
// optim::StoreRoundedRow does. CPU time of this thread, which other work on the machine disturbs
// less than whole steps.
void BM_RowCodec(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const bool scalar = state.range(1) != 0;
  state.SetLabel(std::string(DTypeName(dtype)) + (IsFp8DType(dtype) && scalar ? " scalar" : ""));
  constexpr int64_t kRows = 24576;
  constexpr int32_t kCols = 128;
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> values(kRows * kCols);
  for (auto& v : values) v = dist(gen);
  const bool fp8 = IsFp8DType(dtype);
  const int64_t row_bytes = fp8 ? Fp8RowBytes(kCols) : 2 * kCols;
  std::vector<uint8_t> rows(kRows * row_bytes);
  std::vector<float> buf(kCols);
  const Fp8Kind kind = Fp8KindOf(dtype);
  const auto type = dtype == DType::kFp8E5M2 ? kernels::isa::WeightType::kFp8E5M2
                                             : kernels::isa::WeightType::kFp8E4M3;
  kernels::isa::Fp8RowFn level = &kernels::isa::Fp8RowBaseline;
  if (kernels::HostCpuLevel() >= kernels::CpuLevel::kAvx512)
    level = &kernels::isa::Fp8RowAvx512;
  else if (kernels::HostCpuLevel() >= kernels::CpuLevel::kAvx2)
    level = &kernels::isa::Fp8RowAvx2;
  for (int64_t r = 0; r < kRows; ++r) {
    uint8_t* row = rows.data() + r * row_bytes;
    if (fp8) {
      EncodeFp8Row(kind, values.data() + r * kCols, kCols, row);
    } else {
      auto* h = reinterpret_cast<uint16_t*>(row);
      for (int32_t c = 0; c < kCols; ++c) h[c] = FloatToBFloat16(values[r * kCols + c]);
    }
  }
  for (auto _ : state) {
    for (int64_t r = 0; r < kRows; ++r) {
      uint8_t* row = rows.data() + r * row_bytes;
      if (fp8 && scalar) {
        DecodeFp8Row(kind, row, kCols, buf.data());
        buf[r % kCols] += 1e-3f;  // an update, so the row is written back changed
        EncodeFp8Row(kind, buf.data(), kCols, row);
      } else if (fp8) {
        level(type, false, buf.data(), kCols, row);
        buf[r % kCols] += 1e-3f;
        level(type, true, buf.data(), kCols, row);
      } else {
        auto* h = reinterpret_cast<uint16_t*>(row);
        for (int32_t c = 0; c < kCols; ++c) buf[c] = BFloat16ToFloat(h[c]);
        buf[r % kCols] += 1e-3f;
        for (int32_t c = 0; c < kCols; ++c) h[c] = FloatToBFloat16(buf[c]);
      }
    }
    benchmark::DoNotOptimize(rows.data());
  }
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * kRows,
                                                benchmark::Counter::kIsRate);
}

BENCHMARK(BM_RowCodec)
    ->Args({2, 0})
    ->Args({7, 0})
    ->Args({7, 1})
    ->Args({8, 0})
    ->Args({8, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace shardrec::embedding

BENCHMARK_MAIN();
