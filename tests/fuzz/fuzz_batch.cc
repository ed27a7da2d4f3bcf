// libFuzzer target over the public batch path: a fuzzed KJT (sizes, lengths, ids, per-id
// weights, NaN/Inf included) and a fuzzed output gradient go into a 2-rank collection through
// the C API; rank 1 (a partner thread) always sends a valid batch. Checked on every input:
//  - no crash, hang or sanitizer report (the sanitizers and the fuzzer watch for those);
//  - every call returns OK or a documented rejection, never EINTERNAL;
//  - a forward is refused exactly when the batch breaks a documented rule (MustRefuse), and a
//    backward exactly when its forward was refused or its gradient is not finite;
//  - a rejected forward or backward changes no weight or optimizer state on either rank;
//  - the next valid step works on both ranks (they stay paired).
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr int kFeatures = 3;
constexpr int64_t kMaxBatch = 8;

bool Rejection(shardrec_status_t rc) {
  return rc == SHARDREC_EINVAL || rc == SHARDREC_EUSAGE || rc == SHARDREC_ENOTFOUND;
}

// Reads bytes off the fuzz input; past the end it yields zeros.
struct Reader : shardrec::fuzz::ByteReader {
  int32_t Small() { return static_cast<int8_t>(Byte()); }  // -128..127
  float Float() {
    const uint8_t b = Byte();
    switch (b & 0x0f) {
      case 0:
        return NAN;
      case 1:
        return INFINITY;
      case 2:
        return -INFINITY;
      default:
        return static_cast<float>(static_cast<int8_t>(Byte())) / 16.0f;
    }
  }
};

// A batch built from the input, with its own storage.
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
  if ((shape & 0xf0) == 0xf0) B = (shape & 1) ? (int64_t{1} << 62) : -3;  // absurd sizes
  b.lengths.resize(static_cast<size_t>(kFeatures * (B > 0 && B <= kMaxBatch ? B : 0)));
  size_t total = 0;
  for (auto& len : b.lengths) {
    len = in.Small() % 6;  // negative lengths included
    if (len > 0) total += static_cast<size_t>(len);
  }
  const uint8_t flags = in.Byte();
  size_t num_values = total;
  if (flags & 1) num_values += in.Byte() % 3;  // lengths that do not add up
  b.ids.resize(num_values);
  for (auto& id : b.ids) {
    const int32_t v = in.Small();
    id = (flags & 2) && v < -100 ? int64_t{1} << 40 : v;  // out of range, negative, huge
  }
  const bool weighted = flags & 4;
  if (weighted) {
    b.weights.resize(num_values + ((flags & 8) ? 1 : 0));
    for (auto& w : b.weights) w = in.Float();
  }
  b.view.batch_size = B;
  b.view.num_features = (flags & 16) ? kFeatures + 1 : kFeatures;
  b.view.lengths = b.lengths.empty() ? nullptr : b.lengths.data();
  b.view.num_lengths = b.lengths.size();
  b.view.values = b.ids.empty() ? nullptr : b.ids.data();
  b.view.values_dtype = SHARDREC_DTYPE_INT64;
  b.view.num_values = num_values;
  b.view.weights = weighted ? b.weights.data() : nullptr;
  b.view.num_weights = weighted ? b.weights.size() : 0;
  return b;
}

// The batch rules of shardrec/tensor.h and shardrec_embedding_forward, written out again as the
// oracle: whether a forward of `b` into `out_len` floats must be refused. A batch that breaks none
// must be accepted (the partner's batch is always valid).
bool MustRefuse(const FuzzBatch& b, size_t out_len, int64_t dim) {
  // Features a and c read table "small" (5 rows), b reads "wide" (40); Decode gives a batch of
  // more than kMaxBatch samples no lengths.
  const int64_t rows[kFeatures] = {5, 40, 5};
  return shardrec::fuzz::KjtBreaksRules(b.view, kFeatures, kMaxBatch, rows) ||
         out_len != static_cast<size_t>(b.view.batch_size * dim);
}

bool AllFinite(const std::vector<float>& g) {
  for (float x : g)
    if (!std::isfinite(x)) return false;
  return true;
}

// A valid batch (the partner's, and the check step's).
FuzzBatch Valid(int64_t seed) {
  FuzzBatch b;
  const int64_t B = 2 + seed % 3;
  for (int f = 0; f < kFeatures; ++f)
    for (int64_t s = 0; s < B; ++s) {
      const int32_t len = static_cast<int32_t>((f + s + seed) % 3);
      b.lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) b.ids.push_back((seed * 7 + s * 3 + k) % 5);
    }
  b.view.batch_size = B;
  b.view.num_features = kFeatures;
  b.view.lengths = b.lengths.data();
  b.view.num_lengths = b.lengths.size();
  b.view.values = b.ids.data();
  b.view.values_dtype = SHARDREC_DTYPE_INT64;
  b.view.num_values = b.ids.size();
  return b;
}

// Every table's weights and row-wise Adagrad state, for the no-change check.
std::vector<float> Snapshot(shardrec_embedding_t* c) {
  struct Table {
    const char* name;
    size_t rows, dim;
  };
  std::vector<float> all;
  for (const Table& t : {Table{"small", 5, 4}, Table{"wide", 40, 8}}) {
    std::vector<float> w(t.rows * t.dim);
    FUZZ_CHECK(shardrec_embedding_get_weights(c, t.name, w.data(), w.size()) == SHARDREC_OK);
    all.insert(all.end(), w.begin(), w.end());
    w.resize(t.rows);  // one statistic per row
    FUZZ_CHECK(shardrec_embedding_get_state(c, t.name, "momentum1", w.data(), w.size()) ==
               SHARDREC_OK);
    all.insert(all.end(), w.begin(), w.end());
  }
  return all;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// One rank's part of an iteration; both ranks issue the same sequence of collective calls
// whatever their inputs: snapshot, forward, backward, snapshot, a valid step. `fuzzed` is null
// on the partner (valid input instead).
void Iteration(int rank, shardrec_embedding_t* c, Reader* fuzzed, int64_t seed) {
  int64_t dim = 0;
  shardrec_embedding_output_dim(c, &dim);
  FuzzBatch own = fuzzed ? Decode(*fuzzed) : Valid(seed + rank);
  const std::vector<float> before = Snapshot(c);
  std::vector<float> out(static_cast<size_t>(kMaxBatch * dim) + 8);
  const int64_t rows =
      own.view.batch_size > 0 && own.view.batch_size <= kMaxBatch ? own.view.batch_size : 0;
  size_t out_len = static_cast<size_t>(rows * dim);
  // A wrong output size now and then: this rank alone fails its forward, and the backward that
  // follows then fails on every rank.
  if (fuzzed && (fuzzed->Byte() & 7) == 0) out_len += 1;
  shardrec_status_t rc = shardrec_embedding_forward(c, &own.view, out.data(), out_len, nullptr);
  FUZZ_CHECK(rc == SHARDREC_OK || Rejection(rc));
  // The partner's batch is valid, so this rank's alone decides (the partner learns of it).
  if (fuzzed) FUZZ_CHECK((rc != SHARDREC_OK) == MustRefuse(own, out_len, dim));
  const bool forward_ok = rc == SHARDREC_OK;
  std::vector<float> grad(static_cast<size_t>(rows * dim));
  for (auto& g : grad) g = fuzzed ? fuzzed->Float() : 0.01f;
  rc = shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr);
  FUZZ_CHECK(rc == SHARDREC_OK || Rejection(rc));
  if (fuzzed) FUZZ_CHECK((rc == SHARDREC_OK) == (forward_ok && AllFinite(grad)));
  const std::vector<float> after = Snapshot(c);
  // A backward rejected on any rank is rejected on all, and nothing changed anywhere.
  if (rc != SHARDREC_OK) FUZZ_CHECK(SameBits(before, after));
  // Whatever happened, a valid step still works and pairs up with the peer's.
  FuzzBatch ok = Valid(seed + 10 + rank);
  std::vector<float> o2(static_cast<size_t>(ok.view.batch_size * dim), 0.0f);
  FUZZ_CHECK(shardrec_embedding_forward(c, &ok.view, o2.data(), o2.size(), nullptr) == SHARDREC_OK);
  for (auto& g : o2) g = 0.001f;
  FUZZ_CHECK(shardrec_embedding_backward(c, o2.data(), o2.size(), nullptr) == SHARDREC_OK);
}

struct World {
  shardrec_comm_t* comms[2] = {nullptr, nullptr};
  shardrec_plan_t* plan = nullptr;
  shardrec_embedding_t* coll[2] = {nullptr, nullptr};
  std::mutex mu;
  std::condition_variable cv;
  int64_t round = 0;  // iterations handed to the partner
  std::thread partner;
};

World* Setup() {
  auto* w = new World;
  shardrec_comm_options_t co;
  shardrec_comm_options_init(&co, SHARDREC_COMM_OPTIONS_VERSION);
  co.timeout_ms = 20000;  // a hang is a finding: fail long before the fuzzer's own timeout
  FUZZ_CHECK(shardrec_comm_create_local_group(w->comms, 2, &co) == SHARDREC_OK);
  const char* fnames[kFeatures] = {"a", "b", "c"};
  shardrec_feature_config_t features[kFeatures];
  for (int f = 0; f < kFeatures; ++f) {
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = fnames[f];
  }
  const int32_t small_features[] = {0, 2};
  const int32_t wide_features[] = {1};
  shardrec_table_config_t tables[2];
  shardrec_table_config_init(&tables[0], SHARDREC_TABLE_CONFIG_VERSION);
  tables[0].name = "small";
  tables[0].rows = 5;
  tables[0].dim = 4;
  tables[0].pooling = SHARDREC_POOLING_MEAN;
  tables[0].features = small_features;
  tables[0].num_features = 2;
  shardrec_table_config_init(&tables[1], SHARDREC_TABLE_CONFIG_VERSION);
  tables[1].name = "wide";
  tables[1].rows = 40;
  tables[1].dim = 8;
  tables[1].features = wide_features;
  tables[1].num_features = 1;
  shardrec_table_constraints_t cons[2];
  for (int t = 0; t < 2; ++t) {
    shardrec_table_constraints_init(&cons[t], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    cons[t].table = tables[t].name;
    cons[t].min_partition = 4;
  }
  cons[0].sharding_types = 1u << SHARDREC_SHARDING_ROW_WISE;
  cons[1].sharding_types = 1u << SHARDREC_SHARDING_COLUMN_WISE;
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = 2;
  topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  FUZZ_CHECK(shardrec_plan_create(&w->plan, tables, 2, features, kFeatures, &topo, cons, 2) ==
             SHARDREC_OK);
  std::thread creators[2];
  for (int r = 0; r < 2; ++r) {
    creators[r] = std::thread([w, r] {
      FUZZ_CHECK(shardrec_embedding_create(&w->coll[r], w->plan, w->comms[r], nullptr, nullptr) ==
                 SHARDREC_OK);
    });
  }
  for (auto& t : creators) t.join();
  // The partner runs one valid iteration per fuzz input, forever (the process exits at the end).
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
