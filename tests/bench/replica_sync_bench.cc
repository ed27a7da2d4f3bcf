// 2D parallelism costs on CPU over Gloo (ranks as threads on loopback):
//  - BM_ReplicaSync: replica sync (weights arena + state arena + step counter, coalesced per
//    dtype) against a plain all-reduce of the same total size measured in the same run; the
//    `vs_plain` counter is the ratio of achieved bandwidths (target >= 0.9).
//  - BM_Step: a sharded training step at world 4, 1D (S = 4) against 2D (S = 2, R = 2, sync
//    every k steps), samples/s and the share of the step spent in sync.
//  - BM_StepOverlap: 2D (S = 2, R = 2) with a sync every step, the sync issued after the next
//    batch's input_dist_start (its id exchange runs during the sync) against the sync issued
//    first, in alternating blocks of the same run; `saved_ms/step` and `overlapped/plain`.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/embedding/collection.h"
#include "impl/replica/mesh.h"
#include "impl/replica/sync.h"
#include "impl/sharding/layout.h"
#include "tests/bench/rank_threads.h"
#include "tests/impl/sharding/test_plans.h"

namespace shardrec::replica {
namespace {

using bench::RankThreads;
using Clock = std::chrono::steady_clock;

constexpr int kWorld = 4;

// Meshes for the world of 4 threads, one set per sharding group size, made once.
struct World {
  std::vector<std::unique_ptr<Mesh>> meshes;
};

World* MakeWorld(int shard_size, RankThreads& threads) {
  auto* w = new World;
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  if (!comm::CreateLocalGroup(kWorld, comm::CommOptions(), &comms).ok()) return nullptr;
  w->meshes.resize(kWorld);
  bool ok = true;
  threads.Run([&](int r) {
    std::shared_ptr<comm::Communicator> c(std::move(comms[r]));
    MeshOptions o;
    o.shard_size = shard_size;
    if (!Mesh::Create(c, o, &w->meshes[r]).ok()) ok = false;
  });
  return ok ? w : nullptr;
}

void BM_ReplicaSync(benchmark::State& state) {
  const int shard_size = static_cast<int>(state.range(0));
  const size_t bytes = static_cast<size_t>(state.range(1)) << 20;
  RankThreads threads(kWorld);
  std::unique_ptr<World> world(MakeWorld(shard_size, threads));
  if (!world) {
    state.SkipWithError("cannot create the mesh");
    return;
  }
  // Per rank, laid out as a collection does: one fp32 arena of weights (3/4 of the bytes)
  // followed by optimizer state (1/4), plus the int64 step counter.
  const size_t n = bytes / sizeof(float);
  const size_t nw = n * 3 / 4;
  std::vector<std::vector<float>> arena(kWorld, std::vector<float>(n, 1.0f));
  std::vector<std::vector<float>> plain(kWorld, std::vector<float>(n, 1.0f));
  std::vector<int64_t> steps(kWorld, 7);
  std::vector<std::vector<uint8_t>> staging(kWorld);
  auto sync = [&](int r) {
    SyncBuffer b[3];
    b[0] = {arena[r].data(), nw, DType::kFloat32, comm::ReduceOp::kAvg};
    b[1] = {arena[r].data() + nw, n - nw, DType::kFloat32, comm::ReduceOp::kAvg};
    b[2] = {&steps[r], 1, DType::kInt64, comm::ReduceOp::kMax};
    SyncStats stats;
    ThrowIfError(SyncBuffers(*world->meshes[r]->replica(), b, {}, &staging[r], &stats));
  };
  auto allreduce = [&](int r) {
    ThrowIfError(world->meshes[r]->replica()->AllReduce(plain[r].data(), plain[r].data(), n,
                                                        DType::kFloat32, comm::ReduceOp::kAvg));
  };
  // Warm-up; then every iteration times the plain all-reduce and the sync back to back, so
  // both see the same machine state, and the medians are compared.
  threads.Run(sync);
  threads.Run(allreduce);
  std::vector<double> plain_times, sync_times;
  auto timed = [&](const std::function<void(int)>& job) {
    auto t = Clock::now();
    threads.Run(job);
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  for (auto _ : state) {
    plain_times.push_back(timed(allreduce));
    sync_times.push_back(timed(sync));
    state.SetIterationTime(sync_times.back());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double plain_s = median(plain_times), sync_s = median(sync_times);
  state.counters["MiB"] = static_cast<double>(bytes >> 20);
  state.counters["sync_GB/s"] = static_cast<double>(bytes) / sync_s / 1e9;
  state.counters["plain_GB/s"] = static_cast<double>(bytes) / plain_s / 1e9;
  state.counters["vs_plain"] = plain_s / sync_s;
}

BENCHMARK(BM_ReplicaSync)
    ->ArgsProduct({{2, 1}, {1, 16, 64}})
    ->ArgNames({"S", "MiB"})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(15);

std::shared_ptr<sharding::Plan> StepPlan(int shard_size) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = shard_size;
  plan->local_world_size = shard_size;
  plan->features = {{"user", 8.0f}, {"item", 8.0f}, {"geo", 8.0f}};
  using sharding::testing::Table;
  plan->tables = {Table("user", 200000, 64, {0}), Table("item", 100000, 64, {1}),
                  Table("geo", 50000, 64, {2})};
  plan->table_plans = {sharding::MakeRowWise(plan->tables[0], shard_size),
                       sharding::MakeRowWise(plan->tables[1], shard_size),
                       sharding::MakeTableWise(plan->tables[2], shard_size - 1)};
  return plan;
}

// Arg 0: sharding group size S; arg 1: sync interval (0 = never, for the 1D case).
void BM_Step(benchmark::State& state) {
  const int shard_size = static_cast<int>(state.range(0));
  const int interval = static_cast<int>(state.range(1));
  constexpr int64_t kBatch = 256;
  RankThreads threads(kWorld);
  std::unique_ptr<World> world(MakeWorld(shard_size, threads));
  if (!world) {
    state.SkipWithError("cannot create the mesh");
    return;
  }
  auto plan = StepPlan(shard_size);
  optim::OptimizerConfig opt;
  opt.type = optim::OptimizerType::kRowWiseAdagrad;
  std::vector<std::unique_ptr<embedding::EmbeddingCollection>> colls(kWorld);
  std::vector<std::vector<int32_t>> lengths(kWorld);
  std::vector<std::vector<int64_t>> ids(kWorld);
  std::vector<std::vector<float>> out(kWorld), grad(kWorld);
  threads.Run([&](int r) {
    embedding::CollectionOptions o;
    o.dp_comm = world->meshes[r]->world();
    (void)embedding::EmbeddingCollection::Create(plan, world->meshes[r]->sharding(), &opt, o,
                                                 &colls[r]);
    std::mt19937_64 gen(r + 1);
    for (size_t f = 0; f < plan->features.size(); ++f) {
      for (int64_t b = 0; b < kBatch; ++b) {
        const int32_t len = 1 + static_cast<int32_t>(gen() % 15);
        lengths[r].push_back(len);
        for (int32_t k = 0; k < len; ++k)
          ids[r].push_back(static_cast<int64_t>(gen() % plan->tables[f].rows));
      }
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    if (!colls[r]) {
      state.SkipWithError("collection creation failed");
      return;
    }
    out[r].resize(static_cast<size_t>(kBatch * colls[r]->output_dim()));
    grad[r].assign(out[r].size(), 1e-3f);
  }
  int64_t step = 0;
  std::vector<double> sync_seconds(kWorld, 0.0);
  for (auto _ : state) {
    ++step;
    threads.Run([&](int r) {
      embedding::Batch b{kBatch,
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
      if (interval > 0 && step % interval == 0) {
        auto t = Clock::now();
        ThrowIfError(world->meshes[r]->Sync(colls[r]->storage(), SyncMode::kWeightsAndState));
        sync_seconds[r] += std::chrono::duration<double>(Clock::now() - t).count();
      }
    });
  }
  state.counters["samples/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kBatch * kWorld, benchmark::Counter::kIsRate);
  state.counters["sync_ms/step"] = sync_seconds[0] * 1e3 / static_cast<double>(state.iterations());
  threads.Run([&](int r) { colls[r].reset(); });
}

BENCHMARK(BM_Step)
    ->Args({4, 0})
    ->Args({2, 1})
    ->Args({2, 10})
    ->ArgNames({"S", "sync_every"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Alternates blocks of kBlock steps: plain (start, wait, forward, backward, sync) and
// overlapped (wait, forward, backward, start the next batch, sync; the block's first batch is
// started before it). Both do the same forwards, backwards and syncs; per-step medians.
void BM_StepOverlap(benchmark::State& state) {
  constexpr int kBlock = 4;
  const int64_t batch = state.range(0);
  RankThreads threads(kWorld);
  std::unique_ptr<World> world(MakeWorld(2, threads));
  if (!world) {
    state.SkipWithError("cannot create the mesh");
    return;
  }
  auto plan = StepPlan(2);
  optim::OptimizerConfig opt;
  opt.type = optim::OptimizerType::kRowWiseAdagrad;
  std::vector<std::unique_ptr<embedding::EmbeddingCollection>> colls(kWorld);
  // kBlock batches per rank in rotation.
  std::vector<std::vector<std::vector<int32_t>>> lengths(kWorld);
  std::vector<std::vector<std::vector<int64_t>>> ids(kWorld);
  std::vector<std::vector<float>> out(kWorld), grad(kWorld);
  threads.Run([&](int r) {
    embedding::CollectionOptions o;
    o.dp_comm = world->meshes[r]->world();
    (void)embedding::EmbeddingCollection::Create(plan, world->meshes[r]->sharding(), &opt, o,
                                                 &colls[r]);
    std::mt19937_64 gen(r + 1);
    lengths[r].resize(kBlock);
    ids[r].resize(kBlock);
    for (int k = 0; k < kBlock; ++k)
      for (size_t f = 0; f < plan->features.size(); ++f)
        for (int64_t b = 0; b < batch; ++b) {
          const int32_t len = 10 + static_cast<int32_t>(gen() % 21);  // ~20 ids per bag
          lengths[r][k].push_back(len);
          for (int32_t i = 0; i < len; ++i)
            ids[r][k].push_back(static_cast<int64_t>(gen() % plan->tables[f].rows));
        }
  });
  for (int r = 0; r < kWorld; ++r) {
    if (!colls[r]) {
      state.SkipWithError("collection creation failed");
      return;
    }
    out[r].resize(static_cast<size_t>(batch * colls[r]->output_dim()));
    grad[r].assign(out[r].size(), 1e-3f);
  }
  auto view = [&](int r, int k) {
    return embedding::Batch{batch,
                            static_cast<int64_t>(plan->features.size()),
                            lengths[r][k].data(),
                            lengths[r][k].size(),
                            ids[r][k].data(),
                            DType::kInt64,
                            ids[r][k].size(),
                            nullptr,
                            0,
                            {}};
  };
  auto sync = [&](int r) {
    ThrowIfError(world->meshes[r]->Sync(colls[r]->storage(), SyncMode::kWeightsAndState));
  };
  auto plain_block = [&](int r) {
    for (int k = 0; k < kBlock; ++k) {
      ThrowIfError(colls[r]->StartInputDist(view(r, k)));
      ThrowIfError(colls[r]->WaitInputDist());
      ThrowIfError(colls[r]->ForwardDistributed(out[r].data(), out[r].size()));
      ThrowIfError(colls[r]->Backward(grad[r].data(), grad[r].size()));
      sync(r);
    }
  };
  auto overlapped_block = [&](int r) {
    ThrowIfError(colls[r]->StartInputDist(view(r, 0)));
    for (int k = 0; k < kBlock; ++k) {
      ThrowIfError(colls[r]->WaitInputDist());
      ThrowIfError(colls[r]->ForwardDistributed(out[r].data(), out[r].size()));
      ThrowIfError(colls[r]->Backward(grad[r].data(), grad[r].size()));
      if (k + 1 < kBlock) ThrowIfError(colls[r]->StartInputDist(view(r, k + 1)));
      sync(r);
    }
  };
  auto timed = [&](const std::function<void(int)>& job) {
    auto t = Clock::now();
    threads.Run(job);
    return std::chrono::duration<double>(Clock::now() - t).count() / kBlock;
  };
  timed(plain_block);  // warm-up: first touches of rows and states
  timed(overlapped_block);
  std::vector<double> plain, overlapped;
  for (auto _ : state) {
    plain.push_back(timed(plain_block));
    overlapped.push_back(timed(overlapped_block));
    state.SetIterationTime(overlapped.back());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double p = median(plain), o = median(overlapped);
  state.counters["plain_ms/step"] = p * 1e3;
  state.counters["overlapped_ms/step"] = o * 1e3;
  state.counters["saved_ms/step"] = (p - o) * 1e3;
  state.counters["overlapped/plain"] = o / p;
  threads.Run([&](int r) { colls[r].reset(); });
}

BENCHMARK(BM_StepOverlap)
    ->Arg(256)
    ->Arg(1024)
    ->ArgNames({"batch"})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(8);

}  // namespace
}  // namespace shardrec::replica

BENCHMARK_MAIN();
