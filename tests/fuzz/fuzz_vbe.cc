// libFuzzer target over VBE batches (variable batch size per feature, docs/variable-batch.md):
// a fuzzed shardrec_kjt_vbe_view_t (feature batch sizes, strides, inverse indices, lengths, ids,
// weights; out of range, negative, huge, NULL arrays with counts) and a fuzzed gradient go to a
// collection picked by the input among pooled (SUM and MEAN tables, every sharding type) and
// sequence collections at world 1 and at world 2 (rank 1, a partner thread, always sends a valid
// VBE batch), through forward_vbe or the pipelined input_dist_start_vbe. Checked on every input:
//  - no crash, hang or sanitizer report;
//  - every call returns OK or EINVAL / EUSAGE with a message, never EINTERNAL; the forward
//    refuses a view exactly when it breaks a rule of docs/variable-batch.md (VbeBreaksRules: the
//    fields, batch sizes, inverse indices, lengths, ids in range, finite weights) or out_len is
//    wrong, and shardrec_embedding_vbe_output_len accepts every view that breaks none; a backward
//    is refused when its forward was or its gradient has a wrong length or a non-finite element,
//    and accepted otherwise when no sum of its elements can overflow;
//  - a refused forward or backward (on any rank) changes no weight, optimizer state or step
//    count on either rank, and a valid batch then gives the output it gave just before;
//  - the next valid step works on both ranks (they stay paired).
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr int kFeatures = 4;
constexpr size_t kMaxOut = size_t{1} << 16;  // floats: a larger output is never given a buffer

bool Rejection(shardrec_status_t rc) { return rc == SHARDREC_EINVAL || rc == SHARDREC_EUSAGE; }

void CheckRejection(shardrec_status_t rc) {
  FUZZ_CHECK(Rejection(rc));
  FUZZ_CHECK(std::strlen(shardrec_last_error()) > 0);
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
        return 3e38f;  // finite, but sums of two overflow
      default:
        return static_cast<float>(static_cast<int8_t>(Byte())) / 16.0f;
    }
  }
  // A count that is mostly small, sometimes negative or huge.
  int64_t Size(int64_t typical) {
    const uint8_t b = Byte();
    if (b < 0xf0) return b % (typical + 1);
    if (b < 0xf8) return -1 - (b & 7);
    if (b >= 0xfe) return b == 0xfe ? int64_t{1} << 62 : INT64_MAX;  // sums that wrap
    return int64_t{1} << (32 + (b & 7) * 4);
  }
};

// A VBE batch with its own storage. Invariant: a non-NULL array holds at least the count the
// view gives it (a caller that lies about a length cannot be detected by any C API); a huge
// count goes with a NULL array or with sizes that disagree with it.
struct VbeBatch {
  std::vector<int64_t> sizes;
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<int32_t> ids32;
  std::vector<float> weights;
  std::vector<int64_t> inverse;
  shardrec_kjt_vbe_view_t view = SHARDREC_KJT_VBE_VIEW_INIT;
};

// The largest table has 23 rows, the smallest 5: ids below 5 fit every table.
int64_t Id(Reader& in) {
  const int32_t v = in.Small();
  if (v >= 0) return v % 5;
  if (v > -64) return (-v) % 30;  // in range for some tables only
  if (v > -100) return v;         // negative
  return int64_t{1} << 40;
}

VbeBatch Decode(Reader& in) {
  VbeBatch b;
  const uint8_t flags = in.Byte();
  const uint8_t spoil = in.Byte();
  const bool inverse = flags & 1;
  const bool weighted = flags & 2;
  const bool plain = (flags & 0x0c) == 0x0c;  // feature_batch_sizes NULL
  const size_t F = (flags & 0x30) == 0x30 ? kFeatures + 1 - 2 * (flags >> 7) : kFeatures;
  b.sizes.resize(F);
  uint64_t sum = 0;  // wraps for the huge sizes, as a careless caller's would
  int64_t max = 0;
  bool sane = true;  // every B_f small and non-negative
  for (auto& s : b.sizes) {
    s = in.Size(5);
    if (s < 0 || s > 5) sane = false;
    if (s > max) max = s;
    if (s > 0) sum += static_cast<uint64_t>(s);
  }
  int64_t B = inverse ? in.Size(5) : max;
  if (!inverse && (spoil & 1)) B += (spoil & 2) && B < INT64_MAX ? 1 : -1;  // not max B_f
  if (plain) B = in.Byte() % 5;
  const size_t bags = plain ? F * static_cast<size_t>(B) : sane ? static_cast<size_t>(sum) : 0;
  b.lengths.resize(bags + 1);
  size_t total = 0;
  for (auto& len : b.lengths) {
    len = in.Small() % 4;  // negative lengths included
    if (len > 0 && &len != &b.lengths.back()) total += static_cast<size_t>(len);
  }
  size_t num_lengths = bags;
  if (spoil & 4) num_lengths += (spoil & 8) ? 1 : (bags > 0 ? -1 : 0);  // lengths and strides
  if (!sane) num_lengths = static_cast<size_t>(sum);                    // huge: lengths NULL below
  size_t num_values = total;
  if (spoil & 0x10) num_values += (spoil & 0x20) ? 1 : (total > 0 ? -1 : 0);
  b.ids.resize(num_values);
  for (auto& id : b.ids) id = Id(in);
  const bool int32_ids = (flags & 0x40) && !(flags & 0x80);
  if (int32_ids)
    for (int64_t id : b.ids) b.ids32.push_back(static_cast<int32_t>(id));
  if (weighted) {
    b.weights.resize(num_values);
    for (auto& w : b.weights) w = in.Float();
  }
  if (inverse && B >= 0 && B <= 5) {
    b.inverse.resize(F * static_cast<size_t>(B));
    for (size_t i = 0; i < b.inverse.size(); ++i) {
      const int64_t bf = b.sizes[i / static_cast<size_t>(B)];
      const uint8_t r = in.Byte();
      const int64_t past = bf < INT64_MAX - 8 ? bf + (r & 6) : INT64_MAX;  // out of range
      b.inverse[i] = r < 0xf0 ? (bf > 0 ? r % bf : 0) : (r & 1 ? past : -1 - (r & 6));
    }
  }
  shardrec_kjt_vbe_view_t& v = b.view;
  v.kjt.batch_size = B;
  v.kjt.num_features = (spoil & 0xc0) == 0xc0 ? F + 1 : F;
  v.kjt.lengths = b.lengths.data();
  v.kjt.num_lengths = num_lengths;
  v.kjt.values = int32_ids ? static_cast<const void*>(b.ids32.data()) : b.ids.data();
  v.kjt.values_dtype = int32_ids ? SHARDREC_DTYPE_INT32 : SHARDREC_DTYPE_INT64;
  v.kjt.num_values = num_values;
  v.kjt.weights = weighted ? b.weights.data() : nullptr;
  v.kjt.num_weights = weighted ? b.weights.size() : 0;
  if (!plain) {
    v.feature_batch_sizes = b.sizes.data();
    v.num_feature_batch_sizes = F;
  }
  if (inverse) {
    v.inverse_indices = b.inverse.data();
    v.num_inverse_indices = b.inverse.size();
    if (spoil & 0x40 && !b.inverse.empty()) v.num_inverse_indices -= 1;
  }
  // NULL arrays with their counts; a weights count that disagrees; a wrong version or dtype.
  const uint8_t nulls = in.Byte();
  if ((nulls & 0x03) == 0x03 || !sane) v.kjt.lengths = nullptr;
  if ((nulls & 0x0c) == 0x0c) v.kjt.values = nullptr;
  if ((nulls & 0x30) == 0x30) v.inverse_indices = nullptr;
  if ((nulls & 0xc0) == 0xc0 && !plain) v.feature_batch_sizes = nullptr;
  if (nulls == 0x5a && weighted) v.kjt.num_weights += 1;  // shorter count only: never more
  if ((nulls & 0xf0) == 0x90 && !weighted) v.kjt.num_weights = 1 + (nulls & 3);  // no array
  if (nulls == 0xa5) v.version = 2;
  if (nulls == 0x66) v.kjt.values_dtype = SHARDREC_DTYPE_FLOAT32;
  if (weighted && v.kjt.num_weights > b.weights.size()) v.kjt.weights = nullptr;
  return b;
}

// Field checks the header and docs/variable-batch.md promise, whatever else the view holds: a
// view that breaks one is refused.
bool MustRefuse(const shardrec_kjt_vbe_view_t& v) {
  const shardrec_kjt_view_t& k = v.kjt;
  return v.version != SHARDREC_KJT_VBE_VIEW_VERSION || k.num_features != kFeatures ||
         (k.lengths == nullptr && k.num_lengths > 0) || (k.values == nullptr && k.num_values > 0) ||
         (k.weights == nullptr && k.num_weights != 0) ||
         (k.weights != nullptr && k.num_weights != k.num_values) ||
         (k.values_dtype != SHARDREC_DTYPE_INT64 && k.values_dtype != SHARDREC_DTYPE_INT32) ||
         (v.inverse_indices == nullptr && v.num_inverse_indices > 0) ||
         (v.feature_batch_sizes == nullptr &&
          (v.inverse_indices != nullptr || v.num_feature_batch_sizes != 0)) ||
         (v.feature_batch_sizes != nullptr && v.num_feature_batch_sizes != kFeatures) ||
         (v.inverse_indices != nullptr &&
          v.num_inverse_indices != kFeatures * static_cast<uint64_t>(k.batch_size));
}

// Every rule of docs/variable-batch.md "Validation and agreement" written out again: MustRefuse's
// fields, then the batch sizes, inverse indices and batch_size, then every bag's rules (a plain
// view's as a plain batch's). A view that breaks none is accepted; one that breaks any is refused.
bool VbeBreaksRules(const shardrec_kjt_vbe_view_t& v) {
  static const int64_t kRowsOf[kFeatures] = {10, 23, 23, 5};  // t0; t1 twice; t2 (MakePlan)
  if (MustRefuse(v)) return true;
  const shardrec_kjt_view_t& k = v.kjt;
  if (v.feature_batch_sizes == nullptr)
    return shardrec::fuzz::KjtBreaksRules(k, kFeatures, INT64_MAX, kRowsOf);
  const int64_t* sizes = v.feature_batch_sizes;
  int64_t max = 0;
  for (int f = 0; f < kFeatures; ++f) {
    if (sizes[f] < 0) return true;
    max = std::max(max, sizes[f]);
  }
  if (k.batch_size < 0) return true;
  if (v.inverse_indices == nullptr) {
    if (k.batch_size != max) return true;
  } else {
    for (int f = 0; f < kFeatures; ++f)
      for (int64_t b = 0; b < k.batch_size; ++b) {
        const int64_t i = v.inverse_indices[f * k.batch_size + b];
        if (i < 0 || i >= sizes[f]) return true;
      }
  }
  return shardrec::fuzz::BagsBreakRules(k, sizes, kFeatures, kRowsOf);
}

// A valid VBE batch from a seed: B_f in [0, 4], with inverse indices every other seed.
VbeBatch Valid(uint64_t seed) {
  VbeBatch b;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&x](uint64_t n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return n ? x % n : 0;
  };
  int64_t max = 0;
  for (int f = 0; f < kFeatures; ++f) {
    b.sizes.push_back(static_cast<int64_t>(next(5)));
    max = std::max(max, b.sizes.back());
  }
  for (int f = 0; f < kFeatures; ++f)
    for (int64_t s = 0; s < b.sizes[f]; ++s) {
      const int32_t len = static_cast<int32_t>(next(3));
      b.lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) b.ids.push_back(static_cast<int64_t>(next(5)));
    }
  const bool inverse = seed & 1;
  const int64_t B = inverse ? static_cast<int64_t>(next(5)) : max;
  if (inverse)
    for (int f = 0; f < kFeatures; ++f)
      for (int64_t s = 0; s < B; ++s)
        b.inverse.push_back(b.sizes[f] ? static_cast<int64_t>(next(b.sizes[f])) : 0);
  shardrec_kjt_vbe_view_t& v = b.view;
  v.kjt.batch_size = B;
  v.kjt.num_features = kFeatures;
  v.kjt.lengths = b.lengths.data();
  v.kjt.num_lengths = b.lengths.size();
  v.kjt.values = b.ids.data();
  v.kjt.num_values = b.ids.size();
  v.feature_batch_sizes = b.sizes.data();
  v.num_feature_batch_sizes = kFeatures;
  // An inverse-index view whose features have no bags but which has samples reads bag 0 of
  // an empty feature: not valid, so such a view goes without inverse indices.
  bool readable = true;
  for (int f = 0; f < kFeatures; ++f)
    if (b.sizes[f] == 0 && B > 0) readable = false;
  static const int64_t kNoEntry = 0;  // B = 0: a non-NULL pointer with no entries
  if (inverse && readable) {
    v.inverse_indices = b.inverse.empty() ? &kNoEntry : b.inverse.data();
    v.num_inverse_indices = b.inverse.size();
  } else {
    v.kjt.batch_size = max;
  }
  return b;
}

// One configuration: a plan and each rank's collection of it.
struct Config {
  Config(const char* n, int w, int32_t s, bool seq)
      : name(n), world(w), sharding(s), sequence(seq) {}
  const char* name;
  int world;
  int32_t sharding;  // a SHARDREC_SHARDING_* value for every table
  bool sequence;
  shardrec_embedding_t* coll[2] = {nullptr, nullptr};
  std::vector<const char*> tables;
  std::vector<size_t> rows, dims;
};

struct Snap {
  std::vector<float> values;
  int64_t steps = 0;
};

// Every table's weights and row-wise Adagrad state, and the step count.
Snap Snapshot(const Config& c, shardrec_embedding_t* coll) {
  Snap s;
  for (size_t t = 0; t < c.tables.size(); ++t) {
    std::vector<float> w(c.rows[t] * c.dims[t]);
    FUZZ_CHECK(shardrec_embedding_get_weights(coll, c.tables[t], w.data(), w.size()) ==
               SHARDREC_OK);
    s.values.insert(s.values.end(), w.begin(), w.end());
    w.resize(c.rows[t]);
    FUZZ_CHECK(shardrec_embedding_get_state(coll, c.tables[t], "momentum1", w.data(), w.size()) ==
               SHARDREC_OK);
    s.values.insert(s.values.end(), w.begin(), w.end());
  }
  FUZZ_CHECK(shardrec_embedding_num_steps(coll, &s.steps) == SHARDREC_OK);
  return s;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A valid forward (and, with `train`, a backward); returns the output.
std::vector<float> ValidStep(shardrec_embedding_t* coll, uint64_t seed, bool train) {
  VbeBatch ok = Valid(seed);
  size_t len = 0;
  FUZZ_CHECK(shardrec_embedding_vbe_output_len(coll, &ok.view, &len) == SHARDREC_OK);
  std::vector<float> out(len);
  FUZZ_CHECK(shardrec_embedding_forward_vbe(coll, &ok.view, out.data(), len, nullptr) ==
             SHARDREC_OK);
  if (train) {
    std::vector<float> grad(len, 0.001f);
    FUZZ_CHECK(shardrec_embedding_backward(coll, grad.data(), len, nullptr) == SHARDREC_OK);
  }
  return out;
}

// The forward of a view: plain or through the pipelined input distribution. Every rank takes
// the same path.
shardrec_status_t Forward(shardrec_embedding_t* coll, const shardrec_kjt_vbe_view_t* view,
                          float* out, size_t len, bool pipelined) {
  if (!pipelined) return shardrec_embedding_forward_vbe(coll, view, out, len, nullptr);
  shardrec_status_t rc = shardrec_embedding_input_dist_start_vbe(coll, view, nullptr);
  if (rc == SHARDREC_OK) rc = shardrec_embedding_input_dist_wait(coll, nullptr);
  if (rc == SHARDREC_OK) return shardrec_embedding_forward_distributed(coll, out, len, nullptr);
  // A failed distribution alone does not end the batch before it: in TorchRec's pipelined order
  // (forward_distributed(b), input_dist_start(b+1), backward(b)) that batch still trains. The
  // forward of this batch is what fails, with EUSAGE, and only then is there nothing to train.
  FUZZ_CHECK(shardrec_embedding_forward_distributed(coll, out, len, nullptr) == SHARDREC_EUSAGE);
  return rc;
}

struct Job {
  int config;
  bool pipelined;
  uint64_t seed;
};

// One rank's part of an iteration; both ranks issue the same collective calls whatever their
// inputs. `fuzzed` is null on the partner (a valid batch instead).
void Iteration(int rank, const Config& c, const Job& job, Reader* fuzzed) {
  shardrec_embedding_t* coll = c.coll[rank];
  const uint64_t check_seed = job.seed * 4 + 2;
  const std::vector<float> ref = ValidStep(coll, check_seed, false);
  const Snap before = Snapshot(c, coll);
  VbeBatch own = fuzzed ? Decode(*fuzzed) : Valid(job.seed * 4 + static_cast<uint64_t>(rank));
  // The partner's views are valid, so the fuzzed rank's view alone decides the step's verdict
  // (the partner's calls follow it).
  const bool breaks = VbeBreaksRules(own.view);
  size_t len = 0;
  const shardrec_status_t len_rc = shardrec_embedding_vbe_output_len(coll, &own.view, &len);
  if (len_rc != SHARDREC_OK) {
    CheckRejection(len_rc);
    len = fuzzed ? fuzzed->Byte() % 64 : 0;
  }
  if (!breaks) FUZZ_CHECK(len_rc == SHARDREC_OK);
  // A wrong output length now and then: this rank alone refuses, so every rank does.
  const bool wrong_len = fuzzed && (fuzzed->Byte() & 15) == 0;
  if (wrong_len) len += 1;
  std::vector<float> out(std::min(len, kMaxOut));
  shardrec_status_t rc = Forward(coll, &own.view, out.data(), len, job.pipelined);
  if (rc != SHARDREC_OK) CheckRejection(rc);
  if (len_rc != SHARDREC_OK || wrong_len) FUZZ_CHECK(rc != SHARDREC_OK);
  if (fuzzed) FUZZ_CHECK((rc != SHARDREC_OK) == (breaks || wrong_len));  // exactly when one breaks
  const bool forward_ok = rc == SHARDREC_OK;
  size_t grad_len = out.size();
  const bool wrong_grad_len = fuzzed && (fuzzed->Byte() & 15) == 1;
  if (wrong_grad_len) grad_len += 1;
  std::vector<float> grad(grad_len);
  for (auto& g : grad) g = fuzzed ? fuzzed->Float() : 0.01f;
  bool finite = true, small = true;  // small: no sum of these terms can overflow
  for (float g : grad) {
    finite = finite && std::isfinite(g);
    small = small && std::fabs(g) < 1e6f;
  }
  rc = shardrec_embedding_backward(coll, grad.data(), grad.size(), nullptr);
  if (rc != SHARDREC_OK) CheckRejection(rc);
  if (!forward_ok || wrong_grad_len || !finite) FUZZ_CHECK(rc != SHARDREC_OK);
  if (fuzzed && forward_ok && !wrong_grad_len && small) FUZZ_CHECK(rc == SHARDREC_OK);
  if (rc != SHARDREC_OK) {
    // Refused here or on the peer: nothing changed, and a valid batch reads what it read.
    const Snap after = Snapshot(c, coll);
    FUZZ_CHECK(after.steps == before.steps);
    FUZZ_CHECK(SameBits(before.values, after.values));
    FUZZ_CHECK(SameBits(ValidStep(coll, check_seed, false), ref));
  }
  // Whatever happened, a valid step still works and pairs up with the peer's.
  ValidStep(coll, job.seed * 4 + 3 + static_cast<uint64_t>(rank), true);
}

shardrec_plan_t* MakePlan(Config* c) {
  const char* fnames[kFeatures] = {"f0", "f1", "f2", "f3"};
  shardrec_feature_config_t features[kFeatures];
  for (int f = 0; f < kFeatures; ++f) {
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = fnames[f];
  }
  static const int32_t reads[3][2] = {{0, -1}, {1, 2}, {3, -1}};
  const char* names[3] = {"t0", "t1", "t2"};
  const int64_t rows[3] = {10, 23, 5};
  const int32_t pooling[3] = {SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN, SHARDREC_POOLING_SUM};
  shardrec_table_config_t tables[3];
  shardrec_table_constraints_t cons[3];
  for (int t = 0; t < 3; ++t) {
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    tables[t].name = names[t];
    tables[t].rows = rows[t];
    tables[t].dim = 8;
    tables[t].pooling = c->sequence ? SHARDREC_POOLING_NONE : pooling[t];
    tables[t].features = reads[t];
    tables[t].num_features = reads[t][1] < 0 ? 1 : 2;
    shardrec_table_constraints_init(&cons[t], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    cons[t].table = names[t];
    cons[t].sharding_types = 1u << c->sharding;
    cons[t].min_partition = 4;
    c->tables.push_back(names[t]);
    c->rows.push_back(static_cast<size_t>(rows[t]));
    c->dims.push_back(8);
  }
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = c->world;
  topo.ranks_per_node = c->world;
  topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  shardrec_plan_t* plan = nullptr;
  FUZZ_CHECK(shardrec_plan_create(&plan, tables, 3, features, kFeatures, &topo, cons, 3) ==
             SHARDREC_OK);
  return plan;
}

struct World {
  std::vector<Config> configs;
  shardrec_comm_t* one[1] = {nullptr};  // kept reachable: the handles outlive every input
  shardrec_comm_t* two[2] = {nullptr, nullptr};
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;  // the partner's, in order
};

World* Setup() {
  auto* w = new World;
  w->configs = {
      {"w1 pooled", 1, SHARDREC_SHARDING_TABLE_WISE, false},
      {"w1 sequence", 1, SHARDREC_SHARDING_TABLE_WISE, true},
      {"w2 data-parallel", 2, SHARDREC_SHARDING_DATA_PARALLEL, false},
      {"w2 table-wise", 2, SHARDREC_SHARDING_TABLE_WISE, false},
      {"w2 row-wise", 2, SHARDREC_SHARDING_ROW_WISE, false},
      {"w2 column-wise", 2, SHARDREC_SHARDING_COLUMN_WISE, false},
      {"w2 table-row-wise", 2, SHARDREC_SHARDING_TABLE_ROW_WISE, false},
      {"w2 grid", 2, SHARDREC_SHARDING_GRID, false},
      {"w2 sequence row-wise", 2, SHARDREC_SHARDING_ROW_WISE, true},
      {"w2 sequence table-wise", 2, SHARDREC_SHARDING_TABLE_WISE, true},
  };
  shardrec_comm_options_t co;
  shardrec_comm_options_init(&co, SHARDREC_COMM_OPTIONS_VERSION);
  co.timeout_ms = 20000;  // a hang is a finding: fail long before the fuzzer's own timeout
  FUZZ_CHECK(shardrec_comm_create_local_group(w->one, 1, &co) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_comm_create_local_group(w->two, 2, &co) == SHARDREC_OK);
  for (Config& c : w->configs) {
    shardrec_plan_t* plan = MakePlan(&c);
    std::thread creators[2];
    for (int r = 0; r < c.world; ++r) {
      creators[r] = std::thread([&c, plan, r, w] {
        shardrec_comm_t* comm = c.world == 1 ? w->one[0] : w->two[r];
        FUZZ_CHECK(shardrec_embedding_create(&c.coll[r], plan, comm, nullptr, nullptr) ==
                   SHARDREC_OK);
      });
    }
    for (int r = 0; r < c.world; ++r) creators[r].join();
    shardrec_plan_destroy(plan);
  }
  // The partner runs rank 1's part of every world-2 input, forever (the process exits at the
  // end).
  std::thread partner([w] {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(w->mu);
        w->cv.wait(lock, [&] { return !w->jobs.empty(); });
        job = w->jobs.front();
        w->jobs.pop_front();
      }
      Iteration(1, w->configs[static_cast<size_t>(job.config)], job, nullptr);
    }
  });
  partner.detach();
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = Setup();
  static uint64_t seed = 0;
  Reader in{{data, size}};
  const uint8_t pick = in.Byte();
  Job job{static_cast<int>(pick % world->configs.size()), (pick & 0x80) != 0, seed++};
  const Config& c = world->configs[static_cast<size_t>(job.config)];
  if (c.world == 2) {
    std::lock_guard<std::mutex> lock(world->mu);
    world->jobs.push_back(job);
  }
  world->cv.notify_all();
  Iteration(0, c, job, &in);
  return 0;
}
