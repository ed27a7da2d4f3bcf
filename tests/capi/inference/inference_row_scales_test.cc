// shardrec_inference_row_scales: an int8 or int4 table's per-row scale and bias are those of the
// row-wise quantization of the trained fp32 rows (scale = (max - min) / (2^bits - 1), bias =
// min), on the handle and from a serving file; other storage types, bad indices and NULLs are
// refused without writing anything.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/capi/inference/inference_test_util.h"

namespace shardrec::testing {
namespace {

TEST(InferenceRowScales, AreTheRowWiseQuantizationOfTheTrainedRows) {
  Side side;
  side.world = 2;
  side.sharding = SHARDREC_SHARDING_ROW_WISE;
  const Trained t = TrainAndSave(side, SHARDREC_POOLING_SUM, false);
  for (const int32_t storage : {SHARDREC_SERVING_INT8, SHARDREC_SERVING_INT4}) {
    const float levels = storage == SHARDREC_SERVING_INT8 ? 255.0f : 15.0f;
    InferencePtr inf = Open(t.trained_dir, storage);
    ASSERT_TRUE(inf);
    const std::string file = t.trained_dir + "/scales.serving";
    ASSERT_EQ(shardrec_inference_save(inf.get(), file.c_str()), SHARDREC_OK)
        << shardrec_last_error();
    InferencePtr mapped = Open(file, SHARDREC_SERVING_AS_TRAINED);
    ASSERT_TRUE(mapped);
    for (size_t k = 0; k < t.s.tables.size(); ++k) {
      const RefTable& table = t.s.tables[k];
      std::vector<int64_t> ids(static_cast<size_t>(table.rows));
      for (int64_t i = 0; i < table.rows; ++i) ids[static_cast<size_t>(i)] = table.rows - 1 - i;
      for (shardrec_inference_t* h : {inf.get(), mapped.get()}) {
        std::vector<float> scales(ids.size(), -1.0f), biases(ids.size(), -1.0f);
        uint64_t version = 0;
        ASSERT_EQ(shardrec_inference_row_scales(h, table.name.c_str(), ids.data(), ids.size(),
                                                scales.data(), biases.data(), &version),
                  SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_EQ(version, 1u);
        bool some_scale = false;
        for (size_t i = 0; i < ids.size(); ++i) {
          const float* row = t.weights[k].data() + ids[i] * table.dim;
          const float lo = *std::min_element(row, row + table.dim);
          const float hi = *std::max_element(row, row + table.dim);
          EXPECT_EQ(scales[i], (hi - lo) / levels) << table.name << " row " << ids[i];
          EXPECT_EQ(biases[i], lo) << table.name << " row " << ids[i];
          some_scale = some_scale || scales[i] > 0.0f;
        }
        EXPECT_TRUE(some_scale) << table.name;
        // Biases are optional.
        ASSERT_EQ(shardrec_inference_row_scales(h, table.name.c_str(), ids.data(), 1, scales.data(),
                                                nullptr, nullptr),
                  SHARDREC_OK)
            << shardrec_last_error();
      }
    }
  }
}

TEST(InferenceRowScales, RefusesWithoutWriting) {
  Side side;
  side.world = 1;
  const Trained t = TrainAndSave(side, SHARDREC_POOLING_SUM, false);
  const RefTable& table = t.s.tables[0];
  InferencePtr fp32 = Open(t.trained_dir, SHARDREC_SERVING_FP32);
  InferencePtr int8 = Open(t.trained_dir, SHARDREC_SERVING_INT8);
  ASSERT_TRUE(fp32 && int8);
  const int64_t ids[2] = {0, table.rows};  // the second is one past the last row
  float scales[2] = {-1.0f, -1.0f};
  EXPECT_EQ(shardrec_inference_row_scales(fp32.get(), table.name.c_str(), ids, 1, scales, nullptr,
                                          nullptr),
            SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("fp32"), std::string::npos)
      << shardrec_last_error();
  EXPECT_EQ(shardrec_inference_row_scales(int8.get(), table.name.c_str(), ids, 2, scales, nullptr,
                                          nullptr),
            SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("ids[1]"), std::string::npos)
      << shardrec_last_error();
  EXPECT_EQ(scales[0], -1.0f) << "a refused call wrote a scale";
  EXPECT_EQ(shardrec_inference_row_scales(int8.get(), "nope", ids, 1, scales, nullptr, nullptr),
            SHARDREC_ENOTFOUND);
  EXPECT_EQ(shardrec_inference_row_scales(int8.get(), table.name.c_str(), nullptr, 1, scales,
                                          nullptr, nullptr),
            SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_inference_row_scales(int8.get(), table.name.c_str(), ids, 1, nullptr, nullptr,
                                          nullptr),
            SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_inference_row_scales(int8.get(), nullptr, ids, 1, scales, nullptr, nullptr),
            SHARDREC_EINVAL);
  EXPECT_EQ(
      shardrec_inference_row_scales(nullptr, table.name.c_str(), ids, 1, scales, nullptr, nullptr),
      SHARDREC_EINVAL);
  EXPECT_EQ(scales[0], -1.0f);
  // No ids: nothing to read, NULL buffers allowed.
  EXPECT_EQ(shardrec_inference_row_scales(int8.get(), table.name.c_str(), nullptr, 0, nullptr,
                                          nullptr, nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
}

}  // namespace
}  // namespace shardrec::testing
