// The open of a table served from a checkpoint's files (shardrec_serving_tier_t, docs/disk-tier.md
// "Serving a tiered checkpoint"), through the public C API: one fp32 table of 1M rows x dim 64
// (256 MiB) saved by a world-1 collection, opened tiered as trained (the records verified and
// their unit checksums taken) and as int8 (every row also encoded once to find rows it cannot
// hold), warm (the checkpoint in the page cache) and cold (its pages dropped first with
// POSIX_FADV_DONTNEED, no root needed, so open reads the disk). Seconds per open: median and
// range over interleaved rounds, and the bytes the process read during each open (/proc/self/io
// rchar: page-cache hits included, so it counts reads, not disk traffic).
// Usage: serving_open_bench [rounds=5] [dir=/tmp]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "shardrec/shardrec.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kRows = 1'000'000;
constexpr int32_t kDim = 64;

void Check(shardrec_status_t rc, const char* what) {
  if (rc != SHARDREC_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, shardrec_last_error());
    std::exit(1);
  }
}

std::string SaveCheckpoint(const std::string& root) {
  const std::string dir = root + "/ckpt";
  shardrec_feature_config_t f = SHARDREC_FEATURE_CONFIG_INIT;
  f.name = "f";
  f.pooling_factor = 20;
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

// The bytes this process has read through read(2)/pread(2) so far.
uint64_t ReadChars() {
  char text[1024];
  const int fd = ::open("/proc/self/io", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  text[n > 0 ? n : 0] = '\0';
  const char* at = std::strstr(text, "rchar:");
  return at ? std::strtoull(at + 6, nullptr, 10) : 0;
}

// Seconds of one tiered open (and its destroy, untimed); *read gets the bytes it read.
double TimeOpen(const std::string& dir, int32_t storage, uint64_t* read) {
  shardrec_serving_tier_t tier = SHARDREC_SERVING_TIER_INIT;
  tier.table = "t";
  tier.cache_bytes = 64 << 20;
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.default_storage = storage;
  o.tiers = &tier;
  o.num_tiers = 1;
  shardrec_inference_t* inf = nullptr;
  const uint64_t r0 = ReadChars();
  const auto t0 = Clock::now();
  Check(shardrec_inference_open(dir.c_str(), &o, &inf), "inference open");
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  *read = ReadChars() - r0;
  shardrec_inference_destroy(inf);
  return s;
}

void DropPages(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const std::string base = argc > 2 ? argv[2] : "/tmp";
  const std::string root = base + "/shardrec_serving_open_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(root);
  const std::string dir = SaveCheckpoint(root);
  std::printf("table %lld x %d fp32 (%.0f MiB), %d rounds\n", static_cast<long long>(kRows), kDim,
              static_cast<double>(kRows) * kDim * 4 / (1 << 20), rounds);
  std::printf("storage cache | open s median (range) | MiB read per open\n");
  const struct {
    int32_t storage;
    const char* name;
  } storages[] = {{SHARDREC_SERVING_AS_TRAINED, "as-trained"}, {SHARDREC_SERVING_INT8, "int8"}};
  for (const bool cold : {false, true}) {
    std::vector<std::vector<double>> secs(2);
    std::vector<uint64_t> bytes(2);
    uint64_t unused = 0;
    TimeOpen(dir, SHARDREC_SERVING_AS_TRAINED, &unused);  // the pages in (warm) or a first open
    for (int round = 0; round < rounds; ++round)
      for (size_t k = 0; k < 2; ++k) {
        if (cold) DropPages(dir);
        secs[k].push_back(TimeOpen(dir, storages[k].storage, &bytes[k]));
      }
    for (size_t k = 0; k < 2; ++k) {
      std::vector<double> v = secs[k];
      std::sort(v.begin(), v.end());
      std::printf("%s %s | %.3f (%.3f-%.3f) | %.1f\n", storages[k].name, cold ? "cold" : "warm",
                  v[v.size() / 2], v.front(), v.back(), static_cast<double>(bytes[k]) / (1 << 20));
    }
  }
  std::filesystem::remove_all(root);
  return 0;
}
