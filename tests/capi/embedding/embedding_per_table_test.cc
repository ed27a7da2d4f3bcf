// Per-table optimizers, output keys and phase timings through the C API: a collection mixing
// optimizers (row statistics across column shards included) equals, table by table, an
// unsharded reference trained with that table's optimizer; the optimizer is given once (the
// plan's when the collection gets none); output keys follow the documented layout; features may
// be named; timings add up.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr float kRtol = 1e-5f, kAtol = 1e-6f;

// A plan whose tables carry their own optimizers (table config v2), sharded as s.sharding says.
PlanPtr MakeMixedPlan(const Scenario& s, const std::vector<shardrec_optimizer_config_t>& opts,
                      bool named_features, int32_t topology_optimizer) {
  std::vector<std::string> fnames(s.num_features);
  std::vector<shardrec_feature_config_t> features(s.num_features);
  for (int32_t f = 0; f < s.num_features; ++f) {
    fnames[f] = "f" + std::to_string(f);
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = fnames[f].c_str();
  }
  std::vector<std::vector<const char*>> names(s.tables.size());
  std::vector<shardrec_table_config_t> tables(s.tables.size());
  std::vector<shardrec_table_constraints_t> cons(s.tables.size());
  for (size_t t = 0; t < s.tables.size(); ++t) {
    const RefTable& rt = s.tables[t];
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    tables[t].name = rt.name.c_str();
    tables[t].rows = rt.rows;
    tables[t].dim = rt.dim;
    tables[t].pooling = rt.pooling;
    if (named_features) {
      for (int32_t f : rt.features) names[t].push_back(fnames[f].c_str());
      tables[t].feature_names = names[t].data();
      tables[t].num_feature_names = names[t].size();
    } else {
      tables[t].features = rt.features.data();
      tables[t].num_features = rt.features.size();
    }
    if (t < opts.size()) tables[t].optimizer = &opts[t];
    shardrec_table_constraints_init(&cons[t], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    cons[t].table = rt.name.c_str();
    cons[t].sharding_types = 1u << s.sharding[t];
    cons[t].min_partition = s.min_partition;
  }
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = s.world;
  topo.ranks_per_node = s.world;
  topo.optimizer = topology_optimizer;
  shardrec_plan_t* plan = nullptr;
  EXPECT_EQ(shardrec_plan_create(&plan, tables.data(), tables.size(), features.data(),
                                 features.size(), &topo, cons.data(), cons.size()),
            SHARDREC_OK)
      << shardrec_last_error();
  return PlanPtr(plan);
}

RefOptimizer ToRef(const shardrec_optimizer_config_t& c) {
  RefOptimizer o;
  o.type = c.type;
  o.lr = c.learning_rate;
  o.eps = c.eps;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.weight_decay = c.weight_decay;
  o.weight_decay_mode = c.weight_decay_mode;
  return o;
}

shardrec_optimizer_config_t Opt(int32_t type, float lr) {
  shardrec_optimizer_config_t o;
  shardrec_optimizer_config_init(&o, SHARDREC_OPTIMIZER_CONFIG_VERSION);
  o.type = type;
  o.learning_rate = lr;
  return o;
}

// Trains the mixed collection and checks every table against a reference that trains all tables
// with that table's optimizer (tables never interact, so its other tables do not matter).
void RunMixed(bool named_features) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_MEAN);
  // t0 column-wise with row-wise Adagrad: its row statistics cross column shards.
  s.sharding = {SHARDREC_SHARDING_COLUMN_WISE, SHARDREC_SHARDING_ROW_WISE,
                SHARDREC_SHARDING_DATA_PARALLEL};
  s.weighted = true;
  s.steps = 3;
  const std::vector<shardrec_optimizer_config_t> opts = {
      Opt(SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD, 0.05f), Opt(SHARDREC_OPTIMIZER_ADAM, 0.02f),
      Opt(SHARDREC_OPTIMIZER_SGD, 0.1f)};
  std::vector<ReferenceModel> refs;
  for (const auto& o : opts) refs.emplace_back(s.num_features, s.tables, ToRef(o), s.seed, 2);
  const auto batches = MakeBatches(s, refs[0]);
  const auto grads = MakeGrads(s, batches, refs[0].output_dim());
  std::vector<std::vector<std::vector<std::vector<float>>>> ref_out(opts.size());
  for (size_t k = 0; k < refs.size(); ++k) {
    ref_out[k].resize(s.steps);
    for (int32_t step = 0; step < s.steps; ++step) {
      for (int32_t r = 0; r < s.world; ++r)
        ref_out[k][step].push_back(refs[k].Forward(batches[step][r]));
      refs[k].Backward(batches[step], grads[step]);
    }
  }
  // The planner counted SGD (the topology's) for none of them: every table has its own.
  PlanPtr plan = MakeMixedPlan(s, opts, named_features, SHARDREC_OPTIMIZER_SGD);
  ASSERT_NE(plan, nullptr);
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    shardrec_embedding_t* c = nullptr;
    // A default optimizer is given, but every table has its own: the tables' win.
    const shardrec_optimizer_config_t def = Opt(SHARDREC_OPTIMIZER_LAMB, 1.0f);
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(s.world, r), &def, &o),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    for (size_t t = 0; t < s.tables.size(); ++t) {
      shardrec_optimizer_config_t got;
      ASSERT_EQ(shardrec_embedding_table_optimizer(c, s.tables[t].name.c_str(), &got), SHARDREC_OK);
      EXPECT_EQ(got.type, opts[t].type);
      EXPECT_EQ(got.learning_rate, opts[t].learning_rate);
    }
    // Output columns: block k (pair order) comes from the reference of its table.
    size_t blocks = 0;
    ASSERT_EQ(shardrec_embedding_num_outputs(c, &blocks), SHARDREC_OK);
    for (int32_t step = 0; step < s.steps; ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, false);
      const size_t D = static_cast<size_t>(refs[0].output_dim());
      std::vector<float> out(static_cast<size_t>(batches[step][r].batch_size) * D);
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      for (size_t k = 0; k < blocks; ++k) {
        const char* table = nullptr;
        int64_t offset = 0, width = 0;
        ASSERT_EQ(shardrec_embedding_output_info(c, k, nullptr, &table, &offset, &width),
                  SHARDREC_OK);
        size_t t = 0;
        while (s.tables[t].name != table) ++t;
        for (size_t b = 0; b < out.size() / D; ++b)
          for (int64_t col = offset; col < offset + width; ++col) {
            const float want = ref_out[t][step][r][b * D + col];
            ASSERT_NEAR(out[b * D + col], want, kAtol + kRtol * std::abs(want))
                << "rank " << r << " step " << step << " table " << table;
          }
      }
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << shardrec_last_error();
    }
    for (size_t t = 0; t < s.tables.size(); ++t) {
      const RefTable& rt = s.tables[t];
      std::vector<float> w(static_cast<size_t>(rt.rows) * rt.dim);
      ASSERT_EQ(shardrec_embedding_get_weights(c, rt.name.c_str(), w.data(), w.size()),
                SHARDREC_OK);
      std::string first;
      EXPECT_EQ(CountMismatches(w, refs[t].weights(t), kRtol, kAtol, &first), 0u)
          << "rank " << r << " table " << rt.name << ": " << first;
      size_t ns = 0;
      ASSERT_EQ(shardrec_embedding_table_num_states(c, rt.name.c_str(), &ns), SHARDREC_OK);
      EXPECT_EQ(ns, t == 0 ? 1u : t == 1 ? 2u : 0u);
      for (size_t i = 0; i < ns; ++i) {
        const char* name = nullptr;
        int32_t row_wise = 0;
        ASSERT_EQ(shardrec_embedding_table_state_info(c, rt.name.c_str(), i, &name, &row_wise),
                  SHARDREC_OK);
        std::vector<float> st(static_cast<size_t>(rt.rows) * (row_wise ? 1 : rt.dim));
        ASSERT_EQ(shardrec_embedding_get_state(c, rt.name.c_str(), name, st.data(), st.size()),
                  SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_EQ(CountMismatches(st, refs[t].state(t, name), kRtol, kAtol, &first), 0u)
            << "rank " << r << " table " << rt.name << " state " << name << ": " << first;
      }
    }
    // SGD has no state: asking the SGD table for Adam's state names the table and optimizer.
    float dummy[1];
    EXPECT_EQ(shardrec_embedding_get_state(c, s.tables[2].name.c_str(), "momentum1", dummy, 1),
              SHARDREC_ENOTFOUND);
    EXPECT_NE(std::string(shardrec_last_error()).find("(sgd) has no state"), std::string::npos)
        << shardrec_last_error();
  });
}

TEST(EmbeddingPerTable, MixedOptimizersEqualPerTableReferences) { RunMixed(false); }
TEST(EmbeddingPerTable, FeaturesMayBeNamed) { RunMixed(true); }

// Without an optimizer the collection trains with the plan's (the topology's type); a table's
// learning rate can be changed alone.
TEST(EmbeddingPerTable, OptimizerIsGivenOnceThroughThePlan) {
  Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakeMixedPlan(s, {}, false, SHARDREC_OPTIMIZER_ADAM);
  shardrec_embedding_t* c = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), nullptr, nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  CollPtr coll(c);
  shardrec_optimizer_config_t got;
  ASSERT_EQ(shardrec_embedding_table_optimizer(c, s.tables[0].name.c_str(), &got), SHARDREC_OK);
  EXPECT_EQ(got.type, SHARDREC_OPTIMIZER_ADAM);
  EXPECT_FLOAT_EQ(got.beta2, 0.999f);  // default hyperparameters
  ASSERT_EQ(shardrec_embedding_set_table_learning_rate(c, s.tables[1].name.c_str(), 0.5f),
            SHARDREC_OK);
  ASSERT_EQ(shardrec_embedding_table_optimizer(c, s.tables[1].name.c_str(), &got), SHARDREC_OK);
  EXPECT_EQ(got.learning_rate, 0.5f);
  ASSERT_EQ(shardrec_embedding_table_optimizer(c, s.tables[0].name.c_str(), &got), SHARDREC_OK);
  EXPECT_NE(got.learning_rate, 0.5f);
  EXPECT_EQ(shardrec_embedding_set_table_learning_rate(c, "nope", 0.1f), SHARDREC_ENOTFOUND);
  EXPECT_EQ(shardrec_embedding_set_table_learning_rate(c, s.tables[0].name.c_str(), -1.0f),
            SHARDREC_EINVAL);
  // The plan's text form keeps per-table optimizers.
  const std::vector<shardrec_optimizer_config_t> opts = {Opt(SHARDREC_OPTIMIZER_LAMB, 0.25f)};
  PlanPtr own = MakeMixedPlan(s, opts, false, SHARDREC_OPTIMIZER_SGD);
  char* text = nullptr;
  size_t len = 0;
  ASSERT_EQ(shardrec_plan_to_json(own.get(), &text, &len), SHARDREC_OK);
  shardrec_plan_t* back = nullptr;
  ASSERT_EQ(shardrec_plan_from_json(&back, text, len), SHARDREC_OK) << shardrec_last_error();
  PlanPtr back_ptr(back);
  shardrec_free(text);
  ASSERT_EQ(shardrec_embedding_create(&c, back, GroupComm(1, 0), nullptr, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  CollPtr coll2(c);
  ASSERT_EQ(shardrec_embedding_table_optimizer(c, s.tables[0].name.c_str(), &got), SHARDREC_OK);
  EXPECT_EQ(got.type, SHARDREC_OPTIMIZER_LAMB);
  EXPECT_EQ(got.learning_rate, 0.25f);
}

TEST(EmbeddingPerTable, BadTableConfigsNameTheProblem) {
  Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM);
  shardrec_feature_config_t f;
  shardrec_feature_config_init(&f, SHARDREC_FEATURE_CONFIG_VERSION);
  f.name = "user";
  shardrec_table_config_t t;
  shardrec_table_config_init(&t, SHARDREC_TABLE_CONFIG_VERSION);
  t.name = "users";
  t.rows = 10;
  t.dim = 4;
  const char* bad_name[] = {"item"};
  t.feature_names = bad_name;
  t.num_feature_names = 1;
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  shardrec_plan_t* plan = nullptr;
  EXPECT_EQ(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, nullptr, 0), SHARDREC_ENOTFOUND);
  EXPECT_NE(std::string(shardrec_last_error()).find("no feature named 'item'"), std::string::npos);
  const int32_t idx[] = {0};
  const char* good_name[] = {"user"};
  t.feature_names = good_name;
  t.features = idx;
  t.num_features = 1;
  EXPECT_EQ(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, nullptr, 0), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("not both"), std::string::npos);
  t.feature_names = nullptr;
  t.num_feature_names = 0;
  shardrec_optimizer_config_t bad = Opt(SHARDREC_OPTIMIZER_ADAM, -1.0f);
  t.optimizer = &bad;
  EXPECT_EQ(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, nullptr, 0), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("table 'users'"), std::string::npos)
      << shardrec_last_error();
  // A version-1 table config has no optimizer or names and still works.
  shardrec_table_config_t v1;
  ASSERT_EQ(shardrec_table_config_init(&v1, 1), SHARDREC_OK);
  v1.name = "users";
  v1.rows = 10;
  v1.dim = 4;
  v1.features = idx;
  v1.num_features = 1;
  ASSERT_EQ(shardrec_plan_create(&plan, &v1, 1, &f, 1, &topo, nullptr, 0), SHARDREC_OK)
      << shardrec_last_error();
  shardrec_plan_destroy(plan);
}

// Output keys follow the documented layout: for each feature, each table reading it, its dim
// columns, back to back; and the phase timings add up to no more than the total.
TEST(EmbeddingPerTable, OutputKeysAndTimings) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), nullptr, nullptr),
              SHARDREC_OK);
    CollPtr coll(c);
    size_t blocks = 0;
    ASSERT_EQ(shardrec_embedding_num_outputs(c, &blocks), SHARDREC_OK);
    int64_t expect_offset = 0;
    size_t k = 0;
    for (int32_t f = 0; f < s.num_features; ++f) {
      for (const RefTable& t : s.tables) {
        bool reads = false;
        for (int32_t tf : t.features) reads |= tf == f;
        if (!reads) continue;
        const char *feature = nullptr, *table = nullptr;
        int64_t offset = -1, width = -1;
        ASSERT_EQ(shardrec_embedding_output_info(c, k, &feature, &table, &offset, &width),
                  SHARDREC_OK);
        EXPECT_EQ(std::string(feature), "f" + std::to_string(f));
        EXPECT_EQ(std::string(table), t.name);
        EXPECT_EQ(offset, expect_offset);
        EXPECT_EQ(width, t.dim);
        expect_offset += t.dim;
        ++k;
      }
    }
    EXPECT_EQ(k, blocks);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    EXPECT_EQ(expect_offset, dim);
    EXPECT_EQ(shardrec_embedding_output_info(c, blocks, nullptr, nullptr, nullptr, nullptr),
              SHARDREC_EINVAL);
    int64_t samples = 0;
    for (int32_t step = 0; step < s.steps; ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, false);
      std::vector<float> out(static_cast<size_t>(batches[step][r].batch_size * dim));
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK);
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK);
      samples += batches[step][r].batch_size;
    }
    shardrec_step_timings_t t;
    ASSERT_EQ(shardrec_step_timings_init(&t, SHARDREC_STEP_TIMINGS_VERSION), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_step_timings(c, &t), SHARDREC_OK);
    EXPECT_EQ(t.forwards, s.steps);
    EXPECT_EQ(t.backwards, s.steps);
    EXPECT_EQ(t.samples, samples);
    EXPECT_GT(t.total_seconds, 0.0);
    EXPECT_GT(t.input_dist_seconds, 0.0);
    EXPECT_GT(t.backward_seconds, 0.0);
    const double phases =
        t.input_dist_seconds + t.lookup_seconds + t.output_dist_seconds + t.backward_seconds;
    EXPECT_LE(phases, t.total_seconds * 1.0001 + 1e-6);
    EXPECT_LE(t.collective_seconds, t.total_seconds * 1.0001 + 1e-6);
  });
}

// The optimizer is given once, or twice in agreement: a collection optimizer other than the
// plan's (for the tables without their own) is rejected on every rank, naming both.
TEST(EmbeddingPerTable, OptimizerOtherThanThePlansIsRejected) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  PlanPtr plan = MakeMixedPlan(s, {}, false, SHARDREC_OPTIMIZER_SGD);
  ASSERT_NE(plan, nullptr);
  SpawnRanks(s.world, [&](int r) {
    // Rank 0 disagrees with the plan; rank 1 agrees and learns that rank 0 rejected.
    const shardrec_optimizer_config_t adam = Opt(SHARDREC_OPTIMIZER_ADAM, 0.01f);
    const shardrec_optimizer_config_t sgd = Opt(SHARDREC_OPTIMIZER_SGD, 0.01f);
    shardrec_embedding_t* c = nullptr;
    EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(s.world, r),
                                        r == 0 ? &adam : &sgd, nullptr),
              SHARDREC_EINVAL);
    EXPECT_EQ(c, nullptr);
    const std::string message = shardrec_last_error();
    if (r == 0) {
      EXPECT_NE(message.find("adam"), std::string::npos) << message;
      EXPECT_NE(message.find("sgd"), std::string::npos) << message;
      EXPECT_NE(message.find("topology.optimizer"), std::string::npos) << message;
    } else {
      EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
    }
  });
  // In agreement (the same type, any hyperparameters) it is accepted.
  PlanPtr adam_plan = MakeMixedPlan(s, {}, false, SHARDREC_OPTIMIZER_ADAM);
  SpawnRanks(s.world, [&](int r) {
    const shardrec_optimizer_config_t adam = Opt(SHARDREC_OPTIMIZER_ADAM, 0.003f);
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, adam_plan.get(), GroupComm(s.world, r), &adam, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    shardrec_optimizer_config_t got;
    ASSERT_EQ(shardrec_embedding_table_optimizer(c, s.tables[0].name.c_str(), &got), SHARDREC_OK);
    EXPECT_EQ(got.type, SHARDREC_OPTIMIZER_ADAM);
    EXPECT_FLOAT_EQ(got.learning_rate, 0.003f);
  });
}

}  // namespace
}  // namespace shardrec::testing
