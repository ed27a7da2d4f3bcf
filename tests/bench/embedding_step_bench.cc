// A sharded training step (forward + backward with fused row-wise Adagrad) of a mixed-sharding
// collection at world 2 and 4, ranks as threads over Gloo on loopback. Reports samples/s over
// all ranks and the share of rank 0's step spent in collectives (communication vs compute).
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

constexpr int64_t kBatch = 256;  // samples per rank
constexpr int32_t kPoolingFactor = 8;

std::shared_ptr<sharding::Plan> MakePlan(int world) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = world;
  plan->local_world_size = world;
  plan->features = {{"user", 8.0f}, {"item", 8.0f}, {"cat", 8.0f}, {"geo", 8.0f}};
  using sharding::testing::Table;
  plan->tables = {Table("user", 200000, 64, {0}), Table("item", 100000, 64, {1}),
                  Table("cat", 1000, 32, {2}), Table("geo", 50000, 64, {3})};
  plan->table_plans = {
      sharding::MakeRowWise(plan->tables[0], world),
      sharding::MakeColumnSplit(plan->tables[1], sharding::ShardingType::kColumnWise, {32, 32},
                                {0, world - 1}),
      sharding::MakeDataParallel(plan->tables[2], world),
      sharding::MakeTableWise(plan->tables[3], world / 2)};
  return plan;
}

void BM_ShardedStep(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  if (!comm::CreateLocalGroup(world, comm::CommOptions(), &comms).ok()) {
    state.SkipWithError("cannot create the local communicator group");
    return;
  }
  auto plan = MakePlan(world);
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
  const double comm0 = colls[0]->timings().comm_seconds;
  const double total0 = colls[0]->timings().total_seconds;
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
  const double comm = colls[0]->timings().comm_seconds - comm0;
  const double total = colls[0]->timings().total_seconds - total0;
  state.counters["samples/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kBatch * world, benchmark::Counter::kIsRate);
  state.counters["comm_share"] = total > 0 ? comm / total : 0.0;
  state.counters["compute_ms/step"] =
      state.iterations() ? (total - comm) * 1e3 / static_cast<double>(state.iterations()) : 0.0;
  threads.Run([&](int r) { colls[r].reset(); });
}

BENCHMARK(BM_ShardedStep)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace shardrec::embedding

BENCHMARK_MAIN();
