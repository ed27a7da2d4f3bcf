// The two-rank input exchange whose counts ride with the ids (ExchangeInput with InputCaps):
// every rank receives what the exchange with a round of counts of its own delivers, batch after
// batch, as messages grow past the sizes the ranks expect (second round), shrink, carry
// weights, and as a rank rejects its batch or the ranks' modes differ.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/embedding/input_dist.h"
#include "impl/sharding/layout.h"
#include "tests/impl/sharding/test_plans.h"

namespace shardrec::embedding {
namespace {

using sharding::testing::Table;

// Two table-wise tables, one per rank, and a row-wise one over both.
std::shared_ptr<sharding::Plan> TwoRankPlan() {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 2;
  plan->features = {{"a", 2.0f}, {"b", 2.0f}, {"c", 2.0f}};
  plan->tables = {Table("a", 40, 8, {0}), Table("b", 30, 4, {1}), Table("c", 50, 4, {2})};
  plan->table_plans = {sharding::MakeTableWise(plan->tables[0], 0),
                       sharding::MakeTableWise(plan->tables[1], 1),
                       sharding::MakeRowWise(plan->tables[2], 2)};
  return plan;
}

struct Step {
  int64_t batch[2];  // per rank
  bool weighted;
  bool reject[2];  // this rank rejects its batch
  ForwardMode mode[2];
};

// What one exchange left on a rank: its verdict, and on success what it received.
struct Seen {
  std::string error;
  std::vector<int64_t> counts;
  std::vector<size_t> recv_bytes;
  std::vector<uint8_t> peer_message;
  bool agreed = false;
  std::vector<int64_t> words;
};

Seen Exchange(const Layout& l, comm::Communicator& comm, const Step& st, int r, InputCaps* caps,
              RoutedBatch* rb) {
  const int64_t B = st.batch[r];
  const auto F = static_cast<int64_t>(l.plan->features.size());
  std::vector<int32_t> lengths(static_cast<size_t>(F * B));
  std::vector<int64_t> ids;
  std::vector<float> weights;
  for (int64_t f = 0; f < F; ++f)
    for (int64_t b = 0; b < B; ++b) {
      const auto len = static_cast<int32_t>((b * 7 + f * 3 + r) % 5);
      lengths[static_cast<size_t>(f * B + b)] = len;
      for (int32_t k = 0; k < len; ++k) {
        ids.push_back((b * 13 + k * 5 + f + r) % 30);
        weights.push_back(0.5f + static_cast<float>(k));
      }
    }
  Batch batch{B,
              F,
              lengths.data(),
              lengths.size(),
              ids.data(),
              DType::kInt64,
              ids.size(),
              st.weighted ? weights.data() : nullptr,
              st.weighted ? weights.size() : 0,
              {}};
  Status local = RouteBatch(ExecContext(), l, RouteOptions{}, batch, rb);
  EXPECT_TRUE(local.ok()) << local.ToString();
  if (st.reject[r]) local = Status::InvalidArgument("this rank's batch is bad");
  Seen seen;
  const Status s = ExchangeInput(l, comm, local, rb, st.mode[r], 10 + r, caps);
  if (!s.ok()) {
    seen.error = s.ToString();
    return seen;
  }
  seen.counts = rb->counts_recv;
  seen.recv_bytes = rb->recv_bytes;
  const size_t peer_bytes = rb->recv_bytes[static_cast<size_t>(1 - r)];
  EXPECT_GE(rb->recv.size(), peer_bytes);
  seen.peer_message.assign(rb->recv.begin(), rb->recv.begin() + static_cast<ptrdiff_t>(peer_bytes));
  seen.agreed = rb->forward_agreed;
  seen.words = rb->forward_words;
  const Status unpacked = UnpackInput(l, rb);
  EXPECT_TRUE(unpacked.ok()) << unpacked.ToString();
  return seen;
}

TEST(EmbeddingInputExchange, CountsRidingWithTheIdsDeliverWhatTwoRoundsDo) {
  const auto T = ForwardMode::kTraining, E = ForwardMode::kEvaluating, N = ForwardMode::kNone;
  const std::vector<Step> steps = {
      {{3, 5}, false, {false, false}, {N, N}},    // first batch: past the empty caps
      {{3, 5}, false, {false, false}, {T, T}},    // fits
      {{40, 5}, true, {false, false}, {T, T}},    // rank 0's message grows, weighted
      {{40, 60}, true, {false, false}, {E, E}},   // rank 1's grows
      {{40, 60}, true, {false, true}, {T, T}},    // rank 1 rejects: caps kept on both sides
      {{2, 1}, false, {false, false}, {T, T}},    // both shrink
      {{2, 1}, false, {true, false}, {T, T}},     // rank 0 rejects
      {{2, 1}, false, {false, false}, {T, E}},    // modes differ
      {{70, 70}, false, {false, false}, {N, T}},  // not all announced; both grow
      {{70, 70}, false, {false, false}, {T, T}},
  };
  auto plan = TwoRankPlan();
  std::vector<std::unique_ptr<comm::Communicator>> group;
  ASSERT_TRUE(comm::CreateLocalGroup(2, comm::CommOptions(), &group).ok());
  // [rank][step]: with a round of counts of its own, and with the counts riding along.
  std::vector<std::vector<Seen>> apart(2), together(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Layout l;
      ASSERT_TRUE(
          BuildLayout(plan, r, std::vector<optim::OptimizerType>(3, optim::OptimizerType::kSgd), &l)
              .ok());
      InputCaps caps;
      RoutedBatch a, b;
      for (const Step& st : steps) {
        apart[r].push_back(Exchange(l, *group[r], st, r, nullptr, &a));
        together[r].push_back(Exchange(l, *group[r], st, r, &caps, &b));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(together[r].size(), steps.size());
    for (size_t k = 0; k < steps.size(); ++k) {
      SCOPED_TRACE("rank " + std::to_string(r) + ", step " + std::to_string(k));
      const Seen &x = apart[r][k], &y = together[r][k];
      EXPECT_EQ(x.error, y.error);
      EXPECT_EQ(x.counts, y.counts);
      EXPECT_EQ(x.recv_bytes, y.recv_bytes);
      EXPECT_EQ(x.peer_message, y.peer_message);
      EXPECT_EQ(x.agreed, y.agreed);
      EXPECT_EQ(x.words, y.words);
      const bool fails =
          steps[k].reject[0] || steps[k].reject[1] ||
          (steps[k].mode[0] != N && steps[k].mode[1] != N && steps[k].mode[0] != steps[k].mode[1]);
      EXPECT_EQ(y.error.empty(), !fails) << y.error;
      if (!fails) {
        EXPECT_FALSE(y.peer_message.empty());
      }
    }
  }
  EXPECT_NE(together[0][4].error.find("rank 1 rejected"), std::string::npos);
  EXPECT_NE(together[1][4].error.find("this rank's batch is bad"), std::string::npos);
  EXPECT_NE(together[1][7].error.find("differ in training mode"), std::string::npos);
  EXPECT_TRUE(together[0][1].agreed);
  EXPECT_EQ(together[0][1].words, (std::vector<int64_t>{10, 11}));
}

}  // namespace
}  // namespace shardrec::embedding
