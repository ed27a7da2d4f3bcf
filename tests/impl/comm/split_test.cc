// Split(color, key): membership, ordering by key, negative colours, and concurrent collectives
// on the sub-communicators.
#include <gtest/gtest.h>

#include <thread>

#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

using testutil::Comms;
using testutil::MakeGroup;
using testutil::OnRanks;

TEST(CommSplit, TwoColoursOrderedByKeyRunConcurrently) {
  Comms comms = MakeGroup(4);
  std::vector<std::unique_ptr<Communicator>> subs(4);
  // Even ranks form colour 0, odd ranks colour 1; the key reverses the order inside each group.
  OnRanks(comms, [&](int r, Communicator& c) {
    Status s = c.Split(r % 2, 10 - r, &subs[r]);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_NE(subs[r], nullptr);
    EXPECT_EQ(subs[r]->Size(), 2);
    EXPECT_EQ(subs[r]->Rank(), r < 2 ? 1 : 0);  // ranks 2,3 have the smaller keys
    EXPECT_EQ(subs[r]->timeout(), c.timeout());
  });
  // Both groups all-reduce at the same time, and the parent keeps working afterwards.
  OnRanks(comms, [&](int r, Communicator& c) {
    for (int iter = 0; iter < 20; ++iter) {
      int64_t v = r + iter;
      ASSERT_TRUE(subs[r]->AllReduce(&v, &v, 1, DType::kInt64, ReduceOp::kSum).ok());
      EXPECT_EQ(v, (r % 2 == 0 ? 0 + 2 : 1 + 3) + 2 * iter);
    }
    int32_t root_rank = subs[r]->Rank() == 0 ? r : -1;
    ASSERT_TRUE(subs[r]->Broadcast(&root_rank, 1, DType::kInt32, 0).ok());
    EXPECT_EQ(root_rank, r % 2 == 0 ? 2 : 3);
    float one = 1.0f;
    ASSERT_TRUE(c.AllReduce(&one, &one, 1, DType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_EQ(one, 4.0f);
  });
}

TEST(CommSplit, NegativeColourGetsNoCommunicatorAndNestedSplitsWork) {
  Comms comms = MakeGroup(3);
  std::vector<std::unique_ptr<Communicator>> subs(3), nested(3);
  OnRanks(comms, [&](int r, Communicator& c) {
    ASSERT_TRUE(c.Split(r == 1 ? -1 : 7, 0, &subs[r]).ok());
    if (r == 1) {
      EXPECT_EQ(subs[r], nullptr);
      return;
    }
    ASSERT_NE(subs[r], nullptr);
    EXPECT_EQ(subs[r]->Size(), 2);
    EXPECT_EQ(subs[r]->Rank(), r == 0 ? 0 : 1);  // equal keys: old rank order
    ASSERT_TRUE(subs[r]->Split(0, 0, &nested[r]).ok());
    ASSERT_NE(nested[r], nullptr);
    int32_t v = 1;
    ASSERT_TRUE(nested[r]->AllReduce(&v, &v, 1, DType::kInt32, ReduceOp::kSum).ok());
    EXPECT_EQ(v, 2);
  });
  // A second split on the parent uses fresh store keys and still works.
  OnRanks(comms, [&](int r, Communicator& c) {
    std::unique_ptr<Communicator> solo;
    ASSERT_TRUE(c.Split(r, 0, &solo).ok());
    ASSERT_NE(solo, nullptr);
    EXPECT_EQ(solo->Size(), 1);
    double x = 3.5;
    ASSERT_TRUE(solo->AllReduce(&x, &x, 1, DType::kFloat64, ReduceOp::kAvg).ok());
    EXPECT_EQ(x, 3.5);
  });
}

}  // namespace
}  // namespace shardrec::comm
