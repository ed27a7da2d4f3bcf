// The dynamic shard's slot index (impl/embedding/dynamic/slot_index.h) against abseil's
// flat_hash_map<int64_t, int32_t> on the same keys (issue 31: find >= 1.0x abseil). 1M (and, for
// finds, 16M) random 64-bit keys at 0.5 and 0.9 of the entries the index allows (slots = keys /
// fill); find of keys present (hit) and of keys absent (miss), and insert of all keys into an empty
// index / a map reserved for the same slot count. Each iteration times one pass of each structure
// over the same keys in the same order, alternating, each find pass after an untimed one of the
// same structure; the counter abseil_over_index is the ratio of the median passes (> 1: the
// index is faster). BM_IndexFindBatch: the same finds over the batch
// with each structure's own prefetch, abseil at the best of three prefetch distances.
#include <absl/container/flat_hash_map.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "impl/embedding/dynamic/huge_page_allocator.h"
#include "impl/embedding/dynamic/slot_index.h"

namespace {

using Clock = std::chrono::steady_clock;
using shardrec::embedding::dynamic::HugePageAllocator;
using shardrec::embedding::dynamic::HugeVector;
using shardrec::embedding::dynamic::SlotIndex;
// Both structures on huge pages, as the library keeps its index and the ids (in its per-slot
// records): on a machine whose transparent huge pages are in "madvise" mode a default-allocated
// array misses the TLB on nearly every random access, which would measure the page size.
using Map = absl::flat_hash_map<int64_t, int32_t, absl::Hash<int64_t>, std::equal_to<int64_t>,
                                HugePageAllocator<std::pair<const int64_t, int32_t>>>;

constexpr int64_t kKeys = 1 << 20;  // BM_IndexInsert

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double Seconds(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Seconds of a second pass of f, after one untimed: each structure is timed with its own lines
// as warm as the caches keep them, not after the other's passes evicted them (at 1M keys the
// two structures and the keys together exceed the L3, so whichever ran last was ahead).
template <typename F>
double WarmSeconds(F&& f) {
  f();
  return Seconds(f);
}

struct Keys {
  HugeVector<int64_t> stored;  // slot i holds stored[i]
  std::vector<int64_t> probe;  // the stored keys shuffled (hit) or absent keys (miss)
};

Keys MakeKeys(bool hit, int64_t keys) {
  std::mt19937_64 rng(42);
  Keys k;
  k.stored.resize(static_cast<size_t>(keys));
  for (int64_t& x : k.stored) x = static_cast<int64_t>(rng());
  if (hit) {
    k.probe.assign(k.stored.begin(), k.stored.end());
    std::shuffle(k.probe.begin(), k.probe.end(), rng);
  } else {
    // Fresh random 64-bit keys: a collision with a stored one has probability ~2^-24 in total.
    k.probe.resize(static_cast<size_t>(keys));
    for (int64_t& x : k.probe) x = static_cast<int64_t>(rng());
  }
  return k;
}

// The index (of `slots` slots) and the map (reserved for as many) holding every stored key.
void FillBoth(const Keys& k, int64_t slots, SlotIndex* index, Map* map) {
  index->Reset(slots);
  map->reserve(static_cast<size_t>(slots));
  for (size_t i = 0; i < k.stored.size(); ++i) {
    index->Insert(k.stored[i], static_cast<int32_t>(i));
    map->emplace(k.stored[i], static_cast<int32_t>(i));
  }
}

// The counters of one comparison: the index's and abseil's passes over `keys` keys.
void ReportPasses(benchmark::State& state, const std::vector<double>& index_passes,
                  const std::vector<double>& abseil_passes, int64_t keys = kKeys) {
  state.counters["index_ns_per_key"] = Median(index_passes) * 1e9 / static_cast<double>(keys);
  state.counters["abseil_ns_per_key"] = Median(abseil_passes) * 1e9 / static_cast<double>(keys);
  state.counters["abseil_over_index"] = Median(abseil_passes) / Median(index_passes);
}

// state.range(0): fill in percent of the slots; state.range(1): 1 = hit, 0 = miss;
// state.range(2): log2 of the key count.
void BM_IndexFind(benchmark::State& state) {
  const int64_t keys = int64_t{1} << state.range(2);
  const int64_t slots = keys * 100 / state.range(0);
  const Keys k = MakeKeys(state.range(1) == 1, keys);
  SlotIndex index;
  Map map;
  FillBoth(k, slots, &index, &map);
  std::vector<double> ti, ta;
  int64_t sum_i = 0, sum_a = 0;
  for (auto _ : state) {
    ti.push_back(WarmSeconds([&] {
      for (int64_t x : k.probe) sum_i += index.Find(x, k.stored.data());
    }));
    ta.push_back(WarmSeconds([&] {
      for (int64_t x : k.probe) {
        const auto it = map.find(x);
        sum_a += it == map.end() ? SlotIndex::kNone : it->second;
      }
    }));
    state.SetIterationTime(ti.back() + ta.back());
  }
  if (sum_i != sum_a) state.SkipWithError("index and abseil disagree");
  benchmark::DoNotOptimize(sum_i);
  ReportPasses(state, ti, ta, keys);
  state.counters["index_B_per_slot"] = static_cast<double>(index.bytes()) / slots;
}

// As BM_IndexFind, but both look up a batch with their own prefetch, as a lookup of many ids
// does: the index through SlotIndex::FindAll (its buckets 32 or, beyond kFarBytes, 64 keys
// ahead, the guessed records half as many), abseil with flat_hash_map::prefetch (its control bytes
// and slots) at each distance of kAbseilAhead; abseil_over_index compares the index with abseil's
// faster distance (abseil_ns_per_key), and abseil_ns_per_key_<d> shows each.
constexpr size_t kAbseilAhead[] = {16, 32, 64};

void BM_IndexFindBatch(benchmark::State& state) {
  const int64_t keys = int64_t{1} << state.range(2);
  const int64_t slots = keys * 100 / state.range(0);
  const Keys k = MakeKeys(state.range(1) == 1, keys);
  SlotIndex index;
  Map map;
  FillBoth(k, slots, &index, &map);
  const size_t n = k.probe.size();
  constexpr size_t kDistances = std::size(kAbseilAhead);
  std::vector<double> ti, ta[kDistances];
  int64_t sum_i = 0, sum_a[kDistances] = {};
  for (auto _ : state) {
    ti.push_back(WarmSeconds([&] {
      index.FindAll(k.probe, k.stored.data(), 1, [&](size_t, int32_t s) { sum_i += s; });
    }));
    double t = ti.back();
    for (size_t d = 0; d < kDistances; ++d) {
      const size_t ahead = kAbseilAhead[d];
      ta[d].push_back(WarmSeconds([&] {
        for (size_t i = 0; i < n; ++i) {
          if (i + ahead < n) map.prefetch(k.probe[i + ahead]);
          const auto it = map.find(k.probe[i]);
          sum_a[d] += it == map.end() ? SlotIndex::kNone : it->second;
        }
      }));
      t += ta[d].back();
    }
    state.SetIterationTime(t);
  }
  size_t best = 0;
  for (size_t d = 0; d < kDistances; ++d) {
    if (sum_a[d] != sum_i) state.SkipWithError("index and abseil disagree");
    state.counters["abseil_ns_per_key_" + std::to_string(kAbseilAhead[d])] =
        Median(ta[d]) * 1e9 / static_cast<double>(keys);
    if (Median(ta[d]) < Median(ta[best])) best = d;
  }
  benchmark::DoNotOptimize(sum_i);
  ReportPasses(state, ti, ta[best], keys);
}

// state.range(0): fill in percent of the slots.
void BM_IndexInsert(benchmark::State& state) {
  const int64_t slots = kKeys * 100 / state.range(0);
  const Keys k = MakeKeys(true, kKeys);
  std::vector<double> ti, ta;
  for (auto _ : state) {
    SlotIndex index;
    index.Reset(slots);
    Map map;
    map.reserve(static_cast<size_t>(slots));
    ti.push_back(Seconds([&] {
      for (int64_t i = 0; i < kKeys; ++i) index.Insert(k.stored[i], static_cast<int32_t>(i));
    }));
    ta.push_back(Seconds([&] {
      for (int64_t i = 0; i < kKeys; ++i) map.emplace(k.stored[i], static_cast<int32_t>(i));
    }));
    benchmark::DoNotOptimize(map.size());
    state.SetIterationTime(ti.back() + ta.back());
  }
  ReportPasses(state, ti, ta);
}

BENCHMARK(BM_IndexFind)
    ->ArgsProduct({{50, 90}, {1, 0}, {20, 24}})
    ->ArgNames({"fill_pct", "hit", "keys_log2"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(9);
BENCHMARK(BM_IndexFindBatch)
    ->ArgsProduct({{50, 90}, {1, 0}, {20, 24}})
    ->ArgNames({"fill_pct", "hit", "keys_log2"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(9);
BENCHMARK(BM_IndexInsert)
    ->Arg(50)
    ->Arg(90)
    ->ArgNames({"fill_pct"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
