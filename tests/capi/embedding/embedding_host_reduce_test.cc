// Table-row-wise and grid tables reduce their partial sums inside the owners' host before they
// cross to another host (docs/multihost.md): the results must be the flat exchange's, bit for
// bit. Each scenario trains twice over in-process groups whose plans put ranks_per_node ranks
// on a host, once with SHARDREC_HOST_REDUCE=1 (reduced, whatever the plan chose) and once with
// SHARDREC_HOST_REDUCE=0 (the flat exchange), and compares
// every forward output and every weight and state bit. The bytes the reduction saves on a host
// link are checked across network namespaces (tests/multihost, multihost_host_reduce).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

struct RunBits {
  std::vector<std::vector<float>> outputs;                // [rank]: every step's, concatenated
  std::vector<std::vector<std::vector<float>>> snapshot;  // [rank]
};

// Encodings of the return exchange (forward) and of the gradient exchange (backward).
struct Encodings {
  int32_t forward = SHARDREC_COMM_ENCODING_FP32;
  int32_t backward = SHARDREC_COMM_ENCODING_FP32;
};

RunBits Train(const Scenario& s, bool flat, Encodings enc = {}) {
  RunBits bits;
  bits.outputs.assign(s.world, {});
  bits.snapshot.assign(s.world, {});
  // Read when each collection is created (all ranks of a run see the same value). The reduced
  // run overrides the plan's choice: the planner keeps the flat exchange where it estimates it
  // cheaper (these small tables on loopback), and then both runs would be the flat one.
  setenv("SHARDREC_HOST_REDUCE", flat ? "0" : "1", 1);
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  EXPECT_NE(plan, nullptr);
  if (plan == nullptr) return bits;
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    o.num_threads = s.num_threads;
    o.forward_comm_encoding = enc.forward;
    o.backward_comm_encoding = enc.backward;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(s.world, r), &opt, &o),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    CollPtr coll(c);
    for (int32_t step = 0; step < s.steps; ++step) {
      KjtHolder kjt(batches[step][r], s.num_features, s.int32_ids);
      std::vector<float> out(grads[step][r].size());
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
      bits.outputs[r].insert(bits.outputs[r].end(), out.begin(), out.end());
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    }
    bits.snapshot[r] = Snapshot(c, s);
  });
  unsetenv("SHARDREC_HOST_REDUCE");
  return bits;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

void ExpectReducedEqualsFlat(const Scenario& s, Encodings enc = {}) {
  const RunBits reduced = Train(s, false, enc);
  const RunBits flat = Train(s, true, enc);
  for (int32_t r = 0; r < s.world; ++r) {
    ASSERT_FALSE(flat.outputs[r].empty());
    EXPECT_TRUE(SameBits(reduced.outputs[r], flat.outputs[r])) << "rank " << r << " outputs";
    ASSERT_EQ(reduced.snapshot[r].size(), flat.snapshot[r].size());
    for (size_t t = 0; t < flat.snapshot[r].size(); ++t)
      EXPECT_TRUE(SameBits(reduced.snapshot[r][t], flat.snapshot[r][t]))
          << "rank " << r << " table/state " << t;
  }
}

// Uneven batches (one rank with a single sample), bags of 0..5 ids, so a sample often has ids
// in only some of a table's row shards, or in none.
Scenario Uneven(int32_t world, int32_t type, int32_t pooling) {
  Scenario s = StandardScenario(world, type, pooling);
  s.ranks_per_node = 2;
  s.max_bag = 5;
  s.batch_sizes.assign(world, 6);
  s.batch_sizes[1] = 1;
  s.batch_sizes[world - 1] = 9;
  s.optimizer.type = 1;  // Adagrad
  s.optimizer.lr = 0.1f;
  return s;
}

TEST(HostReduceTest, TableRowWiseSumTwoHosts) {
  ExpectReducedEqualsFlat(Uneven(4, SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_POOLING_SUM));
}

TEST(HostReduceTest, TableRowWiseMeanWeightedThreeHosts) {
  Scenario s = Uneven(6, SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_POOLING_MEAN);
  s.weighted = true;
  ExpectReducedEqualsFlat(s);
}

TEST(HostReduceTest, TableRowWiseThreeShardsPerHost) {
  // Three partial sums per sample: their order shows in the last bits.
  Scenario s = Uneven(6, SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_POOLING_SUM);
  s.ranks_per_node = 3;
  s.tables[0].rows = 60;
  s.tables[1].rows = 90;
  s.batch_sizes.assign(6, 24);
  s.max_bag = 12;
  ExpectReducedEqualsFlat(s);
}

TEST(HostReduceTest, GridRowWiseAdagradTwoHosts) {
  // Row statistics shared between a grid's column shards travel beside the reduced rows.
  Scenario s = Uneven(4, SHARDREC_SHARDING_GRID, SHARDREC_POOLING_SUM);
  s.optimizer.type = 2;
  ExpectReducedEqualsFlat(s);
}

TEST(HostReduceTest, MixedWithRowWiseAndThreads) {
  // A row-wise table (split over every host: it keeps the flat exchange) beside table-row-wise
  // and grid ones, on two threads per rank.
  Scenario s = Uneven(4, SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_POOLING_SUM);
  s.sharding = {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_TABLE_ROW_WISE,
                SHARDREC_SHARDING_GRID};
  s.num_threads = 2;
  ExpectReducedEqualsFlat(s);
}

TEST(HostReduceTest, QuantizedForwardOrBackwardAlone) {
  // Only an exact (fp32) exchange is reduced inside a host: an encoded forward returns its rows
  // flat, so the exact backward after it must take the flat exchange too, and an encoded backward
  // after a reduced forward sends its gradients flat. Either way the flat run's bits.
  const Scenario s = Uneven(4, SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_POOLING_SUM);
  for (int32_t e : {SHARDREC_COMM_ENCODING_FP16, SHARDREC_COMM_ENCODING_FP8_E4M3}) {
    SCOPED_TRACE(e);
    ExpectReducedEqualsFlat(s, {e, SHARDREC_COMM_ENCODING_FP32});
    ExpectReducedEqualsFlat(s, {SHARDREC_COMM_ENCODING_FP32, e});
  }
}

}  // namespace
}  // namespace shardrec::testing
