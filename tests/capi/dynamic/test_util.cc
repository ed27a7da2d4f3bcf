// The dynamic-table tests' scenario, reference and C API run (test_util.h).
#include "tests/capi/dynamic/test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {

DynScenario MakeDynScenario(int32_t world, int32_t sharding, int32_t optimizer, int64_t capacity,
                            int32_t distinct) {
  DynScenario s;
  Scenario& b = s.base;
  b.world = world;
  b.ranks_per_node = 0;  // one node of the world, whatever world a case sets later
  b.num_features = 3;
  RefTable t0{"t0", capacity, 8, SHARDREC_POOLING_SUM, {0}, SHARDREC_INIT_UNIFORM, -0.5f, 0.5f, 0};
  RefTable t1{"t1",   capacity, 12, SHARDREC_POOLING_MEAN, {1, 2}, SHARDREC_INIT_UNIFORM,
              -0.25f, 0.75f,    0};
  b.tables = {t0, t1};
  b.sharding = {sharding, sharding};
  b.min_partition = 4;
  b.optimizer.type = optimizer;
  b.optimizer.lr = 0.05f;
  b.steps = 4;
  s.dynamic.resize(2);
  for (auto& d : s.dynamic)
    shardrec_dynamic_table_config_init(&d, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
  std::mt19937_64 gen(1234);
  for (int t = 0; t < 2; ++t) {
    std::vector<int64_t> pool = {
        0, -1, INT64_MIN, INT64_MAX, int64_t{1} << 40, -(int64_t{1} << 50) + 3};
    while (static_cast<int32_t>(pool.size()) < distinct) {
      const auto x = static_cast<int64_t>(gen());
      if (std::find(pool.begin(), pool.end(), x) == pool.end()) pool.push_back(x);
    }
    pool.resize(static_cast<size_t>(distinct));
    s.pools.push_back(pool);
  }
  return s;
}

std::vector<std::vector<RefBatch>> MakeDynBatches(const DynScenario& s) {
  const Scenario& b = s.base;
  std::mt19937_64 gen(b.data_seed);
  std::vector<int32_t> table_of(b.num_features, 0);
  for (size_t t = 0; t < b.tables.size(); ++t)
    for (int32_t f : b.tables[t].features) table_of[f] = static_cast<int32_t>(t);
  std::vector<std::vector<RefBatch>> out(b.steps, std::vector<RefBatch>(b.world));
  for (int32_t step = 0; step < b.steps; ++step) {
    for (int32_t r = 0; r < b.world; ++r) {
      RefBatch& rb = out[step][r];
      rb.batch_size = 4;
      for (int32_t f = 0; f < b.num_features; ++f) {
        const auto& pool = s.pools[table_of[f]];
        for (int64_t i = 0; i < rb.batch_size; ++i) {
          const int32_t len = static_cast<int32_t>(gen() % (b.max_bag + 1));
          rb.lengths.push_back(len);
          // Skewed: the first ids of the pool come far more often, so counts and recency differ.
          for (int32_t k = 0; k < len; ++k) {
            const size_t a = gen() % pool.size(), c = gen() % pool.size();
            rb.ids.push_back(pool[std::min(a, c)]);
            if (b.weighted)
              rb.weights.push_back(0.25f + 1.5f * static_cast<float>(gen() % 1000) / 1000.0f);
          }
        }
      }
    }
  }
  return out;
}

TierOptions::TierOptions(const DynScenario& s, int32_t rank, shardrec_embedding_options_t* o) {
  for (const DynScenario::Tier& t : s.tiers) dirs.push_back(t.dir + "/r" + std::to_string(rank));
  tiers.resize(s.tiers.size());
  for (size_t k = 0; k < s.tiers.size(); ++k) {
    shardrec_table_tier_init(&tiers[k], SHARDREC_TABLE_TIER_VERSION);
    tiers[k].table = s.tiers[k].table.c_str();
    tiers[k].dir = dirs[k].c_str();
    tiers[k].cache_bytes = s.tiers[k].cache_bytes;
  }
  o->tiers = tiers.empty() ? nullptr : tiers.data();
  o->num_tiers = tiers.size();
}

CollPtr CreateDynCollection(const DynScenario& s, const shardrec_plan_t* plan, int32_t world,
                            int32_t rank) {
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.seed = s.base.seed;
  o.forward_comm_encoding = s.comm_encoding;
  o.backward_comm_encoding = s.comm_encoding;
  o.non_finite = s.non_finite;
  TierOptions tiers(s, rank, &o);
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, plan, GroupComm(world, rank), &opt, &o), SHARDREC_OK)
      << shardrec_last_error();
  return CollPtr(c);
}

int64_t DynOutputDim(const DynScenario& s) {
  if (s.base.tables[0].pooling == SHARDREC_POOLING_NONE) return s.base.tables[0].dim;
  int64_t d = 0;
  for (int32_t f = 0; f < s.base.num_features; ++f)
    for (const RefTable& t : s.base.tables)
      for (int32_t g : t.features)
        if (g == f) d += t.dim;
  return d;
}

PlanPtr MakeDynPlan(const DynScenario& s) {
  const Scenario& b = s.base;
  std::vector<std::string> fnames;
  for (int32_t f = 0; f < b.num_features; ++f) fnames.push_back("f" + std::to_string(f));
  std::vector<shardrec_feature_config_t> features(b.num_features);
  for (int32_t f = 0; f < b.num_features; ++f) {
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = fnames[f].c_str();
  }
  std::vector<shardrec_table_config_t> tables(b.tables.size());
  std::vector<shardrec_table_constraints_t> cons(b.tables.size());
  std::vector<shardrec_optimizer_config_t> own(s.table_optimizers.size());
  for (size_t t = 0; t < own.size(); ++t) own[t] = ToCOptimizer(s.table_optimizers[t]);
  for (size_t t = 0; t < b.tables.size(); ++t) {
    const RefTable& rt = b.tables[t];
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    if (t < own.size()) tables[t].optimizer = &own[t];
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
    tables[t].dynamic =
        s.fixed || static_cast<int32_t>(t) == s.fixed_table ? nullptr : &s.dynamic[t];
    shardrec_table_constraints_init(&cons[t], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    cons[t].table = rt.name.c_str();
    cons[t].sharding_types = 1u << b.sharding[t];
    cons[t].min_partition = b.min_partition;
  }
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = b.world;
  topo.ranks_per_node = b.ranks_per_node > 0 ? std::min(b.ranks_per_node, b.world) : b.world;
  topo.optimizer = b.optimizer.type;
  shardrec_plan_t* plan = nullptr;
  EXPECT_EQ(shardrec_plan_create(&plan, tables.data(), tables.size(), features.data(),
                                 features.size(), &topo, cons.data(), cons.size()),
            SHARDREC_OK)
      << shardrec_last_error();
  return PlanPtr(plan);
}

DynRun RunDynamic(const DynScenario& s, const std::vector<std::vector<RefBatch>>& batches,
                  const std::vector<std::vector<std::vector<float>>>& grads) {
  const Scenario& b = s.base;
  DynRun run;
  run.out.assign(b.steps + 1, std::vector<std::vector<float>>(b.world));
  if (s.eval) run.eval_out.assign(b.steps + 1, std::vector<std::vector<float>>(b.world));
  run.stats.assign(b.world, {});
  run.probe.assign(b.world, {});
  run.scores_set.assign(b.steps, std::vector<int64_t>(b.world, 0));
  PlanPtr plan = MakeDynPlan(s);
  if (plan == nullptr) return run;
  const shardrec_optimizer_config_t opt = ToCOptimizer(b.optimizer);
  const int64_t dim = DynOutputDim(s);
  SpawnRanks(b.world, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = b.seed;
    o.num_threads = b.num_threads;
    o.forward_comm_encoding = s.comm_encoding;
    o.backward_comm_encoding = s.comm_encoding;
    o.non_finite = s.non_finite;
    TierOptions tiers(s, r, &o);
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(b.world, r), &opt, &o),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    CollPtr coll(c);
    for (int32_t step = 0; step <= b.steps; ++step) {
      const RefBatch& batch = batches[std::min(step, b.steps - 1)][r];
      KjtHolder kjt(batch, b.num_features, b.int32_ids);
      const bool sequence = b.tables[0].pooling == SHARDREC_POOLING_NONE;
      const size_t rows = sequence ? batch.ids.size() : static_cast<size_t>(batch.batch_size);
      std::vector<float> out(rows * static_cast<size_t>(dim));
      if (s.eval) {
        // An evaluation forward first: it reads, changes no stat, and its backward is refused.
        std::vector<shardrec_dynamic_table_stats_t> before(b.tables.size());
        for (size_t t = 0; t < b.tables.size(); ++t) {
          shardrec_dynamic_table_stats_init(&before[t], SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
          ASSERT_EQ(shardrec_embedding_dynamic_stats(c, b.tables[t].name.c_str(), &before[t]),
                    SHARDREC_OK);
        }
        ASSERT_EQ(shardrec_embedding_set_training(c, 0), SHARDREC_OK) << shardrec_last_error();
        std::vector<float> eval_out(out.size());
        if (s.pipelined) {
          ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjt.view(), nullptr), SHARDREC_OK);
          ASSERT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK);
          ASSERT_EQ(
              shardrec_embedding_forward_distributed(c, eval_out.data(), eval_out.size(), nullptr),
              SHARDREC_OK)
              << "rank " << r << ": " << shardrec_last_error();
        } else {
          ASSERT_EQ(
              shardrec_embedding_forward(c, kjt.view(), eval_out.data(), eval_out.size(), nullptr),
              SHARDREC_OK)
              << "rank " << r << ": " << shardrec_last_error();
        }
        if (step < b.steps) {
          EXPECT_EQ(
              shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
              SHARDREC_EUSAGE);
        }
        for (size_t t = 0; t < b.tables.size(); ++t) {
          shardrec_dynamic_table_stats_t after;
          shardrec_dynamic_table_stats_init(&after, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
          ASSERT_EQ(shardrec_embedding_dynamic_stats(c, b.tables[t].name.c_str(), &after),
                    SHARDREC_OK);
          const shardrec_dynamic_table_stats_t& w = before[t];
          EXPECT_TRUE(after.size == w.size && after.last_inserted == w.last_inserted &&
                      after.last_evicted == w.last_evicted &&
                      after.last_rejected_admission == w.last_rejected_admission &&
                      after.last_rejected_full == w.last_rejected_full &&
                      after.total_inserted == w.total_inserted &&
                      after.total_evicted == w.total_evicted &&
                      after.total_rejected_admission == w.total_rejected_admission &&
                      after.total_rejected_full == w.total_rejected_full)
              << "rank " << r << " table " << t << ": an evaluation forward changed the stats";
        }
        ASSERT_EQ(shardrec_embedding_set_training(c, 1), SHARDREC_OK);
        run.eval_out[step][r] = std::move(eval_out);
      }
      if (s.pipelined) {
        // The input distribution runs on the collection's worker, then the lookup here.
        ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjt.view(), nullptr), SHARDREC_OK)
            << "rank " << r << ": " << shardrec_last_error();
        ASSERT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK)
            << "rank " << r << ": " << shardrec_last_error();
        ASSERT_EQ(shardrec_embedding_forward_distributed(c, out.data(), out.size(), nullptr),
                  SHARDREC_OK)
            << "rank " << r << ": " << shardrec_last_error();
      } else {
        ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                  SHARDREC_OK)
            << "rank " << r << ": " << shardrec_last_error();
      }
      run.out[step][r] = std::move(out);
      if (step == b.steps) break;
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
      if (s.score != nullptr) {
        for (size_t t = 0; t < b.tables.size(); ++t) {
          if (s.dynamic[t].eviction != SHARDREC_EVICTION_SCORE) continue;
          std::vector<double> scores;
          for (int64_t id : s.pools[t]) scores.push_back(s.score(id, step));
          ASSERT_EQ(
              shardrec_embedding_dynamic_set_scores(c, b.tables[t].name.c_str(), s.pools[t].data(),
                                                    scores.data(), scores.size(), nullptr),
              SHARDREC_OK)
              << shardrec_last_error();
        }
      }
      if (s.rank_score != nullptr) {
        for (size_t t = 0; t < b.tables.size(); ++t) {
          if (s.dynamic[t].eviction != SHARDREC_EVICTION_SCORE) continue;
          std::vector<int64_t> ids;
          std::vector<double> scores;
          for (int64_t id : s.pools[t]) {
            const double v = s.rank_score(id, step, r);
            if (std::isnan(v)) continue;
            ids.push_back(id);
            scores.push_back(v);
          }
          size_t num_set = 0;
          ASSERT_EQ(shardrec_embedding_dynamic_set_scores(c, b.tables[t].name.c_str(), ids.data(),
                                                          scores.data(), ids.size(), &num_set),
                    SHARDREC_OK)
              << shardrec_last_error();
          run.scores_set[step][r] += static_cast<int64_t>(num_set);
        }
      }
    }
    if (s.probe) {
      // One sample per pool id: feature f0 reads t0's pool, f1 t1's, f2 nothing.
      RefBatch probe;
      probe.batch_size = static_cast<int64_t>(std::max(s.pools[0].size(), s.pools[1].size()));
      probe.lengths.assign(static_cast<size_t>(b.num_features * probe.batch_size), 0);
      for (int32_t f = 0; f < 2; ++f)
        for (size_t i = 0; i < s.pools[f].size(); ++i) {
          probe.lengths[static_cast<size_t>(f * probe.batch_size) + i] = 1;
          probe.ids.push_back(s.pools[f][i]);
        }
      KjtHolder kjt(probe, b.num_features, b.int32_ids);
      std::vector<float> out(static_cast<size_t>(probe.batch_size * dim));
      ASSERT_EQ(shardrec_embedding_set_training(c, 0), SHARDREC_OK) << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
      run.probe[r] = std::move(out);
    }
    for (const RefTable& t : b.tables) {
      shardrec_dynamic_table_stats_t st;
      shardrec_dynamic_table_stats_init(&st, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
      EXPECT_EQ(shardrec_embedding_dynamic_stats(c, t.name.c_str(), &st), SHARDREC_OK)
          << shardrec_last_error();
      run.stats[r].push_back(st);
    }
  });
  return run;
}

namespace {

// The reference's rows of one dynamic table: an ordered map id -> row of the fixed-table
// reference model, whose row `capacity` is the zero row.
struct RefDynTable {
  struct Row {
    int64_t ref_row;
    int64_t last;
    uint64_t count;
    double score;  // SCORE eviction: the caller's, 0 when created
  };
  std::map<int64_t, Row> rows;
  std::map<int64_t, uint64_t> seen;  // occurrences of ids without a row
  std::vector<int64_t> free_rows;
  RefCounts counts;
};

}  // namespace

RefRun RunReference(const DynScenario& s, const std::vector<std::vector<RefBatch>>& batches,
                    const std::vector<std::vector<std::vector<float>>>& grads) {
  const Scenario& b = s.base;
  std::vector<RefTable> tables = b.tables;
  for (RefTable& t : tables) t.rows += 1;  // the zero row last
  ReferenceModel ref(b.num_features, tables, b.optimizer, b.seed, b.world);
  std::vector<RefDynTable> dyn(tables.size());
  std::vector<int32_t> table_of(b.num_features, 0);
  for (size_t t = 0; t < tables.size(); ++t) {
    for (int32_t f : tables[t].features) table_of[f] = static_cast<int32_t>(t);
    for (int64_t r = b.tables[t].rows - 1; r >= 0; --r) dyn[t].free_rows.push_back(r);
  }
  const auto clear_row = [&](size_t t, int64_t row) {
    const int32_t dim = tables[t].dim;
    for (int32_t c = 0; c < dim; ++c) ref.mutable_weights(t)[row * dim + c] = 0.0f;
    for (const char* name : {"momentum1", "momentum2"}) {
      auto& st = ref.mutable_state(t, name);
      if (st.empty()) continue;
      const size_t width = st.size() / static_cast<size_t>(tables[t].rows);
      std::fill(st.begin() + row * width, st.begin() + (row + 1) * width, 0.0f);
    }
  };
  for (size_t t = 0; t < tables.size(); ++t) clear_row(t, b.tables[t].rows);
  RefRun run;
  // Each id's row, or the zero row: the rows as they are, nothing inserted or touched.
  const auto map_ids = [&](std::vector<RefBatch>* batches_out) {
    for (size_t t = 0; t < tables.size(); ++t)
      for (RefBatch& rb : *batches_out) {
        size_t pos = 0;
        for (int32_t f = 0; f < b.num_features; ++f)
          for (int64_t i = 0; i < rb.batch_size; ++i) {
            const int32_t len = rb.lengths[f * rb.batch_size + i];
            if (table_of[f] == static_cast<int32_t>(t))
              for (int32_t k = 0; k < len; ++k) {
                auto it = dyn[t].rows.find(rb.ids[pos + k]);
                rb.ids[pos + k] = it == dyn[t].rows.end() ? b.tables[t].rows : it->second.ref_row;
              }
            pos += static_cast<size_t>(len);
          }
      }
  };
  for (int32_t step = 0; step <= b.steps; ++step) {
    const bool train = step < b.steps;
    const auto& in = batches[std::min(step, b.steps - 1)];
    if (s.eval) {
      std::vector<RefBatch> evaluated = in;
      map_ids(&evaluated);
      std::vector<std::vector<float>> outs;
      for (const RefBatch& rb : evaluated) outs.push_back(ref.Forward(rb));
      run.eval_out.push_back(std::move(outs));
    }
    std::vector<RefBatch> mapped = in;
    for (size_t t = 0; t < tables.size(); ++t) {
      RefDynTable& d = dyn[t];
      const shardrec_dynamic_table_config_t& cfg = s.dynamic[t];
      const int64_t capacity = b.tables[t].rows;
      const int64_t now = step + 1;
      // Admission counts halve at the start of every forward whose number is a multiple of the
      // decay (docs/dynamic-tables.md, "Admission").
      if (cfg.admission_decay_steps > 0 && now % cfg.admission_decay_steps == 0)
        for (auto& [id, n] : d.seen) n /= 2;
      std::map<int64_t, uint64_t> occ;
      for (const RefBatch& rb : in) {
        size_t pos = 0;
        for (int32_t f = 0; f < b.num_features; ++f)
          for (int64_t i = 0; i < rb.batch_size; ++i) {
            const int32_t len = rb.lengths[f * rb.batch_size + i];
            if (table_of[f] == static_cast<int32_t>(t))
              for (int32_t k = 0; k < len; ++k) ++occ[rb.ids[pos + k]];
            pos += static_cast<size_t>(len);
          }
      }
      std::vector<std::pair<int64_t, uint64_t>> pending;
      for (const auto& [id, n] : occ) {
        auto it = d.rows.find(id);
        if (it != d.rows.end()) {
          it->second.last = now;
          it->second.count += n;
        } else if (cfg.admission_threshold <= 1 ||
                   (d.seen[id] += n) >= static_cast<uint64_t>(cfg.admission_threshold)) {
          pending.emplace_back(id, n);
        } else {
          ++d.counts.rejected_admission;
        }
      }
      for (const auto& [id, n] : pending) {
        int64_t row = -1;
        if (static_cast<int64_t>(d.rows.size()) < capacity) {
          row = d.free_rows.back();
          d.free_rows.pop_back();
        } else if (cfg.eviction != SHARDREC_EVICTION_NONE) {
          auto victim = d.rows.end();
          for (auto it = d.rows.begin(); it != d.rows.end(); ++it) {
            const auto& rw = it->second;
            if (rw.last == now) continue;
            if (cfg.eviction == SHARDREC_EVICTION_TTL && now - rw.last <= cfg.ttl_steps) continue;
            if (victim == d.rows.end()) {
              victim = it;
              continue;
            }
            const auto& v = victim->second;
            const bool before =
                cfg.eviction == SHARDREC_EVICTION_LFU ? std::tie(rw.count, rw.last, it->first) <
                                                            std::tie(v.count, v.last, victim->first)
                : cfg.eviction == SHARDREC_EVICTION_SCORE
                    ? std::tie(rw.score, it->first) < std::tie(v.score, victim->first)
                    : std::tie(rw.last, it->first) < std::tie(v.last, victim->first);
            if (before) victim = it;
          }
          if (victim != d.rows.end()) {
            row = victim->second.ref_row;
            d.rows.erase(victim);
            ++d.counts.evicted;
          }
        }
        if (row < 0) {
          ++d.counts.rejected_full;
          continue;
        }
        d.rows[id] = {row, now, n, 0.0};
        ++d.counts.inserted;
        clear_row(t, row);
        // The table as configured (rows = capacity, which DEFAULT init depends on).
        const RefTable& rt = b.tables[t];
        for (int32_t c = 0; c < rt.dim; ++c)
          ref.mutable_weights(t)[row * rt.dim + c] =
              RoundToStorage(RefInitValue(rt, b.seed, static_cast<uint64_t>(id), c), rt.dtype);
      }
      for (RefBatch& rb : mapped) {
        size_t pos = 0;
        for (int32_t f = 0; f < b.num_features; ++f)
          for (int64_t i = 0; i < rb.batch_size; ++i) {
            const int32_t len = rb.lengths[f * rb.batch_size + i];
            if (table_of[f] == static_cast<int32_t>(t))
              for (int32_t k = 0; k < len; ++k) {
                auto it = d.rows.find(rb.ids[pos + k]);
                rb.ids[pos + k] = it == d.rows.end() ? capacity : it->second.ref_row;
              }
            pos += static_cast<size_t>(len);
          }
      }
      d.counts.size = static_cast<int64_t>(d.rows.size());
    }
    std::vector<std::vector<float>> outs;
    for (const RefBatch& rb : mapped) outs.push_back(ref.Forward(rb));
    run.out.push_back(std::move(outs));
    if (!train) break;
    ref.Backward(mapped, grads[step]);
    for (size_t t = 0; t < tables.size(); ++t) clear_row(t, b.tables[t].rows);
    if (s.score != nullptr)
      for (size_t t = 0; t < tables.size(); ++t) {
        if (s.dynamic[t].eviction != SHARDREC_EVICTION_SCORE) continue;
        for (int64_t id : s.pools[t]) {
          auto it = dyn[t].rows.find(id);
          if (it != dyn[t].rows.end()) it->second.score = s.score(id, step);
        }
      }
    if (s.rank_score != nullptr) {
      run.scores_named.emplace_back(static_cast<size_t>(b.world), 0);
      for (int32_t r = 0; r < b.world; ++r)
        for (size_t t = 0; t < tables.size(); ++t) {
          if (s.dynamic[t].eviction != SHARDREC_EVICTION_SCORE) continue;
          for (int64_t id : s.pools[t]) {
            const double v = s.rank_score(id, step, r);
            auto it = dyn[t].rows.find(id);
            if (std::isnan(v) || it == dyn[t].rows.end()) continue;
            it->second.score = v;
            ++run.scores_named.back()[static_cast<size_t>(r)];
          }
        }
    }
  }
  for (const RefDynTable& d : dyn) run.counts.push_back(d.counts);
  return run;
}

shardrec_dynamic_table_stats_t StatsOf(shardrec_embedding_t* c, const char* table) {
  shardrec_dynamic_table_stats_t st;
  shardrec_dynamic_table_stats_init(&st, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
  EXPECT_EQ(shardrec_embedding_dynamic_stats(c, table, &st), SHARDREC_OK) << shardrec_last_error();
  return st;
}

}  // namespace shardrec::testing
