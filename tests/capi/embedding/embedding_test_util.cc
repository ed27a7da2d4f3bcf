// Helpers of the embedding C API tests (see embedding_test_util.h).
#include "tests/capi/embedding/embedding_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {
const char* const kDTypeNames[] = {"float32", "float16", "bfloat16", "float64", "int32",
                                   "int64",   "uint8",   "fp8_e4m3", "fp8_e5m2"};
}  // namespace

Scenario StandardScenario(int32_t world, int32_t sharding_type, int32_t pooling) {
  Scenario s;
  s.world = world;
  s.ranks_per_node = 2;
  s.num_features = 4;
  const bool seq = pooling == SHARDREC_POOLING_NONE;
  RefTable t0{"t0", 10, 8, pooling, {0}, 0, 0, 0};
  RefTable t1{"t1", 23, seq ? 8 : 12, pooling, {1, 2}, 0, 0, 0};
  RefTable t2{"t2", 5, seq ? 8 : 16, pooling, {3}, 0, 0, 0};
  s.tables = {t0, t1, t2};
  s.sharding.assign(s.tables.size(), sharding_type);
  return s;
}

PlanPtr MakePlan(const Scenario& s) {
  std::vector<std::string> fnames;
  for (int32_t f = 0; f < s.num_features; ++f) fnames.push_back("f" + std::to_string(f));
  std::vector<shardrec_feature_config_t> features(s.num_features);
  for (int32_t f = 0; f < s.num_features; ++f) {
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = fnames[f].c_str();
  }
  std::vector<shardrec_table_config_t> tables(s.tables.size());
  std::vector<shardrec_table_constraints_t> cons(s.tables.size());
  for (size_t t = 0; t < s.tables.size(); ++t) {
    const RefTable& rt = s.tables[t];
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    tables[t].name = rt.name.c_str();
    tables[t].rows = rt.rows;
    tables[t].dim = rt.dim;
    tables[t].pooling = rt.pooling;
    tables[t].features = rt.features.data();
    tables[t].num_features = rt.features.size();
    tables[t].init_kind = rt.init_kind;
    tables[t].init_low = rt.init_low;
    tables[t].init_high = rt.init_high;
    tables[t].dtype = rt.dtype;
    shardrec_table_constraints_init(&cons[t], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    cons[t].table = rt.name.c_str();
    cons[t].sharding_types = 1u << s.sharding[t];
    cons[t].min_partition = s.min_partition;
  }
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = s.world;
  topo.ranks_per_node = s.ranks_per_node < s.world ? s.ranks_per_node : s.world;
  topo.optimizer = s.optimizer.type;
  shardrec_plan_t* plan = nullptr;
  shardrec_status_t rc = shardrec_plan_create(&plan, tables.data(), tables.size(), features.data(),
                                              features.size(), &topo, cons.data(), cons.size());
  EXPECT_EQ(rc, SHARDREC_OK) << shardrec_last_error();
  return PlanPtr(plan);
}

namespace {
// The cached groups, destroyed when the test binary exits (so leak checkers stay quiet).
struct CachedGroups {
  std::mutex mu;
  std::map<int32_t, std::vector<shardrec_comm_t*>> groups;
  ~CachedGroups() {
    for (auto& [world, comms] : groups)
      for (shardrec_comm_t* c : comms) shardrec_comm_destroy(c);
  }
};
}  // namespace

shardrec_status_t PlanOneTable(shardrec_table_config_t table, PlanPtr* out) {
  shardrec_feature_config_t feature = SHARDREC_FEATURE_CONFIG_INIT;
  feature.name = "f";
  const int32_t index = 0;
  table.features = &index;
  table.num_features = 1;
  shardrec_topology_t topo;
  EXPECT_EQ(shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION), SHARDREC_OK);
  topo.world_size = 1;
  topo.optimizer = SHARDREC_OPTIMIZER_SGD;
  topo.memory_bytes = uint64_t{1} << 50;
  shardrec_plan_t* plan = nullptr;
  const shardrec_status_t rc =
      shardrec_plan_create(&plan, &table, 1, &feature, 1, &topo, nullptr, 0);
  out->reset(plan);
  return rc;
}

PlanPtr OneTablePlan(shardrec_table_config_t table) {
  PlanPtr plan;
  EXPECT_EQ(PlanOneTable(table, &plan), SHARDREC_OK) << shardrec_last_error();
  return plan;
}

uint64_t MemAvailableKiB() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  unsigned long long kb = 0;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb;
}

shardrec_comm_t* GroupComm(int32_t world, int32_t rank) {
  static CachedGroups cache;
  std::lock_guard<std::mutex> lock(cache.mu);
  auto& g = cache.groups[world];
  if (g.empty()) {
    g.assign(world, nullptr);
    shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
    o.timeout_ms = 60000;  // a failing test must not hang for the default 5 minutes
    shardrec_status_t rc = shardrec_comm_create_local_group(g.data(), world, &o);
    EXPECT_EQ(rc, SHARDREC_OK) << shardrec_last_error();
  }
  return g[rank];
}

std::vector<std::vector<RefBatch>> MakeBatches(const Scenario& s, const ReferenceModel&) {
  std::mt19937_64 gen(s.data_seed);
  std::vector<int64_t> rows_of(s.num_features, 0);
  // A feature that feeds several tables draws ids valid in all of them.
  for (const RefTable& t : s.tables)
    for (int32_t f : t.features)
      rows_of[f] = rows_of[f] == 0 || t.rows < rows_of[f] ? t.rows : rows_of[f];
  std::vector<std::vector<RefBatch>> out(s.steps, std::vector<RefBatch>(s.world));
  for (int32_t step = 0; step < s.steps; ++step) {
    for (int32_t r = 0; r < s.world; ++r) {
      RefBatch& b = out[step][r];
      b.batch_size = s.batch_sizes.empty() ? 4 : s.batch_sizes[r];
      for (int32_t f = 0; f < s.num_features; ++f) {
        for (int64_t i = 0; i < b.batch_size; ++i) {
          const int32_t len = static_cast<int32_t>(gen() % (s.max_bag + 1));
          b.lengths.push_back(len);
          for (int32_t k = 0; k < len; ++k) {
            // Duplicates inside a bag on purpose: every third id repeats the previous one.
            const bool dup = k > 0 && gen() % 3 == 0;
            b.ids.push_back(dup ? b.ids.back() : static_cast<int64_t>(gen() % rows_of[f]));
            if (s.weighted)
              b.weights.push_back(0.25f + 1.5f * static_cast<float>(gen() % 1000) / 1000.0f);
          }
        }
      }
    }
  }
  return out;
}

std::vector<std::vector<std::vector<float>>> MakeGrads(const Scenario& s,
                                                       const std::vector<std::vector<RefBatch>>& b,
                                                       int64_t output_dim) {
  std::mt19937_64 gen(s.data_seed * 7919 + 1);
  const bool seq = s.tables[0].pooling == SHARDREC_POOLING_NONE;
  std::vector<std::vector<std::vector<float>>> out(s.steps);
  for (int32_t step = 0; step < s.steps; ++step) {
    for (int32_t r = 0; r < s.world; ++r) {
      const size_t rows = seq ? b[step][r].ids.size() : static_cast<size_t>(b[step][r].batch_size);
      std::vector<float> g(rows * static_cast<size_t>(output_dim));
      for (float& x : g)
        x = static_cast<float>(static_cast<int64_t>(gen() % 2001) - 1000) / 1000.0f;
      out[step].push_back(std::move(g));
    }
  }
  return out;
}

KjtHolder::KjtHolder(const RefBatch& b, int32_t num_features, bool int32_ids) {
  // A host batch: GPU collections read the device fields (tensor.h).
  view_ = shardrec_kjt_view_t{};
  view_.batch_size = b.batch_size;
  view_.num_features = static_cast<size_t>(num_features);
  view_.lengths = b.lengths.data();
  view_.num_lengths = b.lengths.size();
  if (int32_ids) {
    ids32_.assign(b.ids.begin(), b.ids.end());
    view_.values = ids32_.data();
    view_.values_dtype = SHARDREC_DTYPE_INT32;
  } else {
    view_.values = b.ids.data();
    view_.values_dtype = SHARDREC_DTYPE_INT64;
  }
  view_.num_values = b.ids.size();
  view_.weights = b.weights.empty() ? nullptr : b.weights.data();
  view_.num_weights = b.weights.size();
}

Scenario DTypeScenario(int32_t world, int32_t dtype, int32_t sharding_type, int32_t pooling) {
  Scenario s = StandardScenario(world, sharding_type, pooling);
  s.ranks_per_node = world < 2 ? world : 2;
  for (RefTable& t : s.tables) t.dtype = dtype;
  return s;
}

CollPtr CreateRank(const Scenario& s, shardrec_plan_t* plan, int r, uint64_t seed) {
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.seed = seed;
  o.num_threads = s.num_threads;
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, plan, GroupComm(s.world, r), &opt, &o), SHARDREC_OK)
      << "rank " << r << ": " << shardrec_last_error();
  return CollPtr(c);
}

std::vector<float> GetWeights(shardrec_embedding_t* c, const RefTable& t) {
  std::vector<float> w(static_cast<size_t>(t.rows) * t.dim);
  EXPECT_EQ(shardrec_embedding_get_weights(c, t.name.c_str(), w.data(), w.size()), SHARDREC_OK)
      << shardrec_last_error();
  return w;
}

shardrec_optimizer_config_t ToCOptimizer(const RefOptimizer& o) {
  shardrec_optimizer_config_t c;
  shardrec_optimizer_config_init(&c, SHARDREC_OPTIMIZER_CONFIG_VERSION);
  c.type = o.type;
  c.learning_rate = o.lr;
  c.eps = o.eps;
  c.beta1 = o.beta1;
  c.beta2 = o.beta2;
  c.weight_decay = o.weight_decay;
  c.weight_decay_mode = o.weight_decay_mode;
  c.stochastic_rounding = o.stochastic_rounding ? 1 : 0;
  return c;
}

size_t CountMismatches(const std::vector<float>& a, const std::vector<float>& b, float rtol,
                       float atol, std::string* first) {
  if (a.size() != b.size()) {
    if (first)
      *first = "sizes differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
    return a.size() > b.size() ? a.size() : b.size();
  }
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(a[i] - b[i]) <= rtol * std::fabs(b[i]) + atol) continue;
    if (n++ == 0 && first) {
      std::ostringstream os;
      os << "element " << i << ": got " << a[i] << ", expected " << b[i];
      *first = os.str();
    }
  }
  return n;
}

size_t CountNotRepresentable(const std::vector<float>& values, int32_t dtype, std::string* first) {
  size_t n = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const float r = RoundToStorage(values[i], dtype);
    if (std::memcmp(&r, &values[i], sizeof(float)) == 0) continue;
    if (n++ == 0 && first) {
      std::ostringstream os;
      os.precision(9);
      os << "element " << i << " = " << values[i] << " is not a " << kDTypeNames[dtype]
         << " value (rounds to " << r << ")";
      *first = os.str();
    }
  }
  return n;
}

size_t CountRowsNotFp8(const std::vector<float>& values, int32_t dim, int32_t dtype,
                       std::string* first) {
  size_t n = 0;
  std::vector<float> row(static_cast<size_t>(dim));
  for (size_t r = 0; r + static_cast<size_t>(dim) <= values.size(); r += dim) {
    std::copy(values.begin() + r, values.begin() + r + dim, row.begin());
    RoundRowToFp8(row.data(), dim, dtype);
    if (std::memcmp(row.data(), values.data() + r, sizeof(float) * dim) == 0) continue;
    if (n++ == 0 && first) *first = "row " + std::to_string(r / dim) + " is not an FP8 row";
  }
  return n;
}

std::vector<std::vector<float>> Snapshot(shardrec_embedding_t* coll, const Scenario& s) {
  std::vector<std::vector<float>> snap;
  size_t ns = 0;
  shardrec_embedding_num_states(coll, &ns);
  for (const RefTable& t : s.tables) {
    std::vector<float> w(static_cast<size_t>(t.rows) * t.dim);
    EXPECT_EQ(shardrec_embedding_get_weights(coll, t.name.c_str(), w.data(), w.size()), SHARDREC_OK)
        << shardrec_last_error();
    snap.push_back(std::move(w));
    for (size_t i = 0; i < ns; ++i) {
      const char* name = nullptr;
      int32_t row_wise = 0;
      shardrec_embedding_state_info(coll, i, &name, &row_wise);
      std::vector<float> st(static_cast<size_t>(t.rows) * (row_wise ? 1 : t.dim));
      EXPECT_EQ(shardrec_embedding_get_state(coll, t.name.c_str(), name, st.data(), st.size()),
                SHARDREC_OK)
          << shardrec_last_error();
      snap.push_back(std::move(st));
    }
  }
  return snap;
}

void RunEquivalence(const Scenario& s, std::vector<std::vector<std::vector<float>>>* snapshots) {
  if (snapshots != nullptr) snapshots->assign(s.world, {});
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  std::vector<std::vector<std::vector<float>>> ref_out(s.steps);
  for (int32_t step = 0; step < s.steps; ++step) {
    for (int32_t r = 0; r < s.world; ++r) ref_out[step].push_back(ref.Forward(batches[step][r]));
    ref.Backward(batches[step], grads[step]);
  }
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  // 16-bit storage: a rounding of one step may land one ulp apart when the fp32 results differ
  // in their last bits (another summation order), so those runs compare at 1e-2.
  int32_t widest_ulp_dtype = 0;
  for (const RefTable& t : s.tables) widest_ulp_dtype = std::max(widest_ulp_dtype, t.dtype);
  // FP8 rows (dtypes 7, 8: ulps of 2^-3 and 2^-2 of a value) compare at two of their ulps;
  // the 1% check below holds them to the reference's bits nearly everywhere.
  const float kRtol = widest_ulp_dtype == 0   ? 1e-5f
                      : widest_ulp_dtype == 7 ? 0.25f
                      : widest_ulp_dtype == 8 ? 0.5f
                                              : 1e-2f;
  const float kAtol = widest_ulp_dtype == 0            ? 1e-6f
                      : widest_ulp_dtype == 1          ? 1e-3f
                      : IsFp8Storage(widest_ulp_dtype) ? 2e-2f
                                                       : 1e-2f;
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    o.num_threads = s.num_threads;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(s.world, r), &opt, &o),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    CollPtr coll(c);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    EXPECT_EQ(dim, ref.output_dim());
    for (int32_t step = 0; step < s.steps; ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, s.int32_ids);
      std::vector<float> out(ref_out[step][r].size());
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
      std::string first;
      EXPECT_EQ(CountMismatches(out, ref_out[step][r], kRtol, kAtol, &first), 0u)
          << "rank " << r << " step " << step << " forward: " << first;
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    }
    int64_t steps = 0;
    shardrec_embedding_num_steps(c, &steps);
    EXPECT_EQ(steps, s.steps);
    if (snapshots != nullptr) (*snapshots)[r] = Snapshot(c, s);
    size_t ns = 0;
    shardrec_embedding_num_states(c, &ns);
    for (size_t t = 0; t < s.tables.size(); ++t) {
      const RefTable& rt = s.tables[t];
      std::vector<float> w(static_cast<size_t>(rt.rows) * rt.dim);
      ASSERT_EQ(shardrec_embedding_get_weights(c, rt.name.c_str(), w.data(), w.size()), SHARDREC_OK)
          << shardrec_last_error();
      std::string first;
      EXPECT_EQ(CountMismatches(w, ref.weights(t), kRtol, kAtol, &first), 0u)
          << "rank " << r << " table " << rt.name << " weights: " << first;
      EXPECT_EQ(CountNotRepresentable(w, rt.dtype, &first), 0u)
          << "rank " << r << " table " << rt.name << " weights: " << first;
      if (IsFp8Storage(rt.dtype)) {
        EXPECT_EQ(CountRowsNotFp8(w, rt.dim, rt.dtype, &first), 0u)
            << "rank " << r << " table " << rt.name << " weights: " << first;
      }
      // A one-ulp flip is rare; a wrong rounding mode (truncation, no rounding after an
      // update) would move most touched weights by up to an ulp, inside the 1e-2 above.
      if (rt.dtype != 0) {
        EXPECT_LE(CountMismatches(w, ref.weights(t), 1e-5f, 1e-6f, &first), w.size() / 100)
            << "rank " << r << " table " << rt.name << " weights differ beyond fp32 rounding "
            << "in more than 1% of elements: " << first;
      }
      for (size_t i = 0; i < ns; ++i) {
        const char* name = nullptr;
        int32_t row_wise = 0;
        ASSERT_EQ(shardrec_embedding_state_info(c, i, &name, &row_wise), SHARDREC_OK);
        std::vector<float> st(static_cast<size_t>(rt.rows) * (row_wise ? 1 : rt.dim));
        ASSERT_EQ(shardrec_embedding_get_state(c, rt.name.c_str(), name, st.data(), st.size()),
                  SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_EQ(CountMismatches(st, ref.state(t, name), kRtol, kAtol, &first), 0u)
            << "rank " << r << " table " << rt.name << " state " << name << ": " << first;
      }
    }
  });
}

}  // namespace shardrec::testing
