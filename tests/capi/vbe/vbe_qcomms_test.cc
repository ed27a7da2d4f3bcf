// VBE batches (docs/variable-batch.md) with quantized communication beyond capi_vbe_test's fp16
// forward / bf16 backward: the FP8 wire encodings (32-value blocks sharing a power-of-two scale)
// and bf16 forward / fp16 backward. Where every bag is read once (no inverse indices, or
// increasing injective ones) the padded batch returns the expanded batch's rows in the same order,
// so each message (and each FP8 block) is the same and the VBE collection equals the expanded
// batch's collection with the same encodings bit for bit: outputs, weights and states. Bags read
// several times are sent once by VBE, so the blocks differ; that case is not bounded by a test.
#include <gtest/gtest.h>

#include <string>

#include "tests/capi/vbe/vbe_test_util.h"

namespace shardrec::testing {
namespace {

void RunEncoded(int32_t world, int32_t sharding, int32_t pooling, VbeMode mode, int32_t fwd,
                int32_t bwd) {
  SCOPED_TRACE("world " + std::to_string(world) + " sharding " + std::to_string(sharding) +
               " pooling " + std::to_string(pooling) + " " + VbeModeName(mode) + " encodings " +
               std::to_string(fwd) + "/" + std::to_string(bwd));
  Scenario s = StandardScenario(world, sharding, pooling);
  s.optimizer.type = 2;
  s.optimizer.lr = 0.05f;
  s.max_bag = 4;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  VbeRunOptions o;
  o.mode = mode;
  o.check_reference = false;  // the encodings' distance to fp32 is the qcomms tests' to bound
  o.options = [fwd, bwd](shardrec_embedding_options_t* eo) {
    eo->forward_comm_encoding = fwd;
    eo->backward_comm_encoding = bwd;
  };
  RunVbeEquivalence(s, plan.get(), o);
}

TEST(VbeQuantizedComm, Fp8MatchesTheExpandedBatch) {
  for (int32_t world : {2, 4})
    for (int32_t sharding : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_TABLE_WISE,
                             SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_GRID})
      for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kOnce})
        RunEncoded(world, sharding, SHARDREC_POOLING_SUM, mode, SHARDREC_COMM_ENCODING_FP8_E4M3,
                   SHARDREC_COMM_ENCODING_FP8_E5M2);
}

TEST(VbeQuantizedComm, Bf16ForwardFp16BackwardMatchesTheExpandedBatch) {
  for (int32_t world : {1, 2, 4})
    for (int32_t pooling : {SHARDREC_POOLING_MEAN, SHARDREC_POOLING_NONE})
      for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kOnce})
        RunEncoded(world, SHARDREC_SHARDING_COLUMN_WISE, pooling, mode, SHARDREC_COMM_ENCODING_BF16,
                   SHARDREC_COMM_ENCODING_FP16);
}

}  // namespace
}  // namespace shardrec::testing
