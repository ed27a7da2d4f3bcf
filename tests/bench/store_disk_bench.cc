// The disk store's reads against the disk's own limit (issue 62: at least 0.7x): batched random
// Gets of 128-512 B records at queue depth 32 (BM_StoreGet, records/s), and a plain io_uring loop
// of random 4 KiB O_DIRECT reads at queue depth 32 over a file of the same size on the same disk
// (BM_PlainUring4k, reads/s). A miss reads one page, so the two rates compare directly; the
// store's bytes read per record are a counter. The files live under SHARDREC_BENCH_DIR (default
// /var/tmp), 1 GiB per record size, made once per run and removed at exit.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "impl/store/log_store.h"

namespace {

using shardrec::store::LogStore;
using shardrec::store::LogTuning;
using shardrec::store::StoreOptions;

constexpr uint64_t kDataBytes = uint64_t{1} << 30;
constexpr int kDepth = 32;
constexpr size_t kBatch = 512;  // keys per Get

// Never destroyed: the exit handler that removes the files runs after static destructors.
const std::string& Root() {
  static const std::string* root = [] {
    const char* env = std::getenv("SHARDREC_BENCH_DIR");
    const std::string base = env != nullptr ? env : "/var/tmp";
    auto* dir = new std::string(base + "/shardrec_store_bench_" + std::to_string(getpid()));
    std::filesystem::create_directories(*dir);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(Root(), ec);
    });
    return dir;
  }();
  return *root;
}

struct Filled {
  std::unique_ptr<LogStore> store;
  int64_t records = 0;
  uint64_t disk_bytes = 0;
};

Filled& StoreOf(size_t value_bytes) {
  static std::map<size_t, Filled> made;
  Filled& f = made[value_bytes];
  if (f.store) return f;
  StoreOptions o;
  o.dir = Root() + "/store" + std::to_string(value_bytes);
  o.identity = "bench";
  o.value_bytes = value_bytes;
  o.queue_depth = kDepth;
  LogTuning t;
  t.compact_interval_ms = 1000000;
  if (!shardrec::store::OpenLogStore(o, t, &f.store).ok()) std::abort();
  f.records = static_cast<int64_t>(kDataBytes / (value_bytes + 16));
  std::vector<int64_t> keys(4096);
  std::vector<uint8_t> values(keys.size() * value_bytes, 0x5a);
  for (int64_t at = 0; at < f.records; at += static_cast<int64_t>(keys.size())) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(keys.size(), f.records - at));
    for (size_t i = 0; i < n; ++i) keys[i] = at + static_cast<int64_t>(i);
    if (!f.store->Put(keys.data(), values.data(), n).ok()) std::abort();
  }
  if (!f.store->Flush().ok()) std::abort();
  f.disk_bytes = static_cast<uint64_t>(f.store->stats().disk_bytes);
  return f;
}

void BM_StoreGet(benchmark::State& state) {
  const size_t value_bytes = static_cast<size_t>(state.range(0));
  Filled& f = StoreOf(value_bytes);
  std::mt19937_64 rng(value_bytes);
  std::vector<int64_t> keys(kBatch);
  std::vector<uint8_t> out(kBatch * value_bytes);
  std::unique_ptr<bool[]> found(new bool[kBatch]);
  const auto before = f.store->stats();
  for (auto _ : state) {
    for (int64_t& k : keys) k = static_cast<int64_t>(rng() % static_cast<uint64_t>(f.records));
    if (!f.store->Get(keys.data(), kBatch, out.data(), found.get()).ok()) {
      state.SkipWithError("Get failed");
      break;
    }
  }
  const auto after = f.store->stats();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  const double reads = static_cast<double>(after.reads - before.reads);
  state.counters["bytes_per_miss"] =
      reads > 0 ? static_cast<double>(after.read_bytes - before.read_bytes) / reads : 0;
  state.counters["useful_fraction"] =
      static_cast<double>(value_bytes) / std::max(1.0, state.counters["bytes_per_miss"].value);
  state.counters["direct_io"] = after.direct_io ? 1 : 0;
  state.counters["io_uring"] = f.store->uses_io_uring() ? 1 : 0;
  state.counters["file_GiB"] = static_cast<double>(f.disk_bytes) / (1 << 30);
}
BENCHMARK(BM_StoreGet)->Arg(128)->Arg(256)->Arg(512)->UseRealTime()->MinTime(3);

// The plain loop: one file of the 512 B store's size, written with real data (a hole would be
// read without touching the disk), random page-aligned 4 KiB O_DIRECT reads, QD 32.
void BM_PlainUring4k(benchmark::State& state) {
  static std::string path;
  static uint64_t bytes = 0;
  if (path.empty()) {
    bytes = StoreOf(512).disk_bytes / 4096 * 4096;
    path = Root() + "/plain.dat";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<uint8_t> buf(1 << 20, 0xa5);
    for (uint64_t at = 0; at < bytes; at += buf.size()) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - at));
      if (::pwrite(fd, buf.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) {
        std::abort();
      }
    }
    ::fsync(fd);
    ::close(fd);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) {
    state.SkipWithError("O_DIRECT refused here");
    return;
  }
  io_uring ring;
  if (io_uring_queue_init(kDepth, &ring, 0) != 0) {
    state.SkipWithError("no io_uring here");
    ::close(fd);
    return;
  }
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, kDepth * 4096) != 0) std::abort();
  uint8_t* bufs = static_cast<uint8_t*>(mem);
  std::mt19937_64 rng(1);
  const uint64_t pages = bytes / 4096;
  int64_t done = 0;
  for (auto _ : state) {
    // kBatch reads per iteration, as many as one Get above.
    size_t submitted = 0, completed = 0;
    unsigned inflight = 0;
    while (completed < kBatch) {
      while (submitted < kBatch && inflight < kDepth) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        const unsigned slot = static_cast<unsigned>(submitted % kDepth);
        io_uring_prep_read(sqe, fd, bufs + slot * 4096, 4096, (rng() % pages) * 4096);
        ++submitted;
        ++inflight;
      }
      io_uring_submit_and_wait(&ring, 1);
      io_uring_cqe* cqe = nullptr;
      unsigned head = 0, seen = 0;
      io_uring_for_each_cqe(&ring, head, cqe) {
        if (cqe->res != 4096) state.SkipWithError("short read");
        ++seen;
      }
      io_uring_cq_advance(&ring, seen);
      completed += seen;
      inflight -= seen;
    }
    done += kBatch;
  }
  state.SetItemsProcessed(done);
  state.counters["file_GiB"] = static_cast<double>(bytes) / (1 << 30);
  free(mem);
  io_uring_queue_exit(&ring);
  ::close(fd);
}
BENCHMARK(BM_PlainUring4k)->UseRealTime()->MinTime(3);

}  // namespace

BENCHMARK_MAIN();
