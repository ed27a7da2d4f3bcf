// Mesh layout arithmetic against the rank tables of TorchRec's DMPCollection (docs/semantics.md).
#include "impl/replica/layout.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace shardrec::replica {
namespace {

using Groups = std::vector<std::vector<int>>;

Groups Sharding(const Layout& l) {
  Groups g;
  for (int i = 0; i < l.replicas(); ++i) g.push_back(l.ShardingGroupRanks(i));
  return g;
}
Groups Replica(const Layout& l) {
  Groups g;
  for (int i = 0; i < l.shard_size(); ++i) g.push_back(l.ReplicaGroupRanks(i));
  return g;
}

Layout Make(int world, int s, MeshKind kind) {
  Layout l;
  EXPECT_TRUE(Layout::Make(world, s, kind, &l).ok());
  return l;
}

TEST(ReplicaLayout, DefaultW8S2KeepsReplicaGroupsInsideNodes) {
  Layout l = Make(8, 2, MeshKind::kDefault);
  EXPECT_EQ(Sharding(l), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(Replica(l), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(ReplicaLayout, DefaultW8S4) {
  Layout l = Make(8, 4, MeshKind::kDefault);
  EXPECT_EQ(Sharding(l), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(Replica(l), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

TEST(ReplicaLayout, DefaultW8S8HasSingletonReplicaGroups) {
  Layout l = Make(8, 8, MeshKind::kDefault);
  EXPECT_EQ(Sharding(l), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(Replica(l).size(), 8u);
  for (const auto& g : Replica(l)) EXPECT_EQ(g.size(), 1u);
}

TEST(ReplicaLayout, InterHostW8S4) {
  Layout l = Make(8, 4, MeshKind::kInterHost);
  EXPECT_EQ(Sharding(l), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(Replica(l), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(ReplicaLayout, InterHostW8S2) {
  Layout l = Make(8, 2, MeshKind::kInterHost);
  EXPECT_EQ(Sharding(l), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(Replica(l), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

TEST(ReplicaLayout, InterHostW8S8) {
  Layout l = Make(8, 8, MeshKind::kInterHost);
  EXPECT_EQ(Sharding(l), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(Replica(l).size(), 8u);
}

TEST(ReplicaLayout, RankQueriesAgreeWithGroupListsForEveryShape) {
  for (MeshKind kind : {MeshKind::kDefault, MeshKind::kInterHost}) {
    for (int s : {1, 2, 4, 8}) {
      Layout l = Make(8, s, kind);
      std::set<int> seen;
      for (int r = 0; r < 8; ++r) {
        auto sg = l.ShardingGroupRanks(l.ShardingGroup(r));
        auto rg = l.ReplicaGroupRanks(l.ReplicaGroup(r));
        EXPECT_EQ(sg[l.ShardRank(r)], r);
        EXPECT_EQ(rg[l.ReplicaRank(r)], r);
        EXPECT_EQ(l.GlobalRank(l.ShardingGroup(r), l.ShardRank(r)), r);
        seen.insert(r);
      }
      EXPECT_EQ(seen.size(), 8u);
    }
  }
}

TEST(ReplicaLayout, PlanRankRemapMatchesTorchRec) {
  // S=4, R=2: plan rank 1 lands on global 2 in group 0 and global 3 in group 1 (default layout).
  Layout l = Make(8, 4, MeshKind::kDefault);
  EXPECT_EQ(l.GlobalRank(0, 1), 2);
  EXPECT_EQ(l.GlobalRank(1, 1), 3);
  Layout h = Make(8, 4, MeshKind::kInterHost);
  EXPECT_EQ(h.GlobalRank(1, 1), 5);
}

TEST(ReplicaLayout, RejectsGroupSizesThatDoNotDivideTheWorld) {
  Layout l;
  EXPECT_EQ(Layout::Make(8, 3, MeshKind::kDefault, &l).code(), Code::kInvalidArgument);
  EXPECT_EQ(Layout::Make(8, 0, MeshKind::kDefault, &l).code(), Code::kInvalidArgument);
  EXPECT_EQ(Layout::Make(8, 16, MeshKind::kDefault, &l).code(), Code::kInvalidArgument);
  Status s = Layout::Make(6, 4, MeshKind::kDefault, &l);
  EXPECT_NE(s.message().find("must divide the world size 6"), std::string::npos) << s.message();
}

TEST(ReplicaLayout, DescribeNamesGroupsAndNodes) {
  Layout l = Make(8, 4, MeshKind::kDefault);
  std::string d = l.Describe(4);
  EXPECT_NE(d.find("[0,2,4,6] [1,3,5,7]"), std::string::npos) << d;
  EXPECT_NE(d.find("[0,1] [2,3] [4,5] [6,7]"), std::string::npos) << d;
  EXPECT_NE(d.find("stay inside one node"), std::string::npos) << d;
  Layout h = Make(8, 4, MeshKind::kInterHost);
  EXPECT_NE(h.Describe(4).find("cross nodes"), std::string::npos);
}

}  // namespace
}  // namespace shardrec::replica
