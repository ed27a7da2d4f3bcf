// Dynamic tables against fixed ones, through the public C API (docs/dynamic-tables.md, issue 31's
// performance targets). BM_DynamicVsFixed: the training step of two row-wise Adagrad tables (200k
// rows, dim 64, 1024 samples per rank, bags of ~20) as fixed tables and as dynamic tables of the
// same capacity whose keys all exist (every id inserted before timing; the dynamic ids are the
// fixed ids passed through a bijection, so the same rows are hit), at world 1 and 2 (ranks as
// threads). The two steps alternate within each iteration; the counter fixed_over_dynamic is the
// ratio of the median steps (target >= 0.8), fixed_over_dynamic_q10 that of their 10th percentiles.
// BM_DynamicEviction: Zipf ids (s = 1.05) over 200k values in 4 or 32 batches replayed in turn, a
// dynamic table with room for all of them against one with room for half the distinct ids of its
// batches under LRU (evicting every step at steady state); evicting_over_roomy is the ratio of the
// median steps (target <= 1.5), new_row_share the rows created per step over the ids the step's
// table t0 looks up. BM_DataParallelDynamic: the step at world 2 of two data-parallel tables (20k
// rows, dim 16, Zipf or uniform ids) as dynamic tables (whose forward gathers every rank's ids, as
// distinct ids with counts when that is shorter) against the same fixed data-parallel tables;
// fixed_over_dynamic is the ratio of the median steps. BM_EvictionAtScale and BM_RescoredAtScale: a
// full table of 64k or 1M slots whose steps bring a few new ids (the latter under SCORE with 200k
// rows rescored below all others after every step) against the same table with room for them.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/bench/capi_bench_util.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTables = 2;
constexpr int64_t kRows = 200000;
constexpr int32_t kDim = 64;
constexpr int64_t kBatch = 1024;
constexpr int kBag = 20;
constexpr int kRotation = 4;

using shardrec::bench::Check;
using shardrec::bench::Scatter;

struct Rank {
  shardrec_embedding_t* coll = nullptr;
  std::vector<std::vector<int32_t>> lengths;
  std::vector<std::vector<int64_t>> ids;
  std::vector<float> out, grad;
};

struct Collection {
  shardrec_plan_t* plan = nullptr;
  std::vector<shardrec_comm_t*> comms;
  std::vector<Rank> ranks;
  ~Collection() {
    for (auto& r : ranks) shardrec_embedding_destroy(r.coll);
    for (auto* c : comms) shardrec_comm_destroy(c);
    shardrec_plan_destroy(plan);
  }
};

// A collection of two tables of `capacity` rows and `dim` columns, restricted to `sharding`,
// dynamic (with `eviction`) or fixed; ranks as threads, one thread each.
Collection* Make(int world, bool dynamic, int64_t capacity, int32_t eviction, int32_t dim = kDim,
                 int32_t sharding = SHARDREC_SHARDING_ROW_WISE) {
  auto* c = new Collection;
  const char* names[kTables] = {"t0", "t1"};
  shardrec_feature_config_t features[kTables];
  shardrec_table_config_t tables[kTables];
  shardrec_table_constraints_t cons[kTables];
  int32_t feature_of[kTables];
  shardrec_dynamic_table_config_t dyn;
  shardrec_dynamic_table_config_init(&dyn, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
  dyn.eviction = eviction;
  for (int t = 0; t < kTables; ++t) {
    shardrec_feature_config_init(&features[t], SHARDREC_FEATURE_CONFIG_VERSION);
    features[t].name = names[t];
    features[t].pooling_factor = kBag;
    feature_of[t] = t;
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    tables[t].name = names[t];
    tables[t].rows = capacity;
    tables[t].dim = dim;
    tables[t].features = &feature_of[t];
    tables[t].num_features = 1;
    tables[t].dynamic = dynamic ? &dyn : nullptr;
    shardrec_table_constraints_init(&cons[t], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    cons[t].table = names[t];
    cons[t].sharding_types = 1u << static_cast<uint32_t>(sharding);
  }
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = world;
  topo.batch_size = static_cast<int32_t>(kBatch);
  topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  Check(shardrec_plan_create(&c->plan, tables, kTables, features, kTables, &topo, cons, kTables),
        "plan");
  c->comms.assign(world, nullptr);
  Check(shardrec_comm_create_local_group(c->comms.data(), world, nullptr), "comms");
  c->ranks.resize(world);
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r)
    ts.emplace_back([c, r] {
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      o.num_threads = 1;
      Check(shardrec_embedding_create(&c->ranks[r].coll, c->plan, c->comms[r], nullptr, &o),
            "create");
    });
  for (auto& t : ts) t.join();
  return c;
}

shardrec_kjt_view_t View(const std::vector<int32_t>& lengths, const std::vector<int64_t>& ids) {
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = kBatch;
  v.num_features = kTables;
  v.lengths = lengths.data();
  v.num_lengths = lengths.size();
  v.values = ids.data();
  v.values_dtype = SHARDREC_DTYPE_INT64;
  v.num_values = ids.size();
  return v;
}

// One training step (forward + backward) on every rank, ranks as threads; wall seconds.
double Step(Collection* c, int k) {
  const auto t0 = Clock::now();
  auto one = [c, k](int r) {
    Rank& rank = c->ranks[r];
    const shardrec_kjt_view_t v = View(rank.lengths[k], rank.ids[k]);
    Check(shardrec_embedding_forward(rank.coll, &v, rank.out.data(), rank.out.size(), nullptr),
          "forward");
    Check(shardrec_embedding_backward(rank.coll, rank.grad.data(), rank.grad.size(), nullptr),
          "backward");
  };
  const int world = static_cast<int>(c->ranks.size());
  if (world == 1) {
    one(0);
  } else {
    std::vector<std::thread> ts;
    for (int r = 0; r < world; ++r) ts.emplace_back(one, r);
    for (auto& t : ts) t.join();
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Gives every rank of `c` `batches` batches of ids drawn by `draw` (scattered when dynamic).
template <typename Draw>
void Fill(Collection* c, uint64_t seed, Draw&& draw, bool scatter, int batches = kRotation) {
  for (size_t r = 0; r < c->ranks.size(); ++r) {
    Rank& rank = c->ranks[r];
    std::mt19937_64 rng(seed + r);
    rank.lengths.assign(batches, {});
    rank.ids.assign(batches, {});
    for (int k = 0; k < batches; ++k)
      for (int t = 0; t < kTables; ++t)
        for (int64_t b = 0; b < kBatch; ++b) {
          const int32_t len = kBag - 4 + static_cast<int32_t>(rng() % 9);
          rank.lengths[k].push_back(len);
          for (int32_t i = 0; i < len; ++i) {
            const int64_t x = draw(rng);
            rank.ids[k].push_back(scatter ? Scatter(x) : x);
          }
        }
    rank.out.assign(static_cast<size_t>(kBatch * kTables * kDim), 0.0f);
    rank.grad.assign(rank.out.size(), 1e-4f);
  }
}

// Inserts every id of [0, rows) (scattered) into both tables: sweeps of consecutive ids.
void InsertAll(Collection* c, int64_t rows = kRows) {
  const int world = static_cast<int>(c->ranks.size());
  const int64_t per_step = kBatch * kBag * world;
  for (int64_t first = 0; first < rows; first += per_step) {
    std::vector<std::vector<int32_t>> lengths(world);
    std::vector<std::vector<int64_t>> ids(world);
    for (int r = 0; r < world; ++r)
      for (int t = 0; t < kTables; ++t)
        for (int64_t b = 0; b < kBatch; ++b) {
          lengths[r].push_back(kBag);
          for (int i = 0; i < kBag; ++i)
            ids[r].push_back(Scatter((first + (r * kBatch + b) * kBag + i) % rows));
        }
    std::vector<std::thread> ts;
    for (int r = 0; r < world; ++r)
      ts.emplace_back([&, r] {
        Rank& rank = c->ranks[r];
        const shardrec_kjt_view_t v = View(lengths[r], ids[r]);
        Check(shardrec_embedding_forward(rank.coll, &v, rank.out.data(), rank.out.size(), nullptr),
              "insert");
      });
    for (auto& t : ts) t.join();
  }
}

// Rank 0's stats of table t0 of `c`.
shardrec_dynamic_table_stats_t StatsOfT0(Collection* c) {
  shardrec_dynamic_table_stats_t st;
  shardrec_dynamic_table_stats_init(&st, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
  Check(shardrec_embedding_dynamic_stats(c->ranks[0].coll, "t0", &st), "stats");
  return st;
}

// The q-quantile (0 <= q <= 1) of v, nearest rank.
double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

double Median(std::vector<double> v) { return Quantile(std::move(v), 0.5); }

void BM_DynamicVsFixed(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  Collection* fixed = Make(world, false, kRows, SHARDREC_EVICTION_NONE);
  Collection* dyn = Make(world, true, kRows, SHARDREC_EVICTION_NONE);
  auto uniform = [](std::mt19937_64& g) { return static_cast<int64_t>(g() % kRows); };
  Fill(fixed, 17, uniform, false);
  Fill(dyn, 17, uniform, true);
  InsertAll(dyn);
  std::vector<double> tf, td;
  int k = 0;
  for (auto _ : state) {
    const int batch = k++ % kRotation;
    tf.push_back(Step(fixed, batch));
    td.push_back(Step(dyn, batch));
    state.SetIterationTime(tf.back() + td.back());
  }
  const shardrec_dynamic_table_stats_t st = StatsOfT0(dyn);
  state.counters["fixed_ms"] = Median(tf) * 1e3;
  state.counters["dynamic_ms"] = Median(td) * 1e3;
  state.counters["fixed_over_dynamic"] = Median(tf) / Median(td);
  // With ranks as threads on a small machine a step is sometimes twice as slow as its fastest
  // tenth, whichever collection it belongs to (the scheduler's hand-offs between rank and
  // communication threads), and the median sits inside that spread: so the ratio of the 10th
  // percentiles too, the steps' own cost with the least of the scheduler's delay.
  state.counters["fixed_over_dynamic_q10"] = Quantile(tf, 0.1) / Quantile(td, 0.1);
  state.counters["rank0_load_factor"] = st.load_factor;
  state.counters["rank0_meta_B_per_slot"] =
      st.capacity > 0 ? static_cast<double>(st.metadata_bytes) / static_cast<double>(st.capacity)
                      : 0.0;
  delete fixed;
  delete dyn;
}

// The counters of an evicting table `tight` against a roomy one, from their step times; returns
// the evicting table's stats (rank 0, table t0).
shardrec_dynamic_table_stats_t ReportEviction(benchmark::State& state, Collection* tight,
                                              const std::vector<double>& roomy_steps,
                                              const std::vector<double>& tight_steps) {
  const shardrec_dynamic_table_stats_t st = StatsOfT0(tight);
  state.counters["roomy_ms"] = Median(roomy_steps) * 1e3;
  state.counters["evicting_ms"] = Median(tight_steps) * 1e3;
  state.counters["evicting_over_roomy"] = Median(tight_steps) / Median(roomy_steps);
  state.counters["evicted_per_step"] = static_cast<double>(st.last_evicted);
  // Over the ids of t0 in an average batch (the first kBatch lengths of each).
  const Rank& r0 = tight->ranks[0];
  double looked_up = 0;
  for (const auto& lengths : r0.lengths)
    for (int64_t b = 0; b < kBatch; ++b) looked_up += lengths[b];
  looked_up /= static_cast<double>(r0.lengths.size());
  state.counters["new_row_share"] = static_cast<double>(st.last_inserted) / looked_up;
  return st;
}

void BM_DynamicEviction(benchmark::State& state) {
  constexpr int world = 1;
  const int batches = static_cast<int>(state.range(0));
  // Zipf(1.05) over kRows distinct ids, sampled from its CDF.
  std::vector<double> cdf(kRows);
  double sum = 0;
  for (int64_t i = 0; i < kRows; ++i)
    cdf[i] = (sum += 1.0 / std::pow(static_cast<double>(i + 1), 1.05));
  for (double& x : cdf) x /= sum;
  auto zipf = [&cdf](std::mt19937_64& g) {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(g);
    return static_cast<int64_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  };
  Collection* roomy = Make(world, true, kRows, SHARDREC_EVICTION_LRU);
  Fill(roomy, 29, zipf, true, batches);
  // The distinct ids table t0 sees over the batches (its ids lead each batch): the evicting
  // table has room for half of them.
  std::vector<int64_t> seen;
  for (int k = 0; k < batches; ++k) {
    const Rank& r0 = roomy->ranks[0];
    int64_t n = 0;
    for (int64_t b = 0; b < kBatch; ++b) n += r0.lengths[k][b];
    seen.insert(seen.end(), r0.ids[k].begin(), r0.ids[k].begin() + n);
  }
  std::sort(seen.begin(), seen.end());
  const int64_t distinct = std::unique(seen.begin(), seen.end()) - seen.begin();
  Collection* tight = Make(world, true, distinct / 2, SHARDREC_EVICTION_LRU);
  Fill(tight, 29, zipf, true, batches);
  // Steady state: the tight table is full and every batch has been seen at least twice.
  for (int k = 0; k < std::max(3 * batches, 2 * batches + 8); ++k) {
    Step(roomy, k % batches);
    Step(tight, k % batches);
  }
  std::vector<double> tr, tt;
  int k = 0;
  for (auto _ : state) {
    const int batch = k++ % batches;
    tr.push_back(Step(roomy, batch));
    tt.push_back(Step(tight, batch));
    state.SetIterationTime(tr.back() + tt.back());
  }
  const shardrec_dynamic_table_stats_t st = ReportEviction(state, tight, tr, tt);
  state.counters["load_factor"] = st.load_factor;
  state.counters["distinct_ids"] = static_cast<double>(distinct);
  delete roomy;
  delete tight;
}

constexpr int64_t kNewPerStep = 200;

// Two tables of `capacity` slots per table under `policy`, full (tight), and the same with room
// for every new id of `steps` steps (roomy), both filled with every id of [0, capacity) and given
// batches of those; each step replaces the first kNewPerStep ids of each table's bag run with
// ids never seen before.
struct AtScale {
  Collection* tight = nullptr;
  Collection* roomy = nullptr;
  int64_t next_new = 0;

  AtScale(int64_t capacity, int32_t policy, int64_t steps) : next_new(capacity) {
    tight = Make(1, true, capacity, policy);
    roomy = Make(1, true, capacity + kNewPerStep * steps, policy);
    auto known = [capacity](std::mt19937_64& g) {
      return static_cast<int64_t>(g() % static_cast<uint64_t>(capacity));
    };
    for (Collection* c : {tight, roomy}) {
      Fill(c, 31, known, true);
      InsertAll(c, capacity);
    }
  }
  ~AtScale() {
    delete tight;
    delete roomy;
  }
  // One step of each on batch k, its new ids first; the roomy and tight steps' times appended to
  // `tr` and `tt` when not null.
  void Run(int k, std::vector<double>* tt, std::vector<double>* tr) {
    for (Collection* c : {tight, roomy}) {
      Rank& r = c->ranks[0];
      int64_t at = 0;
      for (int t = 0; t < kTables; ++t) {
        int64_t table_ids = 0;
        for (int64_t b = 0; b < kBatch; ++b) table_ids += r.lengths[k][t * kBatch + b];
        for (int64_t i = 0; i < kNewPerStep; ++i)
          r.ids[k][at + i] = Scatter(next_new + t * kNewPerStep + i);
        at += table_ids;
      }
    }
    next_new += kTables * kNewPerStep;
    const double roomy_s = Step(roomy, k), tight_s = Step(tight, k);
    if (tr != nullptr) tr->push_back(roomy_s);
    if (tt != nullptr) tt->push_back(tight_s);
  }
};

// The timed steps of an AtScale (after a warm-up), `after(s)` called after each; the eviction
// counters.
template <typename After>
void TimeAtScale(benchmark::State& state, int64_t capacity, int32_t policy, After&& after) {
  constexpr int kWarmup = 4;
  AtScale s(capacity, policy, state.max_iterations + kWarmup + 1);
  for (int k = 0; k < kWarmup; ++k) {
    s.Run(k % kRotation, nullptr, nullptr);
    after(s);
  }
  std::vector<double> tt, tr;
  int k = kWarmup;
  for (auto _ : state) {
    s.Run(k++ % kRotation, &tt, &tr);
    after(s);
    state.SetIterationTime(tr.back() + tt.back());
  }
  ReportEviction(state, s.tight, tr, tt);
}

// Eviction at scale: two tables of range(0) slots (range(1): LRU 1, LFU 2, SCORE 4), full, whose
// steps each bring kNewPerStep ids never seen before per table among ~20k known ones (uniform over
// the table), against the same tables with room for every new id of the run (no eviction). A step's
// eviction work should follow the ids it evicts, not the table's size: evicting_over_roomy near 1
// at any size.
void BM_EvictionAtScale(benchmark::State& state) {
  TimeAtScale(state, state.range(0), static_cast<int32_t>(state.range(1)), [](AtScale&) {});
}

// A full SCORE table of 1M slots as in BM_EvictionAtScale, whose caller after every step gives
// state.range(0) random known rows of each table a score below every other (the rows it wants
// to leave first: more rows than the eviction queue's side list holds, so its notes overflow
// within a step or two), against the same table with room for every new id, rescored alike.
// Only the steps are timed.
void BM_RescoredAtScale(benchmark::State& state) {
  constexpr int64_t kCapacity = 1 << 20;
  std::mt19937_64 pick(5);
  std::vector<int64_t> ids(static_cast<size_t>(state.range(0)));
  std::vector<double> scores(ids.size());
  double low = 0.0;
  TimeAtScale(state, kCapacity, SHARDREC_EVICTION_SCORE, [&](AtScale& s) {
    // Each rescoring goes below the previous one's, so it orders before every row scored so far.
    low -= 1.0;
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = Scatter(static_cast<int64_t>(pick() % static_cast<uint64_t>(kCapacity)));
      scores[i] = low - static_cast<double>(pick() % 1000) * 1e-3;
    }
    for (Collection* c : {s.tight, s.roomy})
      for (const char* table : {"t0", "t1"})
        Check(shardrec_embedding_dynamic_set_scores(c->ranks[0].coll, table, ids.data(),
                                                    scores.data(), ids.size(), nullptr),
              "set_scores");
  });
}

// Two data-parallel tables of kDpRows rows, dynamic or fixed, ranks as threads.
constexpr int64_t kDpRows = 20000;
constexpr int32_t kDpDim = 16;
Collection* MakeDataParallel(int world, bool dynamic) {
  Collection* c = Make(world, dynamic, kDpRows, SHARDREC_EVICTION_NONE, kDpDim,
                       SHARDREC_SHARDING_DATA_PARALLEL);
  for (auto& r : c->ranks) {
    r.out.assign(static_cast<size_t>(kBatch * kTables * kDpDim), 0.0f);
    r.grad.assign(r.out.size(), 1e-4f);
  }
  return c;
}

// range(0): 1 = Zipf(1.05) ids over kDpRows values (hot: the gather sends distinct ids with
// counts), 0 = uniform ids (about as many distinct ids as occurrences: every occurrence is sent).
void BM_DataParallelDynamic(benchmark::State& state) {
  constexpr int world = 2;
  const bool zipf = state.range(0) == 1;
  std::vector<double> cdf(kDpRows);
  double sum = 0;
  for (int64_t i = 0; i < kDpRows; ++i)
    cdf[i] = (sum += zipf ? 1.0 / std::pow(static_cast<double>(i + 1), 1.05) : 1.0);
  for (double& x : cdf) x /= sum;
  auto draw = [&cdf](std::mt19937_64& g) {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(g);
    return std::min<int64_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin(),
                             kDpRows - 1);
  };
  Collection* fixed = MakeDataParallel(world, false);
  Collection* dyn = MakeDataParallel(world, true);
  Fill(fixed, 41, draw, false);
  Fill(dyn, 41, draw, true);
  for (Collection* c : {fixed, dyn})
    for (auto& r : c->ranks) {  // Fill sized them for kDim
      r.out.assign(static_cast<size_t>(kBatch * kTables * kDpDim), 0.0f);
      r.grad.assign(r.out.size(), 1e-4f);
    }
  for (int k = 0; k < kRotation; ++k) {  // warm: the dynamic tables hold the rotation's ids
    Step(fixed, k);
    Step(dyn, k);
  }
  std::vector<double> tf, td;
  int k = 0;
  for (auto _ : state) {
    const int batch = k++ % kRotation;
    tf.push_back(Step(fixed, batch));
    td.push_back(Step(dyn, batch));
    state.SetIterationTime(tf.back() + td.back());
  }
  state.counters["fixed_ms"] = Median(tf) * 1e3;
  state.counters["dynamic_ms"] = Median(td) * 1e3;
  state.counters["fixed_over_dynamic"] = Median(tf) / Median(td);
  // The gather's words against every occurrence, for rank 0's first batch of table t0 (its ids
  // lead the batch): 2 x distinct / occurrences when that is below 1.
  const Rank& r0 = dyn->ranks[0];
  int64_t n = 0;
  for (int64_t b = 0; b < kBatch; ++b) n += r0.lengths[0][b];
  std::vector<int64_t> ids(r0.ids[0].begin(), r0.ids[0].begin() + n);
  std::sort(ids.begin(), ids.end());
  const auto distinct = static_cast<double>(std::unique(ids.begin(), ids.end()) - ids.begin());
  state.counters["gather_words_ratio"] = std::min(1.0, 2.0 * distinct / static_cast<double>(n));
  delete fixed;
  delete dyn;
}

BENCHMARK(BM_DynamicVsFixed)
    ->Arg(1)
    ->Arg(2)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(120);
// 4: a replay of four batches, LRU's worst case (an id of the tail recurs exactly every fourth
// step, after more distinct ids than the table holds); 32: a Zipf stream (32 batches replayed,
// so the roomy table's ids all exist).
BENCHMARK(BM_DynamicEviction)
    ->Arg(4)
    ->Arg(32)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(128);
BENCHMARK(BM_EvictionAtScale)
    ->ArgsProduct({{1 << 16, 1 << 20},
                   {SHARDREC_EVICTION_LRU, SHARDREC_EVICTION_LFU, SHARDREC_EVICTION_SCORE}})
    ->ArgNames({"slots", "policy"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(24);
BENCHMARK(BM_RescoredAtScale)
    ->Arg(200000)
    ->ArgName("rescored")
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(24);
BENCHMARK(BM_DataParallelDynamic)
    ->Arg(1)
    ->Arg(0)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(24);

}  // namespace

BENCHMARK_MAIN();
