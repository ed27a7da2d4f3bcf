// Black-box tests of shardrec_comm_bind_local_numa: the affinity it leaves is the chosen NUMA
// node's CPU set as hwloc (the reference here) reports it, and bad input changes nothing.
#include <gtest/gtest.h>
#include <sched.h>

#include <string>
#include <thread>
#include <vector>

#include "shardrec/comm.h"

#if SHARDREC_TEST_HAVE_HWLOC
#include <hwloc.h>
#include <hwloc/glibc-sched.h>
#endif

namespace {

std::string LastError() { return shardrec_last_error(); }

cpu_set_t Affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return set;
}

// Restores the test process's mask whatever a case did to it.
class CapiCommNuma : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = Affinity(); }
  void TearDown() override { sched_setaffinity(0, sizeof(saved_), &saved_); }
  cpu_set_t saved_;
};

#if SHARDREC_TEST_HAVE_HWLOC
// The CPUs of the index-th NUMA node that has CPUs, in hwloc's logical order; and how many
// such nodes there are.
int NodesWithCpus() {
  hwloc_topology_t topo;
  hwloc_topology_init(&topo);
  hwloc_topology_load(topo);
  int n = 0;
  for (int i = 0; i < hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE); ++i) {
    if (!hwloc_bitmap_iszero(hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i)->cpuset)) ++n;
  }
  hwloc_topology_destroy(topo);
  return n;
}

cpu_set_t NodeCpus(int index) {
  hwloc_topology_t topo;
  hwloc_topology_init(&topo);
  hwloc_topology_load(topo);
  cpu_set_t set;
  CPU_ZERO(&set);
  int seen = 0;
  for (int i = 0; i < hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE); ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
    if (hwloc_bitmap_iszero(node->cpuset)) continue;
    if (seen++ == index)
      hwloc_cpuset_to_glibc_sched_affinity(topo, node->cpuset, &set, sizeof(set));
  }
  hwloc_topology_destroy(topo);
  return set;
}

// A local group of 1 (local rank 0 of 1) binds to the first node; the mask afterwards is that
// node's CPU set. With a narrowed mask beforehand, the call restores the node's full set.
TEST_F(CapiCommNuma, SingleRankBindsToFirstNodeCpus) {
  cpu_set_t narrow;
  CPU_ZERO(&narrow);
  const cpu_set_t before = Affinity();
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &before)) {
      CPU_SET(c, &narrow);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(narrow), &narrow), 0);
  shardrec_comm_t* comm = nullptr;
  ASSERT_EQ(shardrec_comm_create_local_group(&comm, 1, nullptr), SHARDREC_OK) << LastError();
  int32_t node = -1;
  ASSERT_EQ(shardrec_comm_bind_local_numa(&node, comm), SHARDREC_OK) << LastError();
  EXPECT_EQ(node, 0);
  const cpu_set_t after = Affinity();
  const cpu_set_t expected = NodeCpus(0);
  EXPECT_GT(CPU_COUNT(&expected), 0);
  EXPECT_TRUE(CPU_EQUAL(&after, &expected));
  // A NULL out is allowed.
  EXPECT_EQ(shardrec_comm_bind_local_numa(nullptr, comm), SHARDREC_OK) << LastError();
  shardrec_comm_destroy(comm);
}

// Two ranks as threads of one process: each binds the whole process to node r * nodes / 2; the
// last call wins, so after both the mask is one of the two nodes' sets (node 0 on one node).
TEST_F(CapiCommNuma, LocalGroupOfTwoBindsTheSharedProcess) {
  shardrec_comm_t* comms[2] = {nullptr, nullptr};
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, nullptr), SHARDREC_OK) << LastError();
  const int nodes = NodesWithCpus();
  ASSERT_GE(nodes, 1);
  int32_t got[2] = {-1, -1};
  shardrec_status_t st[2] = {SHARDREC_ERROR, SHARDREC_ERROR};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { st[r] = shardrec_comm_bind_local_numa(&got[r], comms[r]); });
  }
  for (auto& t : threads) t.join();
  const cpu_set_t after = Affinity();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r], SHARDREC_OK);
    EXPECT_EQ(got[r], r * nodes / 2);
  }
  const cpu_set_t first = NodeCpus(got[0]);
  const cpu_set_t second = NodeCpus(got[1]);
  EXPECT_TRUE(CPU_EQUAL(&after, &first) || CPU_EQUAL(&after, &second));
  if (nodes == 1) {
    EXPECT_TRUE(CPU_EQUAL(&after, &first));
  }
  for (auto* c : comms) shardrec_comm_destroy(c);
}
#else
TEST_F(CapiCommNuma, WithoutHwlocIsUnsupportedAndChangesNothing) {
  shardrec_comm_t* comm = nullptr;
  ASSERT_EQ(shardrec_comm_create_local_group(&comm, 1, nullptr), SHARDREC_OK) << LastError();
  const cpu_set_t before = Affinity();
  int32_t node = -7;
  EXPECT_EQ(shardrec_comm_bind_local_numa(&node, comm), SHARDREC_EUNSUPPORTED);
  EXPECT_NE(LastError().find("hwloc"), std::string::npos) << LastError();
  EXPECT_EQ(node, -7);
  const cpu_set_t after = Affinity();
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
  shardrec_comm_destroy(comm);
}
#endif

TEST_F(CapiCommNuma, NullCommIsInvalidAndChangesNothing) {
  const cpu_set_t before = Affinity();
  int32_t node = -7;
  EXPECT_EQ(shardrec_comm_bind_local_numa(&node, nullptr), SHARDREC_EINVAL);
  EXPECT_FALSE(LastError().empty());
  EXPECT_EQ(node, -7);
  const cpu_set_t after = Affinity();
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

}  // namespace
