// Bad input is rejected on the rank that sent it (naming what is wrong), every other rank
// learns which rank rejected, nobody hangs, and weights and optimizer states stay
// bit-identical on every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>

#include "shardrec/checkpoint.h"
#include "shardrec/device.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

Scenario ValidationScenario() {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_MEAN);
  s.sharding = {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_ROW_WISE,
                SHARDREC_SHARDING_COLUMN_WISE};
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAM;
  s.weighted = true;
  s.steps = 2;
  return s;
}

bool BitEqual(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return false;
    if (std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

// Breaks rank 1's batch (a copy of its good KJT view) in one way.
struct BadBatchCase {
  const char* name;
  std::function<void(shardrec_kjt_view_t*, std::vector<int32_t>*, std::vector<int64_t>*)> mutate;
  const char* message;  // expected in rank 1's error
};

class EmbeddingValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    s_ = ValidationScenario();
    ReferenceModel ref(s_.num_features, s_.tables, s_.optimizer, s_.seed, s_.world);
    batches_ = MakeBatches(s_, ref);
    grads_ = MakeGrads(s_, batches_, ref.output_dim());
    plan_ = MakePlan(s_);
  }
  // Creates the collection on each rank, trains one step so states are non-zero, then runs
  // `body(rank, coll)`, then checks that a good step still works.
  void Run(const std::function<void(int, shardrec_embedding_t*)>& body) {
    const shardrec_optimizer_config_t opt = ToCOptimizer(s_.optimizer);
    SpawnRanks(s_.world, [&](int r) {
      shardrec_embedding_t* c = nullptr;
      ASSERT_EQ(shardrec_embedding_create(&c, plan_.get(), GroupComm(s_.world, r), &opt, nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      CollPtr coll(c);
      Step(r, c, 0);
      body(r, c);
      Step(r, c, 1);
    });
  }
  void Step(int r, shardrec_embedding_t* c, int step) {
    KjtHolder kjt(batches_[step][r], s_.num_features, false);
    if (!ForwardOk(r, c, step, kjt)) return;
    ASSERT_EQ(
        shardrec_embedding_backward(c, grads_[step][r].data(), grads_[step][r].size(), nullptr),
        SHARDREC_OK)
        << shardrec_last_error();
  }

  // A forward of `kjt` (batches_[step][r]) that must go through, into `out` (when given) sized
  // for it; whether it went through.
  bool ForwardOk(int r, shardrec_embedding_t* c, int step, const KjtHolder& kjt,
                 std::vector<float>* out = nullptr) {
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    std::vector<float> own;
    if (out == nullptr) out = &own;
    out->assign(static_cast<size_t>(batches_[step][r].batch_size * dim), 0.0f);
    const shardrec_status_t rc =
        shardrec_embedding_forward(c, kjt.view(), out->data(), out->size(), nullptr);
    EXPECT_EQ(rc, SHARDREC_OK) << shardrec_last_error();
    return rc == SHARDREC_OK;
  }

  Scenario s_;
  std::vector<std::vector<RefBatch>> batches_;
  std::vector<std::vector<std::vector<float>>> grads_;
  PlanPtr plan_;
};

TEST_F(EmbeddingValidation, BadBatchesChangeNothingOnAnyRank) {
  const BadBatchCase cases[] = {
      {"negative length",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>* l, std::vector<int64_t>*) {
         (*l)[1] = -1;
         (*l)[2] += 1;
         v->lengths = l->data();
       },
       "negative length"},
      {"lengths do not sum to num_values",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>* l, std::vector<int64_t>*) {
         (*l)[0] += 1;
         v->lengths = l->data();
       },
       "lengths sum"},
      {"id out of range",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>*, std::vector<int64_t>* ids) {
         (*ids)[ids->size() - 1] = 12345;
         v->values = ids->data();
       },
       "12345"},
      {"negative id",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>*, std::vector<int64_t>* ids) {
         (*ids)[0] = -3;
         v->values = ids->data();
       },
       "-3"},
      {"NULL lengths",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>*, std::vector<int64_t>*) {
         v->lengths = nullptr;
       },
       "lengths"},
      {"NULL values",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>*, std::vector<int64_t>*) {
         v->values = nullptr;
       },
       "values"},
      {"wrong feature count",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>*, std::vector<int64_t>*) {
         v->num_features = 3;
       },
       "num_features"},
      {"wrong num_lengths",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>*, std::vector<int64_t>*) {
         v->num_lengths -= 1;
       },
       "num_lengths"},
      {"bad values dtype",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>*, std::vector<int64_t>*) {
         v->values_dtype = SHARDREC_DTYPE_FLOAT32;
       },
       "values_dtype"},
      {"weights size mismatch",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>*, std::vector<int64_t>*) {
         v->num_weights -= 1;
       },
       "num_weights"},
      {"negative batch size",
       [](shardrec_kjt_view_t* v, std::vector<int32_t>*, std::vector<int64_t>*) {
         v->batch_size = -2;
       },
       "batch_size"},
  };
  for (bool async : {false, true}) {
    for (const BadBatchCase& bc : cases) {
      SCOPED_TRACE(std::string(bc.name) + (async ? " (async)" : ""));
      Run([&](int r, shardrec_embedding_t* c) {
        const auto before = Snapshot(c, s_);
        int64_t steps_before = 0;
        shardrec_embedding_num_steps(c, &steps_before);
        const RefBatch& b = batches_[1][r];
        std::vector<int32_t> lengths = b.lengths;
        std::vector<int64_t> ids = b.ids;
        KjtHolder kjt(b, s_.num_features, false);
        shardrec_kjt_view_t view = *kjt.view();
        if (r == 1) bc.mutate(&view, &lengths, &ids);
        int64_t dim = 0;
        shardrec_embedding_output_dim(c, &dim);
        std::vector<float> out(static_cast<size_t>(b.batch_size * dim));
        shardrec_status_t rc;
        if (async) {
          rc = shardrec_embedding_input_dist_start(c, &view, nullptr);
          if (rc == SHARDREC_OK) rc = shardrec_embedding_input_dist_wait(c, nullptr);
        } else {
          rc = shardrec_embedding_forward(c, &view, out.data(), out.size(), nullptr);
        }
        EXPECT_EQ(rc, SHARDREC_EINVAL) << "rank " << r;
        const std::string msg = shardrec_last_error();
        if (r == 1) {
          EXPECT_NE(msg.find(bc.message), std::string::npos) << msg;
        } else {
          EXPECT_NE(msg.find("rank 1 rejected"), std::string::npos) << msg;
        }
        // No backward is possible for the rejected batch, and nothing changed.
        EXPECT_EQ(shardrec_embedding_backward(c, grads_[1][r].data(), grads_[1][r].size(), nullptr),
                  SHARDREC_EUSAGE);
        int64_t steps_after = 0;
        shardrec_embedding_num_steps(c, &steps_after);
        EXPECT_EQ(steps_after, steps_before);
        EXPECT_TRUE(BitEqual(before, Snapshot(c, s_))) << "rank " << r;
      });
    }
  }
}

TEST_F(EmbeddingValidation, FailedForwardLeavesNoBatchToTrain) {
  // A forward whose backward has not run yet, then a forward rank 1's batch fails: the backward
  // that follows must not train the first batch with the second one's gradient, on any rank.
  Run([&](int r, shardrec_embedding_t* c) {
    KjtHolder kjt(batches_[1][r], s_.num_features, false);
    std::vector<float> out;
    ASSERT_TRUE(ForwardOk(r, c, 1, kjt, &out));
    const auto before = Snapshot(c, s_);
    shardrec_kjt_view_t bad = *kjt.view();
    if (r == 1) bad.num_values = 0;  // the lengths no longer sum to it
    EXPECT_EQ(shardrec_embedding_forward(c, &bad, out.data(), out.size(), nullptr),
              SHARDREC_EINVAL);
    const auto& g = grads_[1][r];
    EXPECT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_EUSAGE);
    EXPECT_NE(std::string(shardrec_last_error()).find("last forward failed"), std::string::npos)
        << shardrec_last_error();
    EXPECT_TRUE(BitEqual(before, Snapshot(c, s_))) << "rank " << r;
    int64_t steps = 0;
    shardrec_embedding_num_steps(c, &steps);
    EXPECT_EQ(steps, 1);
  });
}

TEST_F(EmbeddingValidation, NullBatchIsRejectedCollectively) {
  Run([&](int r, shardrec_embedding_t* c) {
    const auto before = Snapshot(c, s_);
    KjtHolder kjt(batches_[1][r], s_.num_features, false);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    std::vector<float> out(static_cast<size_t>(batches_[1][r].batch_size * dim));
    shardrec_status_t rc = shardrec_embedding_forward(c, r == 0 ? nullptr : kjt.view(), out.data(),
                                                      out.size(), nullptr);
    EXPECT_EQ(rc, SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find(r == 0 ? "batch" : "rank 0 rejected"),
              std::string::npos)
        << shardrec_last_error();
    EXPECT_TRUE(BitEqual(before, Snapshot(c, s_)));
  });
}

TEST_F(EmbeddingValidation, BadGradientOnOneRankChangesNothing) {
  Run([&](int r, shardrec_embedding_t* c) {
    KjtHolder kjt(batches_[1][r], s_.num_features, false);
    ASSERT_TRUE(ForwardOk(r, c, 1, kjt));
    const auto before = Snapshot(c, s_);
    const auto& g = grads_[1][r];
    shardrec_status_t rc =
        shardrec_embedding_backward(c, g.data(), r == 1 ? g.size() - 1 : g.size(), nullptr);
    EXPECT_EQ(rc, SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find(r == 1 ? "grad_len" : "rank 1 rejected"),
              std::string::npos)
        << shardrec_last_error();
    EXPECT_TRUE(BitEqual(before, Snapshot(c, s_)));
    int64_t steps = 0;
    shardrec_embedding_num_steps(c, &steps);
    EXPECT_EQ(steps, 1);
    // The batch is still the current one: a correct backward now goes through.
    ASSERT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  });
}

// A wrong out_len on one rank is refused with the batch in the input exchange: every rank's
// forward fails (it passed on the other ranks, whose backward then waited for a rank that, as
// the README's loop does, skipped its backward after its failed forward), and no rank has a batch
// to train.
TEST_F(EmbeddingValidation, BadOutputLengthFailsEveryRank) {
  Run([&](int r, shardrec_embedding_t* c) {
    KjtHolder kjt(batches_[1][r], s_.num_features, false);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    std::vector<float> out(static_cast<size_t>(batches_[1][r].batch_size * dim) + 1);
    const size_t len = r == 0 ? out.size() : out.size() - 1;
    const auto before = Snapshot(c, s_);
    shardrec_status_t rc = shardrec_embedding_forward(c, kjt.view(), out.data(), len, nullptr);
    EXPECT_EQ(rc, SHARDREC_EINVAL) << shardrec_last_error();
    EXPECT_NE(std::string(shardrec_last_error()).find(r == 0 ? "out_len" : "rank 0 rejected"),
              std::string::npos)
        << shardrec_last_error();
    // No rank has a batch to train: every backward is refused the same way.
    const auto& g = grads_[1][r];
    rc = shardrec_embedding_backward(c, g.data(), g.size(), nullptr);
    EXPECT_EQ(rc, SHARDREC_EUSAGE) << shardrec_last_error();
    EXPECT_TRUE(BitEqual(before, Snapshot(c, s_)));
    // The next forward with the right length goes through on every rank.
    EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size() - 1, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
  });
}

// The pipelined forward learns its output buffer after the input exchange: a wrong out_len on
// one rank still fails every rank's forward_distributed (before, it failed alone and its peers'
// backward waited for it), no rank has a batch to train, and the pipeline goes on.
TEST_F(EmbeddingValidation, BadOutputLengthInThePipelineFailsEveryRank) {
  Run([&](int r, shardrec_embedding_t* c) {
    KjtHolder kjt(batches_[1][r], s_.num_features, false);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    std::vector<float> out(static_cast<size_t>(batches_[1][r].batch_size * dim) + 1);
    const size_t good = out.size() - 1;
    const auto before = Snapshot(c, s_);
    ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjt.view(), nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK);
    shardrec_status_t rc =
        shardrec_embedding_forward_distributed(c, out.data(), r == 0 ? out.size() : good, nullptr);
    EXPECT_EQ(rc, SHARDREC_EINVAL) << shardrec_last_error();
    const std::string why = shardrec_last_error();
    EXPECT_NE(why.find(r == 0 ? "out_len" : "rank 0 rejected"), std::string::npos) << why;
    const auto& g = grads_[1][r];
    rc = shardrec_embedding_backward(c, g.data(), g.size(), nullptr);
    EXPECT_EQ(rc, SHARDREC_EUSAGE) << shardrec_last_error();
    EXPECT_TRUE(BitEqual(before, Snapshot(c, s_)));
    // The next pipelined step trains on every rank, as the plain forward would.
    ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjt.view(), nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_forward_distributed(c, out.data(), good, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_FALSE(BitEqual(before, Snapshot(c, s_)));
  });
}

// Creation is collective: a rank given a NULL plan or a NULL out still meets its peers'
// agreement, so every rank fails at once naming it (before, the peers waited out their 60 s
// timeout), and the communicator stays usable for the next creation.
TEST_F(EmbeddingValidation, ANullPlanOrOutOnOneRankFailsEveryRankAtOnce) {
  const shardrec_optimizer_config_t opt = ToCOptimizer(s_.optimizer);
  for (const bool null_plan : {true, false}) {
    SpawnRanks(s_.world, [&](int r) {
      const auto start = std::chrono::steady_clock::now();
      shardrec_embedding_t* c = nullptr;
      const bool refuse = r == 1;
      const shardrec_status_t rc = shardrec_embedding_create(
          refuse && !null_plan ? nullptr : &c, refuse && null_plan ? nullptr : plan_.get(),
          GroupComm(s_.world, r), &opt, nullptr);
      EXPECT_EQ(rc, SHARDREC_EINVAL) << shardrec_last_error();
      EXPECT_EQ(c, nullptr);
      const std::string why = shardrec_last_error();
      const char* want = !refuse ? "rank 1 rejected" : null_plan ? "plan" : "out";
      EXPECT_NE(why.find(want), std::string::npos) << why;
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
      // The next creation with good arguments goes through on every rank.
      ASSERT_EQ(shardrec_embedding_create(&c, plan_.get(), GroupComm(s_.world, r), &opt, nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      shardrec_embedding_destroy(c);
    });
  }
}

TEST_F(EmbeddingValidation, AccessorErrorsChangeNothing) {
  Run([&](int r, shardrec_embedding_t* c) {
    const auto before = Snapshot(c, s_);
    std::vector<float> w(static_cast<size_t>(s_.tables[1].rows) * s_.tables[1].dim, 0.5f);
    EXPECT_EQ(shardrec_embedding_set_weights(c, "t1", w.data(), r == 0 ? w.size() - 1 : w.size()),
              SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_embedding_set_weights(c, "nope", w.data(), w.size()), SHARDREC_ENOTFOUND);
    EXPECT_EQ(shardrec_embedding_set_state(c, "t1", "momentum9", w.data(), w.size()),
              SHARDREC_ENOTFOUND);
    EXPECT_NE(std::string(shardrec_last_error()).find("momentum9"), std::string::npos);
    EXPECT_EQ(shardrec_embedding_get_weights(c, "t1", w.data(), w.size() + 1), SHARDREC_EINVAL);
    // A NULL table or state is a bad argument (not "no table named ''"), refused on every rank
    // even when only one rank passes it.
    EXPECT_EQ(shardrec_embedding_set_weights(c, r == 0 ? nullptr : "t1", w.data(), w.size()),
              SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find(r == 0 ? "table must not be NULL" : "rank"),
              std::string::npos)
        << shardrec_last_error();
    EXPECT_EQ(shardrec_embedding_get_weights(c, nullptr, w.data(), w.size()), SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_embedding_set_state(c, "t1", nullptr, w.data(), w.size()), SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("state must not be NULL"), std::string::npos)
        << shardrec_last_error();
    EXPECT_EQ(shardrec_embedding_get_state(c, nullptr, "momentum1", w.data(), w.size()),
              SHARDREC_EINVAL);
    EXPECT_TRUE(BitEqual(before, Snapshot(c, s_)));
  });
}

// Ranks naming different tables (or states, or with_optimizer_state) to a collective accessor,
// each valid on its own rank, used to exchange messages of different sizes, which Gloo answered
// by ending a process (a peer's pair thread threw). Every rank now fails with EINVAL before any
// data moves, nothing changes, and the next step trains.
TEST_F(EmbeddingValidation, AccessorsNamingDifferentTablesFailEveryRank) {
  Run([&](int r, shardrec_embedding_t* c) {
    const auto before = Snapshot(c, s_);
    const RefTable& mine = s_.tables[r == 0 ? 1 : 2];
    std::vector<float> w(static_cast<size_t>(mine.rows) * mine.dim, 0.5f);
    const auto expect_refused = [&](shardrec_status_t rc, const char* call) {
      EXPECT_EQ(rc, SHARDREC_EINVAL) << call << ": " << shardrec_last_error();
      EXPECT_NE(std::string(shardrec_last_error()).find("differ"), std::string::npos)
          << call << ": " << shardrec_last_error();
    };
    expect_refused(shardrec_embedding_get_weights(c, mine.name.c_str(), w.data(), w.size()),
                   "get_weights");
    expect_refused(shardrec_embedding_set_weights(c, mine.name.c_str(), w.data(), w.size()),
                   "set_weights");
    // The same table, different states.
    const char* state = r == 0 ? "momentum1" : "momentum2";
    expect_refused(shardrec_embedding_set_state(c, mine.name.c_str(), state, w.data(), w.size()),
                   "set_state");
    const std::string path = ::testing::TempDir() + "/different_tables_" + std::to_string(r);
    expect_refused(shardrec_checkpoint_export_table(c, mine.name.c_str(), path.c_str(), 1),
                   "export_table");
    expect_refused(shardrec_checkpoint_import_table(c, mine.name.c_str(), path.c_str(), 1),
                   "import_table");
    // The same table, with and without its optimizer state (the export's gathers and the
    // import's reads follow from it).
    const char* same = s_.tables[1].name.c_str();
    expect_refused(shardrec_checkpoint_export_table(c, same, path.c_str(), r == 0 ? 1 : 0),
                   "export_table with_state");
    expect_refused(shardrec_checkpoint_import_table(c, same, path.c_str(), r == 0 ? 1 : 0),
                   "import_table with_state");
    EXPECT_TRUE(BitEqual(before, Snapshot(c, s_)));
  });
}

TEST_F(EmbeddingValidation, SetWeightsAndStatesRoundTrip) {
  Run([&](int, shardrec_embedding_t* c) {
    for (const RefTable& t : s_.tables) {
      std::vector<float> w(static_cast<size_t>(t.rows) * t.dim);
      for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
      ASSERT_EQ(shardrec_embedding_set_weights(c, t.name.c_str(), w.data(), w.size()), SHARDREC_OK);
      std::vector<float> got(w.size());
      ASSERT_EQ(shardrec_embedding_get_weights(c, t.name.c_str(), got.data(), got.size()),
                SHARDREC_OK);
      EXPECT_EQ(got, w) << t.name;
      std::vector<float> m2(w.size(), 0.25f);
      ASSERT_EQ(shardrec_embedding_set_state(c, t.name.c_str(), "momentum2", m2.data(), m2.size()),
                SHARDREC_OK);
      ASSERT_EQ(
          shardrec_embedding_get_state(c, t.name.c_str(), "momentum2", got.data(), got.size()),
          SHARDREC_OK);
      EXPECT_EQ(got, m2);
    }
  });
}

TEST(EmbeddingCreate, RejectsCudaDeviceAndMismatchedPlans) {
  Scenario s = ValidationScenario();
  PlanPtr plan = MakePlan(s);
  Scenario other = s;
  other.tables[0].rows = 11;
  PlanPtr plan2 = MakePlan(other);
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    // A device no host has (without the plugin, no CUDA device at all).
    o.device_type = SHARDREC_DEVICE_CUDA;
    o.device_index = 999;
    // ENODEVICE, or EUNSUPPORTED from a build without CUDA (the sanitizer builds): the same
    // answer as the device check gives.
    const shardrec_status_t no_device = shardrec_device_check(SHARDREC_DEVICE_CUDA, 999);
    EXPECT_TRUE(no_device == SHARDREC_ENODEVICE || no_device == SHARDREC_EUNSUPPORTED) << no_device;
    shardrec_embedding_t* c = nullptr;
    // Rank 0 asks for a missing CUDA device, rank 1 is fine: both fail, nobody hangs.
    shardrec_status_t rc =
        shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), nullptr, r == 0 ? &o : nullptr);
    EXPECT_EQ(rc, r == 0 ? no_device : SHARDREC_EINVAL) << shardrec_last_error();
    EXPECT_EQ(c, nullptr);
    rc = shardrec_embedding_create(&c, r == 0 ? plan.get() : plan2.get(), GroupComm(2, r), nullptr,
                                   nullptr);
    EXPECT_EQ(rc, SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("plan"), std::string::npos);
    EXPECT_EQ(c, nullptr);
  });
  // A plan for 2 ranks on a group of 4.
  SpawnRanks(4, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(4, r), nullptr, nullptr),
              SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("ranks"), std::string::npos);
  });
  shardrec_embedding_destroy(nullptr);
}

// Options that shape the exchanges or the results differing on one rank (each valid alone) were
// accepted: an encoding differing made the first forward end the process (Gloo's size check),
// another seed, learning rate or non-finite policy left data-parallel copies silently different.
// Creation's agreement compares them: EINVAL on every rank; the thread count may differ.
TEST(EmbeddingCreate, OptionsDifferingAcrossRanksFailEveryRank) {
  Scenario s = ValidationScenario();
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  const std::function<void(shardrec_embedding_options_t*, shardrec_optimizer_config_t*)> changes[] =
      {
          [](shardrec_embedding_options_t* o, shardrec_optimizer_config_t*) {
            o->forward_comm_encoding = SHARDREC_COMM_ENCODING_FP16;
          },
          [](shardrec_embedding_options_t* o, shardrec_optimizer_config_t*) {
            o->backward_comm_encoding = SHARDREC_COMM_ENCODING_BF16;
          },
          [](shardrec_embedding_options_t* o, shardrec_optimizer_config_t*) { o->seed += 1; },
          [](shardrec_embedding_options_t* o, shardrec_optimizer_config_t*) {
            o->non_finite = SHARDREC_NON_FINITE_ALLOW;
          },
          [](shardrec_embedding_options_t*, shardrec_optimizer_config_t* c) {
            c->learning_rate *= 2;
          },
      };
  SpawnRanks(2, [&](int r) {
    for (size_t k = 0; k < std::size(changes); ++k) {
      shardrec_embedding_options_t o;
      shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
      shardrec_optimizer_config_t mine = opt;
      if (r == 1) changes[k](&o, &mine);
      shardrec_embedding_t* c = nullptr;
      EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), &mine, &o),
                SHARDREC_EINVAL)
          << "change " << k << ", rank " << r;
      EXPECT_NE(std::string(shardrec_last_error()).find("different collection options"),
                std::string::npos)
          << shardrec_last_error();
      EXPECT_EQ(c, nullptr);
    }
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.num_threads = r == 0 ? 1 : 2;
    shardrec_embedding_t* c = nullptr;
    EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), &opt, &o), SHARDREC_OK)
        << shardrec_last_error();
    shardrec_embedding_destroy(c);
  });
}

// Version 4 adds the capacity hints: init and the initialiser give 0 (unknown), a version-3
// init leaves them alone (the caller's struct ends before them).
TEST(EmbeddingOptionsInit, CapacityHints) {
  shardrec_embedding_options_t o;
  std::memset(&o, 0x5a, sizeof(o));
  ASSERT_EQ(shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION), SHARDREC_OK);
  EXPECT_EQ(o.version, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  EXPECT_EQ(o.max_batch_size, 0);
  EXPECT_EQ(o.max_ids_per_batch, 0);
  const shardrec_embedding_options_t m = SHARDREC_EMBEDDING_OPTIONS_INIT;
  EXPECT_EQ(m.max_batch_size, 0);
  EXPECT_EQ(m.max_ids_per_batch, 0);
  std::memset(&o, 0x5a, sizeof(o));
  ASSERT_EQ(shardrec_embedding_options_init(&o, 3), SHARDREC_OK);
  EXPECT_EQ(o.backward_comm_encoding, SHARDREC_COMM_ENCODING_FP32);
  EXPECT_EQ(o.max_batch_size, 0x5a5a5a5a5a5a5a5a);
}

}  // namespace
}  // namespace shardrec::testing
