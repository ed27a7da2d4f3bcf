// The sharded step of embedding_step_bench (same tables, batch and optimizer) with one rank per
// process under mpirun (mpirun --oversubscribe -np W embedding_step_mpi_bench), on the MPI
// backend and on Gloo created from the launcher's variables, in the same job, under two plans:
// embedding_step_bench's (skewed: its table-wise table makes one rank do more lookups than the
// others, who wait for it inside collectives) and a balanced one (every rank the same lookups).
// Every rank runs the same fixed iteration count (Google Benchmark's own choice would differ
// between processes and deadlock the collectives); rank 0 reports samples/s over all ranks and
// every rank's share of its step spent inside collectives (waits for peers included), with
// their mean and highest.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/comm/mpi/mpi_communicator.h"
#include "impl/comm/rendezvous/env_rendezvous.h"
#include "impl/embedding/collection.h"
#include "impl/sharding/layout.h"
#include "tests/impl/sharding/test_plans.h"

namespace shardrec::embedding {
namespace {

constexpr int64_t kBatch = 256;  // samples per rank
constexpr int32_t kPoolingFactor = 8;
constexpr int64_t kIterations = 100;

// Args of the plan: embedding_step_bench's BM_ShardedStep, or the balanced hand plan.
enum PlanKind : int64_t { kSkewed = 0, kBalanced = 1 };

// kSkewed: "item" in two column blocks on ranks 0 and W-1, "geo" table-wise on rank W/2, so at
// world 2 rank 1 and at world 4 rank 2 look up one more 64-wide table than rank 0 does.
// kBalanced: "item" and "geo" (the same pooling and width, so the same lookup cost) each in two
// 32-column blocks, "item" on ranks 0 and 1, "geo" on ranks 2 and 3 (mod W): at world 2 each
// rank holds one block of each, at world 4 one block of one; "user" row-wise and "cat" data
// parallel as before. Every rank then does the same lookups, as a planner balancing the ranks'
// cost would arrange.
std::shared_ptr<sharding::Plan> MakePlan(int world, int64_t kind) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = world;
  plan->local_world_size = world;
  plan->features = {{"user", 8.0f}, {"item", 8.0f}, {"cat", 8.0f}, {"geo", 8.0f}};
  using sharding::testing::Table;
  plan->tables = {Table("user", 200000, 64, {0}), Table("item", 100000, 64, {1}),
                  Table("cat", 1000, 32, {2}), Table("geo", 50000, 64, {3})};
  const auto cw = sharding::ShardingType::kColumnWise;
  if (kind == kSkewed) {
    plan->table_plans = {sharding::MakeRowWise(plan->tables[0], world),
                         sharding::MakeColumnSplit(plan->tables[1], cw, {32, 32}, {0, world - 1}),
                         sharding::MakeDataParallel(plan->tables[2], world),
                         sharding::MakeTableWise(plan->tables[3], world / 2)};
  } else {
    plan->table_plans = {
        sharding::MakeRowWise(plan->tables[0], world),
        sharding::MakeColumnSplit(plan->tables[1], cw, {32, 32}, {0, 1 % world}),
        sharding::MakeDataParallel(plan->tables[2], world),
        sharding::MakeColumnSplit(plan->tables[3], cw, {32, 32}, {2 % world, 3 % world})};
  }
  return plan;
}

struct World {
  std::shared_ptr<comm::Communicator> mpi, gloo;
};

World& TheWorld() {
  static World w;
  return w;
}

// Args: backend (0 MPI, 1 Gloo), plan (PlanKind).
void BM_ShardedStep(benchmark::State& state) {
  const std::shared_ptr<comm::Communicator>& c =
      state.range(0) == 0 ? TheWorld().mpi : TheWorld().gloo;
  const int world = c->Size(), r = c->Rank();
  auto plan = MakePlan(world, state.range(1));
  optim::OptimizerConfig opt;
  opt.type = optim::OptimizerType::kRowWiseAdagrad;
  std::unique_ptr<EmbeddingCollection> coll;
  ThrowIfError(EmbeddingCollection::Create(plan, c, &opt, CollectionOptions(), &coll));
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::mt19937_64 gen(r + 1);
  for (size_t f = 0; f < plan->features.size(); ++f) {
    for (int64_t b = 0; b < kBatch; ++b) {
      const int32_t len = 1 + static_cast<int32_t>(gen() % (2 * kPoolingFactor - 1));
      lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k)
        ids.push_back(static_cast<int64_t>(gen() % plan->tables[f].rows));
    }
  }
  std::vector<float> out(static_cast<size_t>(kBatch * coll->output_dim()));
  std::vector<float> grad(out.size(), 1e-3f);
  const Batch b{kBatch,
                static_cast<int64_t>(plan->features.size()),
                lengths.data(),
                lengths.size(),
                ids.data(),
                DType::kInt64,
                ids.size(),
                nullptr,
                0,
                {}};
  ThrowIfError(c->Barrier());
  const double comm0 = coll->timings().comm_seconds;
  const double total0 = coll->timings().total_seconds;
  for (auto _ : state) {
    ThrowIfError(coll->Forward(b, out.data(), out.size()));
    ThrowIfError(coll->Backward(grad.data(), grad.size()));
  }
  const double comm = coll->timings().comm_seconds - comm0;
  const double total = coll->timings().total_seconds - total0;
  state.counters["samples/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kBatch * world, benchmark::Counter::kIsRate);
  state.counters["compute_ms/step"] =
      state.iterations() ? (total - comm) * 1e3 / static_cast<double>(state.iterations()) : 0.0;
  // Every rank's share: a rank with less work than its peers counts its wait for them as
  // collective time, so the shares differ most under the skewed plan.
  const double mine[2] = {comm, total};
  std::vector<double> all(2 * static_cast<size_t>(world));
  const std::vector<size_t> two(world, 2);
  ThrowIfError(c->AllGatherV(mine, 2, all.data(), two, DType::kFloat64));
  double lo = 1.0, hi = 0.0, sum = 0.0;
  for (int q = 0; q < world; ++q) {
    const double share = all[2 * q + 1] > 0 ? all[2 * q] / all[2 * q + 1] : 0.0;
    state.counters["share_r" + std::to_string(q)] = share;
    lo = std::min(lo, share);
    hi = std::max(hi, share);
    sum += share;
  }
  state.counters["share_min"] = lo;
  state.counters["share_mean"] = sum / world;
  state.counters["share_max"] = hi;
  ThrowIfError(c->Barrier());
}

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace
}  // namespace shardrec::embedding

int main(int argc, char** argv) {
  using namespace shardrec;
  using namespace shardrec::embedding;
  benchmark::Initialize(&argc, argv);
  World& w = TheWorld();
  std::unique_ptr<comm::Communicator> mpi, gloo;
  Status s =
      comm::mpi::CreateMpiCommunicator(0, Device::Host(), std::chrono::milliseconds(120000), &mpi);
  if (!s.ok()) {
    std::fprintf(stderr, "embedding_step_mpi_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  // Gloo from Open MPI's variables, as shardrec_comm_create_from_env() does under mpirun.
  comm::CommOptions o;
  o.backend = comm::Backend::kGloo;
  o.timeout = std::chrono::milliseconds(120000);
  s = comm::CreateCommunicatorFromEnv(comm::ProcessEnv(), o, &gloo);
  if (!s.ok()) {
    std::fprintf(stderr, "embedding_step_mpi_bench: Gloo from the environment: %s\n",
                 s.ToString().c_str());
    return 1;
  }
  w.mpi = std::move(mpi);
  w.gloo = std::move(gloo);
  for (int64_t kind : {kBalanced, kSkewed}) {
    for (int64_t backend : {0, 1}) {
      std::string name = backend == 0 ? "BM_ShardedStep/mpi" : "BM_ShardedStep/gloo";
      name += kind == kBalanced ? "/balanced" : "/skewed";
      benchmark::RegisterBenchmark(name.c_str(), BM_ShardedStep)
          ->Args({backend, kind})
          ->Iterations(kIterations)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  if (w.mpi->Rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  ThrowIfError(w.mpi->Barrier());
  w.gloo.reset();
  w.mpi.reset();
  benchmark::Shutdown();
  return 0;
}
