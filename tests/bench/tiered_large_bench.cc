// A tiered table larger than the machine's memory trains (docs/disk-tier.md, issue 62): one
// row-wise Adagrad table of `rows` x `dim` fp32 (its rows and state `rows * (4 * dim + 4)` bytes)
// on one rank under a DRAM cache of `cache_mb`, through the public C API. Each step reads a batch
// of `batch` bags of 16 ids: `hot_share` of them uniform over the first `hot_rows` rows (rows that
// come back, so misses read the disk), the rest uniform over the whole table (rows mostly never
// seen, so the table's records on disk grow by about a batch per step once the cache is full).
// Prints every `every` steps the step time, the process's resident memory now and at most
// (VmRSS, VmHWM), the tier's counters and the store's bytes on disk. Run it under a memory
// limit (`prlimit --as=...`) to show that the process never maps more than its cache and overhead.
//
// Usage: tiered_large_bench DIR [rows=60e6] [dim=128] [cache_mb=2048] [steps=400] [batch=8192]
//                                [hot_rows=4e6] [hot_share=0.25] [every=25]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/bench/capi_bench_util.h"
#include "tests/bench/tiered_bench_util.h"

namespace {

using shardrec::bench::Check;
using shardrec::bench::OneTablePlan;
using Clock = std::chrono::steady_clock;

constexpr int32_t kBag = 16;

// kB of /proc/self/status's `key` (VmRSS, VmHWM, VmPeak).
long StatusKb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string k;
  long v = 0;
  while (in >> k) {
    if (k == std::string(key) + ":") {
      in >> v;
      return v;
    }
  }
  return -1;
}

double Arg(int argc, char** argv, int i, double def) { return argc > i ? std::atof(argv[i]) : def; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: tiered_large_bench DIR [rows] [dim] [cache_mb] [steps] [batch] "
                 "[hot_rows] [hot_share] [every]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const auto rows = static_cast<int64_t>(Arg(argc, argv, 2, 60e6));
  const auto dim = static_cast<int32_t>(Arg(argc, argv, 3, 128));
  const auto cache_mb = static_cast<int64_t>(Arg(argc, argv, 4, 2048));
  const int steps = static_cast<int>(Arg(argc, argv, 5, 400));
  const auto batch = static_cast<int64_t>(Arg(argc, argv, 6, 8192));
  const auto hot_rows = static_cast<int64_t>(Arg(argc, argv, 7, 4e6));
  const double hot_share = Arg(argc, argv, 8, 0.25);
  const int every = static_cast<int>(Arg(argc, argv, 9, 25));
  if (rows < 1 || dim < 1 || cache_mb < 1 || steps < 1 || batch < 1 || hot_rows < 1 ||
      hot_rows > rows || hot_share < 0 || hot_share > 1 || every < 1) {
    std::fprintf(stderr, "tiered_large_bench: an argument is out of range\n");
    return 2;
  }
  shardrec_plan_t* plan = OneTablePlan(rows, dim, kBag, 1, batch, nullptr, 0);
  shardrec_comm_t* comm = nullptr;
  Check(shardrec_comm_create_local_group(&comm, 1, nullptr), "comm");
  shardrec_table_tier_t tier = SHARDREC_TABLE_TIER_INIT;
  tier.table = "t";
  tier.dir = dir.c_str();
  tier.cache_bytes = static_cast<uint64_t>(cache_mb) << 20;
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.tiers = &tier;
  o.num_tiers = 1;
  shardrec_embedding_t* c = nullptr;
  Check(shardrec_embedding_create(&c, plan, comm, nullptr, &o), "create");
  const double table_gb = static_cast<double>(rows) * (4.0 * dim + 4) / 1e9;
  std::printf(
      "table %lld rows x %d fp32 + row-wise Adagrad: %.1f GB of rows and state; cache %lld "
      "MiB; batch %lld x %d ids (%.0f %% over the first %lld rows); RSS after create %ld "
      "MiB\n",
      static_cast<long long>(rows), dim, table_gb, static_cast<long long>(cache_mb),
      static_cast<long long>(batch), kBag, hot_share * 100, static_cast<long long>(hot_rows),
      StatusKb("VmRSS") / 1024);
  std::printf("%6s %9s %9s %9s %7s %11s %10s %10s %10s %9s\n", "step", "step_ms", "rss_MiB",
              "hwm_MiB", "hit", "disk_rd/st", "written", "queue_max", "disk_GB", "exposed");
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int32_t> lengths(static_cast<size_t>(batch), kBag);
  std::vector<int64_t> ids(static_cast<size_t>(batch * kBag));
  std::vector<float> out(static_cast<size_t>(batch * dim)), grad(out.size(), 1e-3f);
  shardrec_tier_stats_t st, prev;
  shardrec_tier_stats_init(&prev, SHARDREC_TIER_STATS_VERSION);
  double window = 0;
  const auto start = Clock::now();
  for (int s = 1; s <= steps; ++s) {
    for (int64_t& id : ids) {
      const bool hot = u(rng) < hot_share;
      id = static_cast<int64_t>(rng() % static_cast<uint64_t>(hot ? hot_rows : rows));
    }
    shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
    v.batch_size = batch;
    v.num_features = 1;
    v.lengths = lengths.data();
    v.num_lengths = lengths.size();
    v.values = ids.data();
    v.values_dtype = SHARDREC_DTYPE_INT64;
    v.num_values = ids.size();
    const auto t0 = Clock::now();
    Check(shardrec_embedding_forward(c, &v, out.data(), out.size(), nullptr), "forward");
    Check(shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr), "backward");
    window += std::chrono::duration<double>(Clock::now() - t0).count();
    if (s % every == 0 || s == steps) {
      shardrec_tier_stats_init(&st, SHARDREC_TIER_STATS_VERSION);
      Check(shardrec_embedding_tier_stats(c, "t", &st), "stats");
      const int64_t n = s % every == 0 ? every : s % every;
      const int64_t seen = (st.hits - prev.hits) + (st.misses - prev.misses);
      std::printf(
          "%6d %9.1f %9ld %9ld %7.3f %11.0f %10lld %10lld %10.2f %9.1f\n", s,
          window / static_cast<double>(n) * 1e3, StatusKb("VmRSS") / 1024, StatusKb("VmHWM") / 1024,
          seen > 0 ? static_cast<double>(st.hits - prev.hits) / static_cast<double>(seen) : 0.0,
          static_cast<double>(st.disk_reads - prev.disk_reads) / static_cast<double>(n),
          static_cast<long long>(st.written), static_cast<long long>(st.queue_max_depth),
          static_cast<double>(st.disk_bytes) / 1e9,
          (st.exposed_fetch_seconds - prev.exposed_fetch_seconds) / static_cast<double>(n) * 1e3);
      std::fflush(stdout);
      prev = st;
      window = 0;
    }
  }
  std::printf(
      "%d steps in %.0f s; max RSS %ld MiB, peak virtual %ld MiB; cache %lld slots, %.2f "
      "GB; records on disk %.2f GB; bytes read per disk read %.0f\n",
      steps, std::chrono::duration<double>(Clock::now() - start).count(), StatusKb("VmHWM") / 1024,
      StatusKb("VmPeak") / 1024, static_cast<long long>(st.cache_slots),
      static_cast<double>(st.cache_bytes) / 1e9, static_cast<double>(st.disk_bytes) / 1e9,
      st.disk_reads > 0
          ? static_cast<double>(st.disk_read_bytes) / static_cast<double>(st.disk_reads)
          : 0.0);
  shardrec_embedding_destroy(c);
  shardrec_comm_destroy(comm);
  shardrec_plan_destroy(plan);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
