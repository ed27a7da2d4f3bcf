// libFuzzer target over dynamic tables: fuzzed KJTs of raw 64-bit ids (the int64 extremes,
// 2^53 and its neighbours, negative and arbitrary values) and fuzzed output gradients train a
// 2-rank collection holding a row-wise and a data-parallel dynamic table under LRU and a
// column-wise one under SCORE (admission at the second sighting, a few slots, so rows are
// admitted, evicted and refused all the time; the data-parallel one's inserts agreed by a gather
// of both ranks' ids) beside a fixed table; rank 1 (a partner thread) always sends a valid batch,
// rank 0 also sets fuzzed scores (ids of the pool or arbitrary, NaN and infinities among the
// scores) on the SCORE table after each step. Checked on every input:
//  - every call returns OK or a documented rejection, never EINTERNAL;
//  - each rank's stats add up: size <= capacity, size = inserted - evicted since creation, and
//    an accepted forward moves the totals by exactly its "last" counts;
//  - a rejected forward (a bad batch on rank 0 is rejected on both ranks) inserts, evicts and
//    counts nothing on either rank; a rejected backward changes no weight or optimizer state of
//    the fixed table (the dynamic tables' rows have no accessor);
//  - setting scores returns OK, or EINVAL when a score is not finite, and changes no stats;
//  - the next valid step works on both ranks (they stay paired).
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// a -> "rw" (dynamic), b -> "cw" (dynamic, SCORE), c -> "fixed", d -> "dp" (dynamic,
// data-parallel)
constexpr int kFeatures = 4;
constexpr int64_t kMaxBatch = 6;
constexpr const char* kDynamic[] = {"rw", "cw", "dp"};
constexpr int kNumDynamic = 3;

bool Rejection(shardrec_status_t rc) {
  return rc == SHARDREC_EINVAL || rc == SHARDREC_EUSAGE || rc == SHARDREC_ENOTFOUND;
}

struct Reader : shardrec::fuzz::ByteReader {
  int32_t Small() { return static_cast<int8_t>(Byte()); }
  // A raw id: mostly from a few values, so ids recur and reach the admission threshold.
  int64_t Id() {
    static constexpr int64_t kPool[] = {0,
                                        1,
                                        -1,
                                        7,
                                        int64_t{1} << 53,
                                        (int64_t{1} << 53) + 1,
                                        -(int64_t{1} << 53) - 1,
                                        std::numeric_limits<int64_t>::min(),
                                        std::numeric_limits<int64_t>::max(),
                                        int64_t{0x7e57ab1e5eed0001},
                                        -4242,
                                        1000003};
    const uint8_t b = Byte();
    if ((b & 0xc0) != 0xc0) return kPool[b % (sizeof(kPool) / sizeof(kPool[0]))];
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v = (v << 8) | Byte();
    return static_cast<int64_t>(v);
  }
  float Float() {
    const uint8_t b = Byte();
    if ((b & 0x1f) == 0) return NAN;
    if ((b & 0x1f) == 1) return INFINITY;
    return static_cast<float>(static_cast<int8_t>(Byte())) / 16.0f;
  }
};

struct FuzzBatch {
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<float> weights;
  shardrec_kjt_view_t view = SHARDREC_KJT_VIEW_INIT;
};

FuzzBatch Decode(Reader& in) {
  FuzzBatch b;
  const uint8_t shape = in.Byte();
  int64_t B = static_cast<int64_t>(shape % (kMaxBatch + 1));
  if ((shape & 0xf0) == 0xf0) B = -1;  // an invalid batch size
  b.lengths.resize(static_cast<size_t>(kFeatures * (B > 0 ? B : 0)));
  size_t total = 0;
  for (auto& len : b.lengths) {
    len = in.Small() % 5;  // negative lengths included
    if (len > 0) total += static_cast<size_t>(len);
  }
  const uint8_t flags = in.Byte();
  size_t num_values = total;
  if (flags & 1) num_values += 1 + in.Byte() % 2;  // lengths that do not add up
  b.ids.resize(num_values);
  for (auto& id : b.ids) id = in.Id();
  if (flags & 2) {
    b.weights.resize(num_values + ((flags & 4) ? 1 : 0));
    for (auto& w : b.weights) w = in.Float();
  }
  b.view.batch_size = B;
  b.view.num_features = (flags & 8) ? kFeatures - 1 : kFeatures;
  b.view.lengths = b.lengths.empty() ? nullptr : b.lengths.data();
  b.view.num_lengths = b.lengths.size();
  b.view.values = b.ids.empty() ? nullptr : b.ids.data();
  b.view.values_dtype = SHARDREC_DTYPE_INT64;
  b.view.num_values = num_values;
  b.view.weights = b.weights.empty() ? nullptr : b.weights.data();
  b.view.num_weights = b.weights.size();
  return b;
}

// A valid batch of raw ids (the partner's, and the check step's); the fixed table's ids < 5.
FuzzBatch Valid(int64_t seed) {
  FuzzBatch b;
  const int64_t B = 1 + seed % 3;
  for (int f = 0; f < kFeatures; ++f)
    for (int64_t s = 0; s < B; ++s) {
      const int32_t len = static_cast<int32_t>((f + s + seed) % 3);
      b.lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) {
        const int64_t x = (seed * 5 + s * 3 + k) % 13;
        // 13 raw ids spread over the whole int64 range (unsigned: the product wraps).
        const uint64_t raw = static_cast<uint64_t>(x) * 0x9E3779B97F4A7C15ULL;
        b.ids.push_back(f == 2 ? x % 5 : static_cast<int64_t>(raw));
      }
    }
  b.view.batch_size = B;
  b.view.num_features = kFeatures;
  b.view.lengths = b.lengths.data();
  b.view.num_lengths = b.lengths.size();
  b.view.values = b.ids.empty() ? nullptr : b.ids.data();
  b.view.values_dtype = SHARDREC_DTYPE_INT64;
  b.view.num_values = b.ids.size();
  return b;
}

struct Stats {
  shardrec_dynamic_table_stats_t t[kNumDynamic];
};

Stats ReadStats(shardrec_embedding_t* c) {
  Stats s;
  for (int k = 0; k < kNumDynamic; ++k) {
    FUZZ_CHECK(shardrec_dynamic_table_stats_init(&s.t[k], SHARDREC_DYNAMIC_TABLE_STATS_VERSION) ==
               SHARDREC_OK);
    FUZZ_CHECK(shardrec_embedding_dynamic_stats(c, kDynamic[k], &s.t[k]) == SHARDREC_OK);
  }
  return s;
}

// The invariants of one table's stats on their own.
void CheckAddsUp(const shardrec_dynamic_table_stats_t& s) {
  FUZZ_CHECK(s.size >= 0 && s.size <= s.capacity);
  FUZZ_CHECK(s.size == s.total_inserted - s.total_evicted);
  FUZZ_CHECK(s.last_inserted >= 0 && s.last_inserted <= s.total_inserted);
  FUZZ_CHECK(s.last_evicted >= 0 && s.last_evicted <= s.last_inserted);
  FUZZ_CHECK(s.last_rejected_admission >= 0 &&
             s.last_rejected_admission <= s.total_rejected_admission);
  FUZZ_CHECK(s.last_rejected_full >= 0 && s.last_rejected_full <= s.total_rejected_full);
  FUZZ_CHECK(s.capacity == 0 ? s.load_factor == 0.0
                             : s.load_factor == static_cast<double>(s.size) / s.capacity);
}

bool SameTotals(const shardrec_dynamic_table_stats_t& a, const shardrec_dynamic_table_stats_t& b) {
  return a.size == b.size && a.capacity == b.capacity && a.total_inserted == b.total_inserted &&
         a.total_evicted == b.total_evicted &&
         a.total_rejected_admission == b.total_rejected_admission &&
         a.total_rejected_full == b.total_rejected_full;
}

// An accepted forward moved the totals by its "last" counts.
void CheckStep(const shardrec_dynamic_table_stats_t& before,
               const shardrec_dynamic_table_stats_t& after) {
  FUZZ_CHECK(after.total_inserted == before.total_inserted + after.last_inserted);
  FUZZ_CHECK(after.total_evicted == before.total_evicted + after.last_evicted);
  FUZZ_CHECK(after.total_rejected_admission ==
             before.total_rejected_admission + after.last_rejected_admission);
  FUZZ_CHECK(after.total_rejected_full == before.total_rejected_full + after.last_rejected_full);
}

// The fixed table's weights and row-wise Adagrad state.
std::vector<float> FixedSnapshot(shardrec_embedding_t* c) {
  std::vector<float> all(5 * 4 + 5);
  FUZZ_CHECK(shardrec_embedding_get_weights(c, "fixed", all.data(), 20) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_embedding_get_state(c, "fixed", "momentum1", all.data() + 20, 5) ==
             SHARDREC_OK);
  return all;
}

// Forward + backward of one batch; checks the stats and the no-change rules around it.
void Step(shardrec_embedding_t* c, const FuzzBatch& batch, Reader* fuzzed, int64_t dim) {
  const Stats before = ReadStats(c);
  const std::vector<float> fixed_before = FixedSnapshot(c);
  const int64_t rows =
      batch.view.batch_size > 0 && batch.view.batch_size <= kMaxBatch ? batch.view.batch_size : 0;
  // Now and then the output length is one short: that check is made by each rank alone after
  // the input exchange, and a forward it rejects on any rank must insert nothing either.
  std::vector<float> out(static_cast<size_t>(rows * dim));
  const bool short_out = fuzzed != nullptr && !out.empty() && fuzzed->Byte() % 8 == 0;
  const shardrec_status_t fwd = shardrec_embedding_forward(
      c, &batch.view, out.data(), out.size() - (short_out ? 1 : 0), nullptr);
  FUZZ_CHECK(fwd == SHARDREC_OK || Rejection(fwd));
  const Stats mid = ReadStats(c);
  for (int k = 0; k < kNumDynamic; ++k) {
    CheckAddsUp(mid.t[k]);
    if (fwd == SHARDREC_OK) {
      CheckStep(before.t[k], mid.t[k]);
    } else {
      FUZZ_CHECK(SameTotals(before.t[k], mid.t[k]));  // a rejected batch inserts nothing
    }
  }
  std::vector<float> grad(static_cast<size_t>(rows * dim));
  for (auto& g : grad) g = fuzzed ? fuzzed->Float() : 0.01f;
  const shardrec_status_t bwd = shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr);
  FUZZ_CHECK(bwd == SHARDREC_OK || Rejection(bwd));
  if (bwd != SHARDREC_OK) {
    const std::vector<float> fixed_after = FixedSnapshot(c);
    FUZZ_CHECK(std::memcmp(fixed_before.data(), fixed_after.data(), fixed_after.size() * 4) == 0);
  }
  // A backward changes no row's presence: the stats are those of the forward.
  const Stats end = ReadStats(c);
  for (int k = 0; k < kNumDynamic; ++k) FUZZ_CHECK(SameTotals(mid.t[k], end.t[k]));
}

// Fuzzed scores for the SCORE table (not collective: rank 0 alone).
void SetScores(shardrec_embedding_t* c, Reader& in) {
  const size_t n = in.Byte() % 6;
  std::vector<int64_t> ids(n);
  std::vector<double> scores(n);
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    ids[i] = in.Id();
    scores[i] = in.Float();
    finite = finite && std::isfinite(scores[i]);
  }
  const Stats before = ReadStats(c);
  size_t num_set = SIZE_MAX;
  const shardrec_status_t rc =
      shardrec_embedding_dynamic_set_scores(c, "cw", ids.data(), scores.data(), n, &num_set);
  FUZZ_CHECK(finite ? rc == SHARDREC_OK : rc == SHARDREC_EINVAL);
  FUZZ_CHECK(rc != SHARDREC_OK || num_set <= n);
  const Stats after = ReadStats(c);
  for (int k = 0; k < kNumDynamic; ++k) FUZZ_CHECK(SameTotals(before.t[k], after.t[k]));
}

void Iteration(int rank, shardrec_embedding_t* c, Reader* fuzzed, int64_t seed) {
  int64_t dim = 0;
  FUZZ_CHECK(shardrec_embedding_output_dim(c, &dim) == SHARDREC_OK);
  const FuzzBatch own = fuzzed ? Decode(*fuzzed) : Valid(seed + rank);
  Step(c, own, fuzzed, dim);
  if (fuzzed) SetScores(c, *fuzzed);
  // Whatever happened, a valid step still works and pairs up with the peer's.
  const FuzzBatch ok = Valid(seed + 10 + rank);
  std::vector<float> o(static_cast<size_t>(ok.view.batch_size * dim));
  FUZZ_CHECK(shardrec_embedding_forward(c, &ok.view, o.data(), o.size(), nullptr) == SHARDREC_OK);
  for (auto& g : o) g = 0.001f;
  FUZZ_CHECK(shardrec_embedding_backward(c, o.data(), o.size(), nullptr) == SHARDREC_OK);
  const Stats s = ReadStats(c);
  for (int k = 0; k < kNumDynamic; ++k) CheckAddsUp(s.t[k]);
}

struct World {
  shardrec_comm_t* comms[2] = {nullptr, nullptr};
  shardrec_plan_t* plan = nullptr;
  shardrec_embedding_t* coll[2] = {nullptr, nullptr};
  std::mutex mu;
  std::condition_variable cv;
  int64_t round = 0;
  std::thread partner;
};

World* Setup() {
  auto* w = new World;
  shardrec_comm_options_t co;
  shardrec_comm_options_init(&co, SHARDREC_COMM_OPTIONS_VERSION);
  co.timeout_ms = 20000;  // a hang is a finding
  FUZZ_CHECK(shardrec_comm_create_local_group(w->comms, 2, &co) == SHARDREC_OK);
  const char* fnames[kFeatures] = {"a", "b", "c", "d"};
  shardrec_feature_config_t features[kFeatures];
  for (int f = 0; f < kFeatures; ++f) {
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = fnames[f];
  }
  shardrec_dynamic_table_config_t dyn;
  shardrec_dynamic_table_config_init(&dyn, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
  dyn.eviction = SHARDREC_EVICTION_LRU;
  dyn.admission_threshold = 2;
  shardrec_dynamic_table_config_t dyn_score = dyn;
  dyn_score.eviction = SHARDREC_EVICTION_SCORE;
  const int32_t feature_of[4] = {0, 1, 2, 3};
  const char* names[4] = {"rw", "cw", "fixed", "dp"};
  const int64_t rows[4] = {8, 4, 5, 4};  // rw: 4 slots per rank
  const int32_t dims[4] = {4, 8, 4, 4};
  shardrec_table_config_t tables[4];
  shardrec_table_constraints_t cons[4];
  for (int t = 0; t < 4; ++t) {
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    tables[t].name = names[t];
    tables[t].rows = rows[t];
    tables[t].dim = dims[t];
    tables[t].features = &feature_of[t];
    tables[t].num_features = 1;
    tables[t].dynamic = t == 1 ? &dyn_score : t != 2 ? &dyn : nullptr;
    shardrec_table_constraints_init(&cons[t], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    cons[t].table = names[t];
    cons[t].min_partition = 4;
  }
  tables[1].pooling = SHARDREC_POOLING_MEAN;
  cons[0].sharding_types = 1u << SHARDREC_SHARDING_ROW_WISE;
  cons[1].sharding_types = 1u << SHARDREC_SHARDING_COLUMN_WISE;
  cons[2].sharding_types = 1u << SHARDREC_SHARDING_TABLE_WISE;
  cons[3].sharding_types = 1u << SHARDREC_SHARDING_DATA_PARALLEL;
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = 2;
  topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  FUZZ_CHECK(shardrec_plan_create(&w->plan, tables, 4, features, kFeatures, &topo, cons, 4) ==
             SHARDREC_OK);
  std::thread creators[2];
  for (int r = 0; r < 2; ++r) {
    creators[r] = std::thread([w, r] {
      FUZZ_CHECK(shardrec_embedding_create(&w->coll[r], w->plan, w->comms[r], nullptr, nullptr) ==
                 SHARDREC_OK);
    });
  }
  for (auto& t : creators) t.join();
  w->partner = std::thread([w] {
    for (int64_t seen = 0;; ++seen) {
      {
        std::unique_lock<std::mutex> lock(w->mu);
        w->cv.wait(lock, [&] { return w->round > seen; });
      }
      Iteration(1, w->coll[1], nullptr, seen);
    }
  });
  w->partner.detach();
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = Setup();
  int64_t seed = 0;
  {
    std::lock_guard<std::mutex> lock(world->mu);
    seed = world->round++;
  }
  world->cv.notify_all();
  Reader in{{data, size}};
  Iteration(0, world->coll[0], &in, seed);
  return 0;
}
