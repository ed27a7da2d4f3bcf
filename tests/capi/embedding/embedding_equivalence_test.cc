// Sharded training through the C API equals the unsharded reference: every sharding type x
// every optimizer x SUM/MEAN/NONE x weighted/unweighted, at world 2 and 4 (threads as ranks);
// at world 3 with row-wise Adagrad.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {
namespace {

const char* kTypeNames[] = {"DP", "TW", "RW", "CW", "TWRW", "TWCW", "GRID"};
const char* kOptNames[] = {"Sgd", "Adagrad", "RowWiseAdagrad", "Adam", "PartialRowWiseAdam",
                           "Lamb"};
const char* kPoolNames[] = {"Sum", "Mean", "None"};

// (world, sharding type, optimizer, pooling, weighted)
using Param = std::tuple<int32_t, int32_t, int32_t, int32_t, bool>;

class EmbeddingEquivalence : public ::testing::TestWithParam<Param> {};

TEST_P(EmbeddingEquivalence, MatchesUnshardedReference) {
  const auto [world, type, opt, pooling, weighted] = GetParam();
  Scenario s = StandardScenario(world, type, pooling);
  if (world % s.ranks_per_node != 0) s.ranks_per_node = world;  // one node of 3
  s.optimizer.type = opt;
  s.optimizer.lr = opt == 0 ? 0.1f : 0.02f;
  s.weighted = weighted;
  RunEquivalence(s);
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto [world, type, opt, pooling, weighted] = info.param;
  return std::string("W") + std::to_string(world) + "_" + kTypeNames[type] + "_" + kOptNames[opt] +
         "_" + kPoolNames[pooling] + (weighted ? "_Weighted" : "");
}

INSTANTIATE_TEST_SUITE_P(AllTypes, EmbeddingEquivalence,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Range(0, 7),
                                            ::testing::Range(0, 6), ::testing::Range(0, 3),
                                            ::testing::Bool()),
                         ParamName);

// World 3: a rank whose own block sits between its peers' (neither first nor last), with ids
// that stay on their rank and ids that travel in the same batch, under every sharding type.
INSTANTIATE_TEST_SUITE_P(OddWorld, EmbeddingEquivalence,
                         ::testing::Combine(::testing::Values(3), ::testing::Range(0, 7),
                                            ::testing::Values(2), ::testing::Range(0, 3),
                                            ::testing::Bool()),
                         ParamName);

}  // namespace
}  // namespace shardrec::testing
