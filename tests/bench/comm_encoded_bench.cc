// The embedding collectives with fp16/bf16 wire encoding (impl/comm/encoded.h) against the exact
// fp32 collectives on the same buffers, ranks as threads over Gloo on loopback: the all-to-all of
// a pooled output (every rank sends `floats` floats in total, split evenly over the ranks) and
// the sum all-reduce of a data-parallel gradient, plus the encode and decode passes alone.
// Reported per call, in the same run; each call's time is the slowest rank's.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "impl/comm/encoded.h"
#include "impl/comm/factory.h"
#include "tests/bench/rank_threads.h"

namespace shardrec::comm {
namespace {

using bench::RankThreads;

struct Group {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::vector<float>> send, recv;
  std::vector<EncodedScratch> scratch;
};

bool MakeGroup(int world, size_t floats, Group* g) {
  if (!CreateLocalGroup(world, CommOptions(), &g->comms).ok()) return false;
  g->send.resize(world);
  g->recv.resize(world);
  g->scratch.resize(world);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int r = 0; r < world; ++r) {
    g->send[r].resize(floats);
    for (float& x : g->send[r]) x = u(gen);
    g->recv[r].resize(floats);
  }
  return true;
}

// Args: world, floats per rank (millions / 4), encoding.
void BM_AllToAll(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const size_t floats = static_cast<size_t>(state.range(1)) << 18;
  const auto enc = static_cast<Encoding>(state.range(2));
  Group g;
  if (!MakeGroup(world, floats, &g)) {
    state.SkipWithError("no local group");
    return;
  }
  const std::vector<size_t> counts(world, floats / world);
  RankThreads threads(world);
  for (auto _ : state) {
    threads.Run([&](int r) {
      ThrowIfError(EncodedAllToAllV(*g.comms[r], enc, g.send[r].data(), counts, g.recv[r].data(),
                                    counts, &g.scratch[r]));
    });
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * floats * 4));
  state.SetLabel(EncodingName(enc));
}

void BM_AllReduce(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const size_t floats = static_cast<size_t>(state.range(1)) << 18;
  const auto enc = static_cast<Encoding>(state.range(2));
  Group g;
  if (!MakeGroup(world, floats, &g)) {
    state.SkipWithError("no local group");
    return;
  }
  RankThreads threads(world);
  for (auto _ : state) {
    threads.Run([&](int r) {
      ThrowIfError(EncodedAllReduceSum(*g.comms[r], enc, g.send[r].data(), floats, &g.scratch[r]));
    });
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * floats * 4));
  state.SetLabel(EncodingName(enc));
}

// One thread: the encode pass and the decode pass over `floats` floats.
void BM_EncodeDecode(benchmark::State& state) {
  const size_t floats = static_cast<size_t>(state.range(0)) << 18;
  const auto enc = static_cast<Encoding>(state.range(1));
  std::vector<float> src(floats, 0.3f), dst(floats);
  std::vector<uint16_t> wire(floats);
  for (auto _ : state) {
    EncodeFloats(enc, src.data(), floats, wire.data());
    DecodeFloats(enc, wire.data(), floats, dst.data());
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * floats * 4));
  state.SetLabel(EncodingName(enc));
}

void Worlds(benchmark::internal::Benchmark* b) {
  for (int world : {2, 4})
    for (int e : {0, 2, 1}) b->Args({world, 4, e});  // 1 Mi floats (4 MiB) per rank
}

BENCHMARK(BM_AllToAll)->Apply(Worlds)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AllReduce)->Apply(Worlds)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeDecode)->Args({4, 2})->Args({4, 1})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace shardrec::comm

BENCHMARK_MAIN();
