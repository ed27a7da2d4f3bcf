// Collectives of the MPI backend against Gloo and against a memory copy, in one run, one rank per
// process under mpirun (mpirun --oversubscribe -np W comm_mpi_bench): all-reduce (fp32 sum) and
// all-to-all-v of 1-64 MiB per rank. Gloo's communicator meets through a unique id that rank 0
// broadcasts over MPI. Every rank runs the same fixed iteration counts (Google Benchmark's own
// choice would differ between processes and deadlock the collectives); rank 0 reports. Counters:
// bus bandwidth in GB/s (NCCL's convention: all-reduce moves 2(W-1)/W of the buffer per rank,
// all-to-all (W-1)/W), and for memcpy the copy rate (bytes read + written per second / 2, i.e.
// the buffer size per second) as the limit both are compared with.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/comm/mpi/mpi_communicator.h"
#include "impl/core/check.h"

namespace shardrec::comm {
namespace {

struct World {
  std::unique_ptr<Communicator> mpi, gloo;
};

World& TheWorld() {
  static World w;
  return w;
}

Communicator* CommFor(int64_t which) {
  return which == 0 ? TheWorld().mpi.get() : TheWorld().gloo.get();
}

int64_t Iterations(size_t bytes) { return bytes >= (size_t{32} << 20) ? 8 : 24; }

void SetBusBandwidth(benchmark::State& state, size_t bytes, double factor) {
  state.counters["busbw_GBps"] = benchmark::Counter(
      factor * static_cast<double>(bytes) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Args: MiB per rank.
void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20;
  std::vector<uint8_t> a(bytes, 1), b(bytes, 0);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  SetBusBandwidth(state, bytes, 1.0);
}

// Args: backend (0 MPI, 1 Gloo), MiB per rank.
void BM_AllReduce(benchmark::State& state) {
  Communicator* c = CommFor(state.range(0));
  const size_t bytes = static_cast<size_t>(state.range(1)) << 20;
  std::vector<float> buf(bytes / sizeof(float), 1.0f);
  ThrowIfError(c->Barrier());
  for (auto _ : state) {
    ThrowIfError(c->AllReduce(buf.data(), buf.data(), buf.size(), DType::kFloat32, ReduceOp::kSum));
  }
  const int w = c->Size();
  SetBusBandwidth(state, bytes, 2.0 * (w - 1) / w);
}

// Small all-reduces, latency-bound (the sharded step's dense and statistics all-reduces are
// 8 B-132 KB). Args: backend (0 MPI, 1 Gloo), bytes per rank.
void BM_AllReduceSmall(benchmark::State& state) {
  Communicator* c = CommFor(state.range(0));
  std::vector<float> buf(static_cast<size_t>(state.range(1)) / sizeof(float), 1.0f);
  ThrowIfError(c->Barrier());
  for (auto _ : state) {
    ThrowIfError(c->AllReduce(buf.data(), buf.data(), buf.size(), DType::kFloat32, ReduceOp::kSum));
  }
  state.counters["us_per_call"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 1e-6,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Args: backend (0 MPI, 1 Gloo), MiB per rank (split evenly over the ranks).
void BM_AllToAllV(benchmark::State& state) {
  Communicator* c = CommFor(state.range(0));
  const size_t bytes = static_cast<size_t>(state.range(1)) << 20;
  const int w = c->Size();
  const std::vector<size_t> counts(w, bytes / sizeof(float) / w);
  std::vector<float> send(counts[0] * w, 1.0f), recv(send.size());
  ThrowIfError(c->Barrier());
  for (auto _ : state) {
    ThrowIfError(c->AllToAllV(send.data(), counts, recv.data(), counts, DType::kFloat32));
  }
  SetBusBandwidth(state, bytes, static_cast<double>(w - 1) / w);
}

void Register() {
  for (int64_t bytes : {8, 1024, 16384, 131072}) {
    for (int64_t backend : {0, 1}) {
      benchmark::RegisterBenchmark(
          backend == 0 ? "BM_AllReduceSmall/mpi" : "BM_AllReduceSmall/gloo", BM_AllReduceSmall)
          ->Args({backend, bytes})
          ->Iterations(400)
          ->UseRealTime();
    }
  }
  for (int64_t mib : {1, 4, 16, 64}) {
    const int64_t iters = Iterations(static_cast<size_t>(mib) << 20);
    benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy)
        ->Arg(mib)
        ->Iterations(iters)
        ->UseRealTime();
    for (int64_t backend : {0, 1}) {
      benchmark::RegisterBenchmark(backend == 0 ? "BM_AllReduce/mpi" : "BM_AllReduce/gloo",
                                   BM_AllReduce)
          ->Args({backend, mib})
          ->Iterations(iters)
          ->UseRealTime();
      benchmark::RegisterBenchmark(backend == 0 ? "BM_AllToAllV/mpi" : "BM_AllToAllV/gloo",
                                   BM_AllToAllV)
          ->Args({backend, mib})
          ->Iterations(iters)
          ->UseRealTime();
    }
  }
}

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace
}  // namespace shardrec::comm

int main(int argc, char** argv) {
  using namespace shardrec::comm;
  benchmark::Initialize(&argc, argv);
  World& w = TheWorld();
  shardrec::Status s = mpi::CreateMpiCommunicator(0, shardrec::Device::Host(),
                                                  std::chrono::milliseconds(120000), &w.mpi);
  if (!s.ok()) {
    std::fprintf(stderr, "comm_mpi_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  // Gloo through a unique id that rank 0 creates and broadcasts over MPI.
  UniqueId id;
  if (w.mpi->Rank() == 0) shardrec::ThrowIfError(CreateUniqueId(&id));
  shardrec::ThrowIfError(w.mpi->Broadcast(id.bytes, sizeof(id.bytes), shardrec::DType::kUInt8, 0));
  CommOptions o;
  o.backend = Backend::kGloo;
  o.timeout = std::chrono::milliseconds(120000);
  shardrec::ThrowIfError(
      CreateCommunicatorFromUniqueId(id, w.mpi->Size(), w.mpi->Rank(), o, &w.gloo));
  Register();
  if (w.mpi->Rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  shardrec::ThrowIfError(w.mpi->Barrier());
  w.gloo.reset();
  w.mpi.reset();
  benchmark::Shutdown();
  return 0;
}
