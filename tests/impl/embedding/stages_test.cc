// White-box checks of the step's stages (docs/embedding-engine.md) on one rank, built by hand as
// the collection builds them: what the step agreement puts on the input exchange for fixed and
// dynamic plans and each training mode, that the fixed rows' resolver leaves the routed rows
// as they are, and that the dynamic rows' resolver turns raw ids into slots (training inserts
// them; evaluation only looks them up, an unknown id reading the zero row), all before any
// kernel runs.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/embedding/engine.h"
#include "impl/embedding/row_resolver.h"
#include "impl/embedding/step_agreement.h"
#include "impl/embedding/step_state.h"
#include "tests/impl/sharding/test_plans.h"

namespace shardrec::embedding {
namespace {

using sharding::testing::Table;

// One rank's state, agreement, engine and resolver over a plan of one table ("t", 1000 rows of
// dim 4, read by one feature), fixed or dynamic with room for 8 rows.
struct Stages {
  StepState s;
  StepAgreement agreement{&s};
  std::unique_ptr<Engine> engine;
  std::unique_ptr<RowResolver> resolver;
};

void Build(bool dynamic, Stages* st) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 1;
  plan->features = {{"f", 2.0f}};
  plan->tables = {Table("t", dynamic ? 8 : 1000, 4, {0})};
  plan->tables[0].dynamic.enabled = dynamic;
  plan->table_plans.push_back(sharding::MakeTableWise(plan->tables[0], 0));
  StepState& s = st->s;
  s.options.huge_pages = false;
  s.table_optim.assign(1, optim::OptimizerConfig());
  ASSERT_TRUE(BuildLayout(plan, 0, {optim::OptimizerType::kSgd}, &s.layout).ok());
  ASSERT_TRUE(s.dynamic.Init(s.layout).ok());
  ASSERT_TRUE(s.params.Allocate(&s.layout, false).ok());
  s.dynamic.Build();
  s.exec = ExecContext::Host(nullptr);
  ASSERT_TRUE(s.params.Initialise(7, s.exec).ok());
  std::vector<std::unique_ptr<comm::Communicator>> group;
  ASSERT_TRUE(comm::CreateLocalGroup(1, comm::CommOptions(), &group).ok());
  s.comm = std::move(group[0]);
  st->engine = MakeEngine(&s, &st->agreement, Device::Host());
  ASSERT_TRUE(st->engine->Init(*s.comm).ok());
  int64_t offer[StepAgreement::kEngineWords] = {st->engine->offer()[0], st->engine->offer()[1]};
  ASSERT_TRUE(StepAgreement::Create(*s.comm, plan.get(), 1, Status::Ok(), offer).ok());
  ASSERT_TRUE(st->engine->Connect(offer, nullptr).ok());
  st->resolver = MakeRowResolver(&s);
}

// The rows of the table's one run after the input exchange (its ids, or slots once resolved).
std::vector<int64_t> RunRows(const RoutedBatch& rb) {
  const kernels::BagRun& run = rb.shards.at(0).runs.at(0);
  return std::vector<int64_t>(run.rows, run.rows + run.num_ids());
}

// Distributes a batch of one sample holding `ids` with the terms the agreement gives it, then
// runs the agreement before the rows (as Forward does).
void Distribute(Stages& st, const std::vector<int64_t>& ids, RoutedBatch* rb) {
  const std::vector<int32_t> lengths = {static_cast<int32_t>(ids.size())};
  Batch b;
  b.batch_size = 1;
  b.num_features = 1;
  b.lengths = lengths.data();
  b.num_lengths = 1;
  b.values = ids.data();
  b.num_values = ids.size();
  std::vector<float> out(4);  // one sample of the table's 4 columns
  const InputTerms terms = st.agreement.Terms(OutputBuffer{out.data(), out.size()});
  ASSERT_TRUE(st.engine->DistributeInput(b, Status::Ok(), rb, terms).ok());
  std::vector<int64_t> dp_words;
  ASSERT_TRUE(st.agreement
                  .BeforeRows(Status::Ok(), *rb, terms.check_output,
                              st.engine->traits().agrees_outputs_first, &dp_words)
                  .ok());
}

TEST(Stages, FixedRowsRideOnTheExchangeAndResolveToThemselves) {
  Stages st;
  Build(false, &st);
  const InputTerms terms = st.agreement.Terms(OutputBuffer{});
  EXPECT_TRUE(terms.check_output) << "the output buffer's check rides on the exchange";
  EXPECT_EQ(terms.mode, ForwardMode::kNone) << "fixed rows need no agreed mode";
  EXPECT_FALSE(terms.agree_before_rows) << "nothing is left to agree on after the exchange";
  EXPECT_FALSE(static_cast<bool>(terms.words));
  EXPECT_FALSE(st.engine->traits().writes_device_output);
  EXPECT_FALSE(st.engine->traits().exchanges_input_inline);
  RoutedBatch rb;
  Distribute(st, {5, 999, 5}, &rb);
  const std::vector<int64_t> routed = RunRows(rb);
  ASSERT_TRUE(st.resolver->Resolve(rb, {}).ok());
  EXPECT_EQ(RunRows(rb), routed);
  EXPECT_EQ(routed, (std::vector<int64_t>{5, 999, 5}));
}

TEST(Stages, DynamicRowsAgreeOnTheModeAndResolveIdsToSlots) {
  Stages st;
  Build(true, &st);
  InputTerms terms = st.agreement.Terms(OutputBuffer{});
  EXPECT_TRUE(terms.check_output);
  EXPECT_EQ(terms.mode, ForwardMode::kTraining) << "dynamic rows insert: the mode is agreed";
  EXPECT_TRUE(terms.agree_before_rows) << "their gather sizes are read after the exchange";
  EXPECT_TRUE(static_cast<bool>(terms.words));

  // Training: raw 64-bit ids become slots of the shard (8 rows), repeated ids one slot.
  const int64_t big = int64_t{1} << 40;
  RoutedBatch rb;
  Distribute(st, {big, 3, big}, &rb);
  EXPECT_TRUE(rb.forward_agreed) << "the mode rode on the input exchange";
  ASSERT_TRUE(st.resolver->Resolve(rb, {}).ok());
  const std::vector<int64_t> slots = RunRows(rb);
  ASSERT_EQ(slots.size(), 3u);
  for (int64_t slot : slots) {
    EXPECT_GE(slot, 0);
    EXPECT_LT(slot, 8);
  }
  EXPECT_EQ(slots[0], slots[2]);
  EXPECT_NE(slots[0], slots[1]);
  dynamic::TableStats stats;
  ASSERT_TRUE(st.s.dynamic.Stats(0, &stats));
  EXPECT_EQ(stats.size, 2);

  // Evaluation: a known id reads its slot, an unknown one the zero row past the live ones; the
  // table does not change.
  st.s.training = false;
  terms = st.agreement.Terms(OutputBuffer{});
  EXPECT_EQ(terms.mode, ForwardMode::kEvaluating);
  RoutedBatch eval;
  Distribute(st, {3, 77}, &eval);
  ASSERT_TRUE(st.resolver->Resolve(eval, {}).ok());
  const std::vector<int64_t> looked = RunRows(eval);
  EXPECT_EQ(looked[0], slots[1]);
  EXPECT_EQ(looked[1], 8) << "the zero row follows the shard's 8 slots";
  ASSERT_TRUE(st.s.dynamic.Stats(0, &stats));
  EXPECT_EQ(stats.size, 2);
}

}  // namespace
}  // namespace shardrec::embedding
