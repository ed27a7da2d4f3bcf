// Serving lookups through the public C API (shardrec/inference.h), on tables opened from a
// training checkpoint as fp32, int8, int4 and FP8 (E4M3, E5M2): throughput at batch 512 and latency
// at batch 1 and 16; the int8 pooled lookup against the gather roof of the same bytes, measured in
// the same run (a plain loop that reads every id's row of an int8 table of the same shape and sums
// its bytes); one thread against two on one handle; and p99 latency while another thread reloads
// the handle from a serving file against p99 without. The summary at the end prints each ratio
// beside its target (issue 32). Tables: 4 x 250k rows x dim 128 (512 MiB fp32, 136 MiB int8),
// bags of 16-24 ids per sample and table, random ids. And a request of one user and 200 candidate
// items (issue 64) as a VBE batch against the same batch with the user's features repeated.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTables = 4;
constexpr int64_t kRows = 250000;
constexpr int32_t kDim = 128;
constexpr int kBatchesInRotation = 8;

void Check(shardrec_status_t rc, const char* what) {
  if (rc != SHARDREC_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, shardrec_last_error());
    std::abort();
  }
}

// Feature-major lengths and ids of one request, ready as a KJT view.
struct Request {
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  shardrec_kjt_view_t view = SHARDREC_KJT_VIEW_INIT;
};

std::vector<Request> MakeRequests(int64_t batch, uint64_t seed) {
  std::vector<Request> out(kBatchesInRotation);
  std::mt19937_64 rng(seed);
  for (Request& r : out) {
    for (int t = 0; t < kTables; ++t) {
      for (int64_t b = 0; b < batch; ++b) {
        const int32_t len = 16 + static_cast<int32_t>(rng() % 9);
        r.lengths.push_back(len);
        for (int32_t i = 0; i < len; ++i) r.ids.push_back(static_cast<int64_t>(rng() % kRows));
      }
    }
    r.view.batch_size = batch;
    r.view.num_features = kTables;
    r.view.lengths = r.lengths.data();
    r.view.num_lengths = r.lengths.size();
    r.view.values = r.ids.data();
    r.view.values_dtype = SHARDREC_DTYPE_INT64;
    r.view.num_values = r.ids.size();
  }
  return out;
}

// The checkpoint every handle opens (written once by a world-1 training collection), the
// handles, and an int8 serving file for the reload benchmark.
struct Fixture {
  std::string root, dir, serving_file;
  std::map<int32_t, shardrec_inference_t*> handles;
  int64_t out_dim = 0;

  Fixture() {
    char tmpl[] = "/tmp/shardrec_inference_bench_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    root = tmpl;
    dir = root + "/ckpt";
    serving_file = std::string(tmpl) + "/int8.srv";
    std::vector<std::string> names;
    for (int t = 0; t < kTables; ++t) names.push_back("t" + std::to_string(t));
    std::vector<shardrec_feature_config_t> features(kTables);
    std::vector<shardrec_table_config_t> tables(kTables);
    std::vector<int32_t> feature_of(kTables);
    for (int t = 0; t < kTables; ++t) {
      shardrec_feature_config_init(&features[t], SHARDREC_FEATURE_CONFIG_VERSION);
      features[t].name = names[t].c_str();
      features[t].pooling_factor = 20;
      feature_of[t] = t;
      shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
      tables[t].name = names[t].c_str();
      tables[t].rows = kRows;
      tables[t].dim = kDim;
      tables[t].features = &feature_of[t];
      tables[t].num_features = 1;
    }
    shardrec_topology_t topo;
    shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
    topo.world_size = 1;
    topo.batch_size = 512;
    shardrec_plan_t* plan = nullptr;
    Check(shardrec_plan_create(&plan, tables.data(), kTables, features.data(), kTables, &topo,
                               nullptr, 0),
          "plan");
    shardrec_comm_t* comm = nullptr;
    Check(shardrec_comm_create_local_group(&comm, 1, nullptr), "comm");
    shardrec_embedding_t* coll = nullptr;
    Check(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr), "collection");
    Check(shardrec_checkpoint_save(coll, dir.c_str(), nullptr), "checkpoint save");
    shardrec_embedding_destroy(coll);
    shardrec_comm_destroy(comm);
    shardrec_plan_destroy(plan);
    for (int32_t s : {SHARDREC_SERVING_FP32, SHARDREC_SERVING_INT8, SHARDREC_SERVING_INT4,
                      SHARDREC_SERVING_FP8_E4M3, SHARDREC_SERVING_FP8_E5M2}) {
      shardrec_inference_options_t o;
      shardrec_inference_options_init(&o, SHARDREC_INFERENCE_OPTIONS_VERSION);
      o.default_storage = s;
      Check(shardrec_inference_open(dir.c_str(), &o, &handles[s]), "inference open");
    }
    Check(shardrec_inference_output_dim(handles[SHARDREC_SERVING_FP32], &out_dim), "output dim");
    Check(shardrec_inference_save(handles[SHARDREC_SERVING_INT8], serving_file.c_str()),
          "serving file");
  }
};

Fixture* g_fixture = nullptr;

// Built on first use, once even when benchmark threads arrive together (a filtered run that
// needs no handle writes no checkpoint); never freed: the process ends after the summary.
Fixture& Shared() {
  static Fixture* f = g_fixture = new Fixture();
  return *f;
}

// The figures the summary compares, each from the last run of its benchmark.
std::map<std::string, double> g_figures;

const char* StorageName(int32_t s) {
  return s == SHARDREC_SERVING_FP32       ? "fp32"
         : s == SHARDREC_SERVING_INT8     ? "int8"
         : s == SHARDREC_SERVING_INT4     ? "int4"
         : s == SHARDREC_SERVING_FP8_E4M3 ? "fp8_e4m3"
                                          : "fp8_e5m2";
}

// Args: storage, batch. Each benchmark thread serves its own requests with its own output on
// the one shared handle; items are samples.
void BM_Lookup(benchmark::State& state) {
  Fixture& f = Shared();
  const int32_t storage = static_cast<int32_t>(state.range(0));
  const int64_t batch = state.range(1);
  shardrec_inference_t* inf = f.handles[storage];
  std::vector<Request> reqs = MakeRequests(batch, 100 + state.thread_index());
  std::vector<float> out(static_cast<size_t>(batch * f.out_dim));
  size_t k = 0;
  for (auto _ : state) {
    Check(shardrec_inference_lookup(inf, &reqs[k].view, out.data(), out.size(), nullptr), "lookup");
    benchmark::DoNotOptimize(out.data());
    k = (k + 1) % reqs.size();
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_Lookup)
    ->ArgNames({"storage", "batch"})
    ->ArgsProduct({{SHARDREC_SERVING_FP32, SHARDREC_SERVING_INT8, SHARDREC_SERVING_INT4,
                    SHARDREC_SERVING_FP8_E4M3, SHARDREC_SERVING_FP8_E5M2},
                   {1, 16, 512}})
    ->UseRealTime()
    ->Threads(1);
BENCHMARK(BM_Lookup)
    ->ArgNames({"storage", "batch"})
    ->ArgsProduct({{SHARDREC_SERVING_INT8}, {512}})
    ->UseRealTime()
    ->Threads(2);

// The roof of the int8 lookup: the same ids (the same requests as BM_Lookup's first thread)
// over an int8 table of the same shape (dim bytes + 8 bytes of scale and bias per row), each
// row read once as 64-bit words added into per-sample accumulators, no dequantization: what
// reading exactly the bytes an int8 pooled lookup needs costs on this machine.
void BM_GatherRoofInt8(benchmark::State& state) {
  const int64_t batch = state.range(0);
  constexpr int64_t kWords = (kDim + 8) / 8;
  static_assert((kDim + 8) % 8 == 0, "whole 64-bit words per row");
  std::vector<uint64_t> table(static_cast<size_t>(kTables * kRows * kWords));
  std::mt19937_64 rng(5);
  for (auto& v : table) v = rng();
  std::vector<Request> reqs = MakeRequests(batch, 100);
  std::vector<uint64_t> out(static_cast<size_t>(batch * kTables * kWords));
  size_t k = 0;
  for (auto _ : state) {
    const Request& r = reqs[k];
    size_t pos = 0;
    for (int t = 0; t < kTables; ++t) {
      const uint64_t* base = table.data() + static_cast<size_t>(t * kRows * kWords);
      for (int64_t b = 0; b < batch; ++b) {
        uint64_t acc[kWords] = {};
        const int32_t len = r.lengths[static_cast<size_t>(t * batch + b)];
        for (int32_t i = 0; i < len; ++i, ++pos) {
          const uint64_t* row = base + r.ids[pos] * kWords;
          for (int64_t w = 0; w < kWords; ++w) acc[w] += row[w];
        }
        std::copy(acc, acc + kWords, out.data() + (t * batch + b) * kWords);
      }
    }
    benchmark::DoNotOptimize(out.data());
    k = (k + 1) % reqs.size();
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_GatherRoofInt8)->ArgName("batch")->Arg(512)->UseRealTime();

// p99 latency of int8 lookups at batch 16, with (arg 1) or without (arg 0) another thread
// reloading the handle from the int8 serving file in a loop the whole time. Latencies of every
// request are kept; the counters are their p50 and p99 in microseconds, and the reload count.
void BM_LookupP99(benchmark::State& state) {
  Fixture& f = Shared();
  const bool reloading = state.range(0) != 0;
  constexpr int64_t kBatch = 16;
  shardrec_inference_t* inf = f.handles[SHARDREC_SERVING_INT8];
  std::vector<Request> reqs = MakeRequests(kBatch, 300);
  std::vector<float> out(static_cast<size_t>(kBatch * f.out_dim));
  std::vector<double> lat;
  lat.reserve(1 << 20);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> reloads{0};
  std::thread reloader;
  if (reloading) {
    reloader = std::thread([&] {
      while (!stop.load()) {
        Check(shardrec_inference_reload(inf, f.serving_file.c_str()), "reload");
        reloads.fetch_add(1);
      }
    });
  }
  size_t k = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    Check(shardrec_inference_lookup(inf, &reqs[k].view, out.data(), out.size(), nullptr), "lookup");
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    k = (k + 1) % reqs.size();
  }
  stop.store(true);
  if (reloader.joinable()) reloader.join();
  std::sort(lat.begin(), lat.end());
  const double p50 = lat.empty() ? 0 : lat[(lat.size() - 1) / 2];
  const double p99 = lat.empty() ? 0 : lat[static_cast<size_t>((lat.size() - 1) * 0.99)];
  state.counters["p50_us"] = p50;
  state.counters["p99_us"] = p99;
  state.counters["reloads"] = static_cast<double>(reloads.load());
  g_figures[reloading ? "p99_reload" : "p99_quiet"] = p99;
}
BENCHMARK(BM_LookupP99)->ArgName("reloading")->Arg(0)->Arg(1)->UseRealTime()->MinTime(2.0);

// A recommendation request (issue 64): one user with kUserFeatures features and kCandidates
// candidate items with kItemFeatures features, each feature its own int8 table. Served as a VBE
// batch (the user's bags once, inverse indices all 0) and as the plain batch that repeats the
// user's bags for every candidate; both give the same output bits. Items are requests.
constexpr int kUserFeatures = 10, kItemFeatures = 10, kCandidates = 200;
constexpr int64_t kRequestRows = 50000;
constexpr int32_t kRequestDim = 64;
constexpr int32_t kUserBag = 20, kItemBag = 2;  // user history bags, short item bags

struct RequestFixture {
  std::string dir;
  shardrec_inference_t* inf = nullptr;
  int64_t out_dim = 0;

  RequestFixture() {
    char tmpl[] = "/tmp/shardrec_vbe_bench_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    dir = tmpl;
    constexpr int kF = kUserFeatures + kItemFeatures;
    std::vector<std::string> names;
    for (int f = 0; f < kF; ++f)
      names.push_back((f < kUserFeatures ? "u" : "i") + std::to_string(f));
    std::vector<shardrec_feature_config_t> features(kF);
    std::vector<shardrec_table_config_t> tables(kF);
    std::vector<int32_t> feature_of(kF);
    for (int f = 0; f < kF; ++f) {
      shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
      features[f].name = names[f].c_str();
      feature_of[f] = f;
      shardrec_table_config_init(&tables[f], SHARDREC_TABLE_CONFIG_VERSION);
      tables[f].name = names[f].c_str();
      tables[f].rows = kRequestRows;
      tables[f].dim = kRequestDim;
      tables[f].features = &feature_of[f];
      tables[f].num_features = 1;
    }
    shardrec_topology_t topo;
    shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
    topo.world_size = 1;
    shardrec_plan_t* plan = nullptr;
    Check(shardrec_plan_create(&plan, tables.data(), kF, features.data(), kF, &topo, nullptr, 0),
          "plan");
    shardrec_comm_t* comm = nullptr;
    Check(shardrec_comm_create_local_group(&comm, 1, nullptr), "comm");
    shardrec_embedding_t* coll = nullptr;
    Check(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr), "collection");
    Check(shardrec_checkpoint_save(coll, dir.c_str(), nullptr), "checkpoint save");
    shardrec_embedding_destroy(coll);
    shardrec_comm_destroy(comm);
    shardrec_plan_destroy(plan);
    shardrec_inference_options_t o;
    shardrec_inference_options_init(&o, SHARDREC_INFERENCE_OPTIONS_VERSION);
    o.default_storage = SHARDREC_SERVING_INT8;
    Check(shardrec_inference_open(dir.c_str(), &o, &inf), "inference open");
    Check(shardrec_inference_output_dim(inf, &out_dim), "output dim");
  }
};

RequestFixture& SharedRequests() {
  static RequestFixture* f = new RequestFixture();
  return *f;
}

// One request as a VBE view (user bags once) and as the plain view repeating them.
struct UserItems {
  std::vector<int64_t> batch_sizes, inverse;
  std::vector<int32_t> vbe_lengths, lengths;
  std::vector<int64_t> vbe_ids, ids;
  shardrec_kjt_vbe_view_t vbe = SHARDREC_KJT_VBE_VIEW_INIT;
  shardrec_kjt_view_t plain = SHARDREC_KJT_VIEW_INIT;
};

std::vector<UserItems> MakeUserItems(uint64_t seed) {
  std::vector<UserItems> out(kBatchesInRotation);
  std::mt19937_64 rng(seed);
  constexpr int kF = kUserFeatures + kItemFeatures;
  for (UserItems& r : out) {
    for (int f = 0; f < kF; ++f) {
      const bool user = f < kUserFeatures;
      r.batch_sizes.push_back(user ? 1 : kCandidates);
      std::vector<std::vector<int64_t>> bags(user ? 1 : kCandidates);
      for (auto& bag : bags) {
        const int32_t len = user ? kUserBag : kItemBag;
        for (int32_t i = 0; i < len; ++i) bag.push_back(static_cast<int64_t>(rng() % kRequestRows));
        r.vbe_lengths.push_back(len);
        r.vbe_ids.insert(r.vbe_ids.end(), bag.begin(), bag.end());
      }
      for (int b = 0; b < kCandidates; ++b) {
        const auto& bag = bags[user ? 0 : b];
        r.inverse.push_back(user ? 0 : b);
        r.lengths.push_back(static_cast<int32_t>(bag.size()));
        r.ids.insert(r.ids.end(), bag.begin(), bag.end());
      }
    }
    r.vbe.kjt.batch_size = kCandidates;
    r.vbe.kjt.num_features = kF;
    r.vbe.kjt.lengths = r.vbe_lengths.data();
    r.vbe.kjt.num_lengths = r.vbe_lengths.size();
    r.vbe.kjt.values = r.vbe_ids.data();
    r.vbe.kjt.num_values = r.vbe_ids.size();
    r.vbe.feature_batch_sizes = r.batch_sizes.data();
    r.vbe.num_feature_batch_sizes = r.batch_sizes.size();
    r.vbe.inverse_indices = r.inverse.data();
    r.vbe.num_inverse_indices = r.inverse.size();
    r.plain.batch_size = kCandidates;
    r.plain.num_features = kF;
    r.plain.lengths = r.lengths.data();
    r.plain.num_lengths = r.lengths.size();
    r.plain.values = r.ids.data();
    r.plain.num_values = r.ids.size();
  }
  return out;
}

// Arg: 1 for the VBE lookup, 0 for the plain lookup of the user features repeated per candidate.
void BM_UserItems(benchmark::State& state) {
  RequestFixture& f = SharedRequests();
  const bool vbe = state.range(0) == 1;
  const std::vector<UserItems> reqs = MakeUserItems(300);
  std::vector<float> out(static_cast<size_t>(kCandidates * f.out_dim));
  size_t k = 0;
  for (auto _ : state) {
    const UserItems& r = reqs[k];
    if (vbe) {
      Check(shardrec_inference_lookup_vbe(f.inf, &r.vbe, out.data(), out.size(), nullptr),
            "VBE lookup");
    } else {
      Check(shardrec_inference_lookup(f.inf, &r.plain, out.data(), out.size(), nullptr), "lookup");
    }
    benchmark::DoNotOptimize(out.data());
    k = (k + 1) % reqs.size();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UserItems)->ArgName("vbe")->Arg(0)->Arg(1)->UseRealTime();

// Collects samples/s (items_per_second: every thread's items over the wall time) of BM_Lookup
// and the roof from the reporter, for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      auto it = r.counters.find("items_per_second");
      // With --benchmark_repetitions the median is kept too (name suffix _median).
      if (it != r.counters.end() &&
          (r.run_type == Run::RT_Iteration || r.aggregate_name == "median")) {
        g_figures[r.benchmark_name()] = it->second;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

double Figure(const std::string& name) {
  auto it = g_figures.find(name);
  return it == g_figures.end() ? 0.0 : it->second;
}

void PrintSummary() {
  const double one = Figure("BM_Lookup/storage:4/batch:512/real_time/threads:1");
  const double two = Figure("BM_Lookup/storage:4/batch:512/real_time/threads:2");
  const double roof = Figure("BM_GatherRoofInt8/batch:512/real_time");
  const double quiet = Figure("p99_quiet"), busy = Figure("p99_reload");
  std::printf("\nsummary (issue 32 targets), same run:\n");
  if (roof > 0 && one > 0) {
    std::printf("  int8 pooled lookup / gather roof, batch 512, 1 thread: %.3f (target >= 0.85)\n",
                one / roof);
  }
  if (one > 0 && two > 0) {
    std::printf("  2 threads / 1 thread on one handle, int8 batch 512:    %.3f (target >= 1.8)\n",
                two / one);
  }
  if (quiet > 0 && busy > 0) {
    std::printf("  p99 during reloads / p99 without, int8 batch 16:        %.3f (target <= 2.0)\n",
                busy / quiet);
  }
  // Medians when the run repeated the benchmarks (recommended on a shared machine).
  auto median_or_last = [](const std::string& name) {
    const double m = Figure(name + "_median");
    return m > 0 ? m : Figure(name);
  };
  const double vbe = median_or_last("BM_UserItems/vbe:1/real_time"),
               repeated = median_or_last("BM_UserItems/vbe:0/real_time");
  if (vbe > 0 && repeated > 0)
    std::printf(
        "  1 user x 200 items, int8: VBE / repeated user features, requests/s: %.3f "
        "(%.0f and %.0f requests/s)\n",
        vbe / repeated, vbe, repeated);
  const double int8 = Figure("BM_Lookup/storage:4/batch:512/real_time/threads:1");
  for (int32_t s : {SHARDREC_SERVING_FP8_E4M3, SHARDREC_SERVING_FP8_E5M2}) {
    const double fp8 =
        Figure("BM_Lookup/storage:" + std::to_string(s) + "/batch:512/real_time/threads:1");
    if (int8 > 0 && fp8 > 0)
      std::printf("  %s / int8 samples/s, batch 512, 1 thread:        %.3f (target >= 1.0)\n",
                  StorageName(s), fp8 / int8);
  }
  for (int32_t s : {SHARDREC_SERVING_FP32, SHARDREC_SERVING_INT8, SHARDREC_SERVING_INT4,
                    SHARDREC_SERVING_FP8_E4M3, SHARDREC_SERVING_FP8_E5M2}) {
    const std::string p = "BM_Lookup/storage:" + std::to_string(s) + "/batch:";
    if (Figure(p + "1/real_time/threads:1") <= 0 || Figure(p + "16/real_time/threads:1") <= 0) {
      continue;
    }
    std::printf("  %s: batch 512 %.0f samples/s; latency batch 1 %.1f us, batch 16 %.1f us\n",
                StorageName(s), Figure(p + "512/real_time/threads:1"),
                1e6 / std::max(Figure(p + "1/real_time/threads:1"), 1e-9),
                16e6 / std::max(Figure(p + "16/real_time/threads:1"), 1e-9));
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  PrintSummary();
  if (g_fixture != nullptr) std::filesystem::remove_all(g_fixture->root);
  benchmark::Shutdown();
  return 0;
}
