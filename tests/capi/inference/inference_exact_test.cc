// An inference handle opened from checkpoints of every sharding type, 1D and 2D, at worlds 1-4
// answers like the training forward: bit for bit in fp32 (and in a 16-bit table's own dtype),
// within each storage type's stated per-element bound in fp16, bf16, int8 and int4, and the
// same again from a serving file written by the handle.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/capi/inference/inference_test_util.h"

namespace shardrec::testing {
namespace {

struct Case {
  Side side;
  int32_t pooling;
  bool weighted;
  int32_t max_bag = 4;
};

std::string CaseName(const Case& c) {
  static const char* kPool[] = {"SUM", "MEAN", "NONE"};
  return SideName(c.side) + "/" + kPool[c.pooling] + (c.weighted ? "/weighted" : "");
}

// Row-split types sum a bag's rows on several ranks and add the partial sums, so only exact
// (dyadic) values are order-independent there; every other type sums each bag in id order.
bool WholeBags(const Case& c) {
  const int32_t t = c.side.sharding;
  return c.pooling == SHARDREC_POOLING_NONE || t == SHARDREC_SHARDING_DATA_PARALLEL ||
         t == SHARDREC_SHARDING_TABLE_WISE || t == SHARDREC_SHARDING_COLUMN_WISE ||
         t == SHARDREC_SHARDING_TABLE_COLUMN_WISE;
}

void ExpectBitEqual(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
}

void ExpectWithin(const std::vector<float>& got, const std::vector<float>& want, float rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), rtol * std::fabs(want[i]) + 1e-6f)
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
}

void RunCase(const Case& c) {
  SCOPED_TRACE(CaseName(c));
  const Trained t = TrainAndSave(c.side, c.pooling, c.weighted, c.max_bag);
  const int32_t F = t.s.num_features;
  // AS_TRAINED is the checkpoint's own dtype; FP32 widens it exactly.
  for (int32_t storage : {SHARDREC_SERVING_AS_TRAINED, SHARDREC_SERVING_FP32}) {
    if (storage == SHARDREC_SERVING_FP32 && c.side.dtype != SHARDREC_DTYPE_FLOAT32) continue;
    InferencePtr dy = Open(t.dyadic_dir, storage);
    InferencePtr tr = Open(t.trained_dir, storage);
    ASSERT_TRUE(dy && tr);
    for (int32_t r = 0; r < c.side.world; ++r) {
      const std::string what = "rank " + std::to_string(r);
      ExpectBitEqual(Lookup(dy.get(), t.dyadic_batches[r], F), t.dyadic_out[r], what + " dyadic");
      if (WholeBags(c)) {
        ExpectBitEqual(Lookup(tr.get(), t.batches[r], F), t.trained_out[r], what + " trained");
      } else {
        ExpectWithin(Lookup(tr.get(), t.batches[r], F), t.trained_out[r], 1e-5f, what);
      }
    }
  }
  if (c.side.dtype != SHARDREC_DTYPE_FLOAT32) return;
  // Every storage type within its bound, from the checkpoint and from a serving file.
  for (int32_t storage : {SHARDREC_SERVING_FP32, SHARDREC_SERVING_FP16, SHARDREC_SERVING_BF16,
                          SHARDREC_SERVING_INT8, SHARDREC_SERVING_INT4}) {
    InferencePtr inf = Open(t.trained_dir, storage);
    ASSERT_TRUE(inf);
    const std::string file = t.trained_dir + "/model.serving";
    ASSERT_EQ(shardrec_inference_save(inf.get(), file.c_str()), SHARDREC_OK)
        << shardrec_last_error();
    InferencePtr mapped = Open(file, SHARDREC_SERVING_AS_TRAINED);
    ASSERT_TRUE(mapped);
    int32_t stored = -1;
    ASSERT_EQ(shardrec_inference_table_info(mapped.get(), 0, nullptr, nullptr, nullptr, &stored),
              SHARDREC_OK);
    EXPECT_EQ(stored, storage);
    for (int32_t r = 0; r < c.side.world; ++r) {
      std::vector<double> exact, bound;
      ExactAndBound(t.s, t.weights, t.batches[r], storage, &exact, &bound);
      const std::vector<float> got = Lookup(inf.get(), t.batches[r], F);
      ExpectBitEqual(Lookup(mapped.get(), t.batches[r], F), got, "serving file");
      ASSERT_EQ(got.size(), exact.size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_LE(std::fabs(got[i] - exact[i]), bound[i])
            << "storage " << storage << " rank " << r << " element " << i << ": " << got[i]
            << " vs exact " << exact[i];
        worst = std::max(worst, std::fabs(got[i] - exact[i]));
      }
      // int4 keeps 16 levels per row: it must show an error, or nothing was quantized.
      if (storage == SHARDREC_SERVING_INT4 && !got.empty()) {
        EXPECT_GT(worst, 0.0);
      }
    }
  }
}

const int32_t kTypes[] = {SHARDREC_SHARDING_DATA_PARALLEL,
                          SHARDREC_SHARDING_TABLE_WISE,
                          SHARDREC_SHARDING_ROW_WISE,
                          SHARDREC_SHARDING_COLUMN_WISE,
                          SHARDREC_SHARDING_TABLE_ROW_WISE,
                          SHARDREC_SHARDING_TABLE_COLUMN_WISE,
                          SHARDREC_SHARDING_GRID};

// The pooling kinds take turns over the sharding types, so each kind meets every type over the
// worlds without running every combination.
Case Turn(int32_t world, int32_t shard_size, size_t i) {
  Case c;
  c.side.world = world;
  c.side.shard_size = shard_size;
  c.side.sharding = kTypes[i % 7];
  c.side.min_partition = 4;
  c.pooling = static_cast<int32_t>((i + world) % 3);
  c.weighted = (i + world) % 2 == 0;
  return c;
}

TEST(InferenceExact, EverySharding1DAtWorldsOneToFour) {
  for (int32_t world : {1, 2, 3, 4})
    for (size_t i = 0; i < 7; ++i) {
      if (world == 1 && i > 1) continue;  // one rank: every type is a whole table
      // The node-local types need whole nodes (two ranks each).
      if (world == 3 && kTypes[i % 7] >= SHARDREC_SHARDING_TABLE_ROW_WISE) continue;
      RunCase(Turn(world, 0, i));
      if (::testing::Test::HasFatalFailure()) return;
    }
}

TEST(InferenceExact, EverySharding2D) {
  for (size_t i = 0; i < 7; ++i) {
    RunCase(Turn(4, 2, i));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(InferenceExact, SixteenBitTablesServeAsTrainedBitExact) {
  for (int32_t dtype : {SHARDREC_DTYPE_FLOAT16, SHARDREC_DTYPE_BFLOAT16}) {
    Case c;
    c.side.world = 2;
    c.side.sharding = SHARDREC_SHARDING_TABLE_WISE;
    c.side.dtype = dtype;
    c.pooling = SHARDREC_POOLING_SUM;
    c.weighted = true;
    RunCase(c);
  }
}

// Bags longer than the lookup's 64-row chunks continue each sum across chunks in id order.
TEST(InferenceExact, LongBags) {
  for (int32_t pooling : {SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN}) {
    Case c;
    c.side.world = 2;
    c.side.sharding = SHARDREC_SHARDING_COLUMN_WISE;
    c.pooling = pooling;
    c.weighted = pooling == SHARDREC_POOLING_SUM;
    c.max_bag = 300;
    RunCase(c);
  }
}

}  // namespace
}  // namespace shardrec::testing
