// A training step (forward + backward with fused row-wise Adagrad) of the same collection with
// its tables stored in fp32, bf16 or FP8 E4M3 (arg 1: 0, 2 or 7, a DType value), at world 1 and 2
// (arg 0), ranks as threads over Gloo on loopback. Row-wise and table-wise tables (FP8 rows are
// not split into columns). The target: an FP8 step at most 1.1x the bf16 one. Run with
// --benchmark_repetitions and --benchmark_enable_random_interleaving to interleave the types.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/embedding/collection.h"
#include "impl/sharding/layout.h"
#include "tests/bench/rank_threads.h"
#include "tests/impl/sharding/test_plans.h"

namespace shardrec::embedding {
namespace {

using bench::RankThreads;

constexpr int64_t kBatch = 512;  // samples per rank
constexpr int32_t kPoolingFactor = 16;

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
  state.SetLabel(DTypeName(dtype));
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
  for (auto _ : state) {
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
  }
  state.counters["samples/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kBatch * world, benchmark::Counter::kIsRate);
  threads.Run([&](int r) { colls[r].reset(); });
}

BENCHMARK(BM_Step)->ArgsProduct({{1, 2}, {0, 2, 7}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace shardrec::embedding

BENCHMARK_MAIN();
