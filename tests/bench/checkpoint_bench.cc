// Checkpoint throughput against the disk's own, measured in the same run on the same directory:
//  - BM_Save: a 1-rank collection (one table-wise fp32 table, Adagrad: weights + one state of
//    the same size) saved with checkpoint::Save (temp file, checksums, fsync, rename, manifest),
//    against a plain sequential write of the same number of bytes in 1 MiB pieces + fsync.
//  - BM_Load: checkpoint::Load of that checkpoint with the default options (all-or-nothing:
//    verified chunks read into host staging, the rank agreement, then copied into the shards)
//    against a plain sequential read of the rank file in 1 MiB pieces into one buffer of its
//    size (allocated and touched once, like the collection's arenas).
//  - BM_LoadPartial: the same with allow_partial_load (each chunk verified in a chunk-sized buffer,
//    then copied into the shards), against the same plain read.
// The `vs_plain` counter is checkpoint GB/s over plain GB/s (target >= 0.8), `vs_plain_cpu` the
// same ratio in CPU time of the calling thread. Reads come from the page cache for both sides
// alike; one untimed load first, so both sides write into memory already touched.
// SHARDREC_BENCH_DIR picks the directory (default /tmp).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "impl/checkpoint/checkpoint.h"
#include "impl/comm/factory.h"
#include "impl/embedding/collection.h"
#include "impl/sharding/layout.h"

namespace shardrec::checkpoint {
namespace {

using Clock = std::chrono::steady_clock;

std::string BenchDir() {
  const char* d = std::getenv("SHARDREC_BENCH_DIR");
  return std::string(d && *d ? d : "/tmp") + "/shardrec_ckpt_bench_" + std::to_string(getpid());
}

std::unique_ptr<embedding::EmbeddingCollection> MakeCollection(int64_t mib) {
  auto plan = std::make_shared<sharding::Plan>();
  sharding::TableConfig t;
  t.name = "big";
  t.dim = 128;
  t.rows = (mib << 20) / (2 * 4 * t.dim);  // weights + Adagrad state = `mib` MiB
  t.features = {0};
  plan->features = {{"f", 1.0f}};
  plan->tables = {t};
  plan->table_plans = {sharding::MakeTableWise(t, 0)};
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  if (!comm::CreateLocalGroup(1, comm::CommOptions(), &comms).ok()) return nullptr;
  optim::OptimizerConfig opt;
  opt.type = optim::OptimizerType::kAdagrad;
  std::unique_ptr<embedding::EmbeddingCollection> coll;
  if (!embedding::EmbeddingCollection::Create(plan, std::move(comms[0]), &opt,
                                              embedding::CollectionOptions(), &coll)
           .ok())
    return nullptr;
  return coll;
}

double ThreadCpu() {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double PlainWrite(const std::string& path, const std::vector<char>& piece, size_t bytes) {
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (size_t done = 0; done < bytes; done += piece.size())
    if (::write(fd, piece.data(), std::min(piece.size(), bytes - done)) < 0) std::abort();
  ::fsync(fd);
  ::close(fd);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Reads the file into `dest` (as large as the file, allocated and touched once): a loader must
// place every byte in memory, so the plain read does too.
double PlainRead(const std::string& path, std::vector<char>* dest) {
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY);
  size_t off = 0;
  ssize_t n;
  while (off < dest->size() &&
         (n = ::read(fd, dest->data() + off, std::min<size_t>(1 << 20, dest->size() - off))) > 0)
    off += static_cast<size_t>(n);
  benchmark::DoNotOptimize(dest->data());
  ::close(fd);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

enum class Mode { kSave, kLoad, kLoadPartial, kLoadVerifyFirst };

void Run(benchmark::State& state, Mode mode) {
  const bool save = mode == Mode::kSave;
  LoadOptions lo;
  lo.allow_partial_load = mode == Mode::kLoadPartial || mode == Mode::kLoadVerifyFirst;
  lo.verify_first = mode == Mode::kLoadVerifyFirst;
  auto coll = MakeCollection(state.range(0));
  if (!coll) {
    state.SkipWithError("cannot create the collection");
    return;
  }
  auto fs = PosixFileSystem();
  const std::string dir = BenchDir();
  Group g;
  g.comm = &coll->comm();
  if (!Save(coll->storage(), g, *fs, dir, {}).ok()) {
    state.SkipWithError("save failed");
    return;
  }
  const std::string rank_file = dir + "/g1-rank0.safetensors";
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20;
  std::vector<char> piece(save ? size_t{1} << 20 : bytes + (1 << 20), 1);
  // One load before timing: the optimizer state's arena is untouched until something writes
  // it, and the plain read's buffer is touched, so the first load would also time page faults.
  if (!save && !Load(coll->storage(), g, *fs, dir, lo).ok()) {
    state.SkipWithError("warm-up load failed");
    return;
  }
  double ours = 0, plain = 0, ours_cpu = 0, plain_cpu = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    double c0 = ThreadCpu();
    const Status s =
        save ? Save(coll->storage(), g, *fs, dir, {}) : Load(coll->storage(), g, *fs, dir, lo);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    ours += t;
    ours_cpu += ThreadCpu() - c0;
    state.SetIterationTime(t);
    c0 = ThreadCpu();
    plain += save ? PlainWrite(dir + "/plain.bin", piece, bytes) : PlainRead(rank_file, &piece);
    plain_cpu += ThreadCpu() - c0;
  }
  ::unlink((dir + "/plain.bin").c_str());
  state.counters["GB/s"] = static_cast<double>(bytes) * state.iterations() / ours / 1e9;
  state.counters["plain_GB/s"] = static_cast<double>(bytes) * state.iterations() / plain / 1e9;
  state.counters["vs_plain"] = plain / ours;
  // The same ratio in this thread's CPU time (user + system): on a VM shared with other jobs
  // the wall-clock ratio also measures who got the cores.
  state.counters["vs_plain_cpu"] = plain_cpu / ours_cpu;
  std::system(("rm -rf '" + dir + "'").c_str());
}

void BM_Save(benchmark::State& state) { Run(state, Mode::kSave); }
void BM_Load(benchmark::State& state) { Run(state, Mode::kLoad); }
void BM_LoadPartial(benchmark::State& state) { Run(state, Mode::kLoadPartial); }
void BM_LoadVerifyFirst(benchmark::State& state) { Run(state, Mode::kLoadVerifyFirst); }
BENCHMARK(BM_Save)->Arg(64)->Arg(512)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Load)->Arg(64)->Arg(512)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoadPartial)->Arg(64)->Arg(512)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoadVerifyFirst)->Arg(64)->Arg(512)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace shardrec::checkpoint

BENCHMARK_MAIN();
