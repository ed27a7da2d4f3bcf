// The small collectives a training step and the DDP dense sync issue (the step's one-integer
// agreements, a 64-byte broadcast, a barrier, a 1 MiB gradient bucket's sum), ranks as threads of
// one host, over the shared-memory transport and over Gloo's loopback TCP (SHARDREC_SHM=0 while
// the group is created) in the same run. Reported per call; each call's time is the slowest
// rank's.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "impl/comm/factory.h"
#include "tests/bench/rank_threads.h"

namespace shardrec::comm {
namespace {

using bench::RankThreads;

enum Op { kAgree = 0, kBroadcast64 = 1, kBarrier = 2, kBucket1MiB = 3 };

const char* OpName(int op) {
  switch (op) {
    case kAgree:
      return "allreduce 1 x int64 (max)";
    case kBroadcast64:
      return "broadcast 64 B";
    case kBarrier:
      return "barrier";
    default:
      return "allreduce 1 MiB fp32 (sum)";
  }
}

// Args: world, op, shared memory (1) or Gloo (0).
void BM_Small(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const int op = static_cast<int>(state.range(1));
  const bool shm = state.range(2) != 0;
  if (!shm) ::setenv("SHARDREC_SHM", "0", 1);
  std::vector<std::unique_ptr<Communicator>> comms;
  const Status made = CreateLocalGroup(world, CommOptions(), &comms);
  ::unsetenv("SHARDREC_SHM");
  if (!made.ok()) {
    state.SkipWithError("no local group");
    return;
  }
  std::vector<std::vector<float>> bufs(world, std::vector<float>(size_t{1} << 18, 1.0f));
  RankThreads threads(world);
  for (auto _ : state) {
    threads.Run([&](int r) {
      Communicator& c = *comms[r];
      float* b = bufs[r].data();
      int64_t v = r;
      switch (op) {
        case kAgree:
          ThrowIfError(c.AllReduce(&v, &v, 1, DType::kInt64, ReduceOp::kMax));
          break;
        case kBroadcast64:
          ThrowIfError(c.Broadcast(b, 16, DType::kFloat32, 0));
          break;
        case kBarrier:
          ThrowIfError(c.Barrier());
          break;
        default:
          ThrowIfError(c.AllReduce(b, b, bufs[r].size(), DType::kFloat32, ReduceOp::kAvg));
          break;
      }
    });
  }
  state.SetLabel(std::string(OpName(op)) + (shm ? ", shm" : ", gloo"));
}

void Cases(benchmark::internal::Benchmark* b) {
  for (int world : {2, 4})
    for (int op : {kAgree, kBroadcast64, kBarrier, kBucket1MiB})
      for (int shm : {0, 1}) b->Args({world, op, shm});
}

BENCHMARK(BM_Small)->Apply(Cases)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace shardrec::comm

BENCHMARK_MAIN();
