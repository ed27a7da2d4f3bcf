// Serving a table from the checkpoint's files through a row cache (shardrec_serving_tier_t)
// against the same checkpoint opened in memory, through the public C API: one fp32 table of
// 1M rows x dim 64 (256 MiB) saved by a world-1 collection, requests of 512 samples with bags of
// 20 Zipf ids (alpha 0.8, 1.05 and 1.2), a cache of 10 % of the rows; samples per second on 1 and
// 4 threads, interleaved rounds (median and range), with the cache's hit rate, reads per request
// and bytes read per miss. The checkpoint's file is in the page cache after open (it is read
// once to verify), so a miss is a pread from the page cache here, not a disk read: the figure is
// the cache's own cost. With "cold", the checkpoint's pages are dropped from the page cache
// (POSIX_FADV_DONTNEED, no root needed) after each round's warm-up, so the measured misses read
// the disk until their pages are back in the page cache.
// Usage: serving_tier_bench [rounds=3] [dir=/tmp] [cold]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kRows = 1'000'000;
constexpr int32_t kDim = 64;
constexpr int64_t kBatch = 512;
constexpr int32_t kBag = 20;
constexpr int kRequests = 16;  // in rotation

void Check(shardrec_status_t rc, const char* what) {
  if (rc != SHARDREC_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, shardrec_last_error());
    std::exit(1);
  }
}

struct Request {
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  shardrec_kjt_view_t view = SHARDREC_KJT_VIEW_INIT;
};

// Zipf(alpha) ranks by inverse transform over the cumulative weights, each rank scattered to a
// row by a fixed permutation (hot rows are not neighbours).
std::vector<Request> MakeRequests(double alpha, uint64_t seed) {
  std::vector<double> cdf(kRows);
  double sum = 0;
  for (int64_t k = 0; k < kRows; ++k) cdf[k] = sum += std::pow(static_cast<double>(k + 1), -alpha);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> perm(kRows);
  for (int64_t k = 0; k < kRows; ++k) perm[k] = k;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<Request> out(kRequests);
  for (Request& r : out) {
    r.lengths.assign(kBatch, kBag);
    for (int64_t i = 0; i < kBatch * kBag; ++i) {
      const auto k = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      r.ids.push_back(perm[std::min<int64_t>(k, kRows - 1)]);
    }
    r.view.batch_size = kBatch;
    r.view.num_features = 1;
    r.view.lengths = r.lengths.data();
    r.view.num_lengths = r.lengths.size();
    r.view.values = r.ids.data();
    r.view.values_dtype = SHARDREC_DTYPE_INT64;
    r.view.num_values = r.ids.size();
  }
  return out;
}

std::string SaveCheckpoint(const std::string& root) {
  const std::string dir = root + "/ckpt";
  shardrec_feature_config_t f = SHARDREC_FEATURE_CONFIG_INIT;
  f.name = "f";
  f.pooling_factor = kBag;
  int32_t fi = 0;
  shardrec_table_config_t t = SHARDREC_TABLE_CONFIG_INIT;
  t.name = "t";
  t.rows = kRows;
  t.dim = kDim;
  t.features = &fi;
  t.num_features = 1;
  shardrec_topology_t topo = SHARDREC_TOPOLOGY_INIT;
  shardrec_plan_t* plan = nullptr;
  Check(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, nullptr, 0), "plan");
  shardrec_comm_t* comm = nullptr;
  Check(shardrec_comm_create_local_group(&comm, 1, nullptr), "comm");
  shardrec_embedding_t* coll = nullptr;
  Check(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr), "collection");
  Check(shardrec_checkpoint_save(coll, dir.c_str(), nullptr), "checkpoint save");
  shardrec_embedding_destroy(coll);
  shardrec_comm_destroy(comm);
  shardrec_plan_destroy(plan);
  return dir;
}

shardrec_inference_t* Open(const std::string& dir, uint64_t cache_bytes) {
  shardrec_serving_tier_t tier = SHARDREC_SERVING_TIER_INIT;
  tier.table = "t";
  tier.cache_bytes = cache_bytes;
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.tiers = cache_bytes > 0 ? &tier : nullptr;
  o.num_tiers = cache_bytes > 0 ? 1 : 0;
  shardrec_inference_t* inf = nullptr;
  Check(shardrec_inference_open(dir.c_str(), &o, &inf), "inference open");
  return inf;
}

// Samples per second of `threads` threads each looking up `per_thread` requests.
double Throughput(shardrec_inference_t* inf, const std::vector<Request>& reqs, int threads,
                  int per_thread) {
  std::vector<std::thread> pool;
  const auto t0 = Clock::now();
  for (int th = 0; th < threads; ++th) {
    pool.emplace_back([&, th] {
      std::vector<float> out(static_cast<size_t>(kBatch * kDim));
      for (int i = 0; i < per_thread; ++i) {
        const Request& r = reqs[static_cast<size_t>(i + th) % reqs.size()];
        Check(shardrec_inference_lookup(inf, &r.view, out.data(), out.size(), nullptr), "lookup");
      }
    });
  }
  for (auto& t : pool) t.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(threads) * per_thread * kBatch / s;
}

// Drops the pages of every file under `dir` from the page cache (clean pages: nothing is lost).
void DropPages(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  const std::string base = argc > 2 ? argv[2] : "/tmp";
  const bool cold = argc > 3 && std::string(argv[3]) == "cold";
  const std::string root = base + "/shardrec_serving_tier_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(root);
  const std::string dir = SaveCheckpoint(root);
  const uint64_t row_bytes = kDim * 4;
  const uint64_t cache = kRows / 10 * (row_bytes + 64);  // 10 % of the rows
  std::printf("table %lld x %d fp32, batch %lld x bag %d, cache %.1f MiB (10 %% of the rows)\n",
              static_cast<long long>(kRows), kDim, static_cast<long long>(kBatch), kBag,
              static_cast<double>(cache) / (1 << 20));
  if (cold) std::printf("cold: the checkpoint's pages dropped before each measured round\n");
  std::printf(
      "alpha threads | memory samples/s | tiered samples/s (range) | tiered/memory | "
      "hit rate | reads/request | bytes read/miss\n");
  shardrec_inference_t* mem = Open(dir, 0);
  for (double alpha : {0.8, 1.05, 1.2}) {
    const std::vector<Request> reqs = MakeRequests(alpha, 7);
    for (int threads : {1, 4}) {
      std::vector<double> m, t, ratio;
      double hit = 0, reads = 0, per_miss = 0;
      for (int round = 0; round < rounds; ++round) {
        shardrec_inference_t* disk = Open(dir, cache);
        Throughput(disk, reqs, 1, kRequests);  // warm the cache once over the rotation
        Throughput(mem, reqs, 1, 4);
        shardrec_serving_tier_stats_t s0 = SHARDREC_SERVING_TIER_STATS_INIT;
        Check(shardrec_inference_tier_stats(disk, "t", &s0), "stats");
        const int n = 40;
        m.push_back(Throughput(mem, reqs, threads, n));  // interleaved
        if (cold) DropPages(dir);
        t.push_back(Throughput(disk, reqs, threads, n));
        ratio.push_back(t.back() / m.back());
        shardrec_serving_tier_stats_t s = SHARDREC_SERVING_TIER_STATS_INIT;
        Check(shardrec_inference_tier_stats(disk, "t", &s), "stats");
        const double seen = static_cast<double>(s.hits - s0.hits + s.misses - s0.misses);
        hit = seen > 0 ? static_cast<double>(s.hits - s0.hits) / seen : 0;
        reads = static_cast<double>(s.disk_reads - s0.disk_reads) / (threads * n);
        per_miss = s.misses > s0.misses
                       ? static_cast<double>(s.disk_read_bytes - s0.disk_read_bytes) /
                             static_cast<double>(s.misses - s0.misses)
                       : 0;
        shardrec_inference_destroy(disk);
      }
      std::printf("%.2f %d | %.0f | %.0f (%.0f-%.0f) | %.2f (%.2f-%.2f) | %.3f | %.0f | %.0f\n",
                  alpha, threads, Median(m), Median(t), *std::min_element(t.begin(), t.end()),
                  *std::max_element(t.begin(), t.end()), Median(ratio),
                  *std::min_element(ratio.begin(), ratio.end()),
                  *std::max_element(ratio.begin(), ratio.end()), hit, reads, per_miss);
    }
  }
  shardrec_inference_destroy(mem);
  std::filesystem::remove_all(root);
  return 0;
}
