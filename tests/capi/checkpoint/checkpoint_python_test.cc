// Writes a table export and a sharded checkpoint (bf16 and fp32 tables, 2D mesh), and a
// checkpoint of FP8 tables (ckpt_fp8: E4M3 and E5M2 rows, 2D mesh), plus the expected values as
// raw little-endian fp32, for read_with_safetensors.py, which opens them with the Python
// `safetensors` package and decodes the FP8 rows itself. Runs as a normal test too (the files are
// checked to exist); SHARDREC_CHECKPOINT_PY_DIR names the output directory for the Python step.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/capi/checkpoint/checkpoint_test_util.h"

namespace shardrec::testing {
namespace {

void WriteFloats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(v.data()),
            static_cast<std::streamsize>(v.size() * sizeof(float)));
}

TEST(CheckpointPython, WritesExportAndCheckpointForPython) {
  const char* env = std::getenv("SHARDREC_CHECKPOINT_PY_DIR");
  const std::string dir = env && *env ? std::string(env) : FreshDir("python");
  std::filesystem::create_directories(dir);
  const Side side{4, 2, SHARDREC_SHARDING_COLUMN_WISE, 4, SHARDREC_DTYPE_BFLOAT16};
  const Scenario s = SideScenario(side, SHARDREC_OPTIMIZER_PARTIAL_ROWWISE_ADAM, 11);
  OnSide(side, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(side, s, r, c, m, 0, 2);
    ASSERT_EQ(SaveOn(c, m, dir + "/ckpt"), SHARDREC_OK) << shardrec_last_error();
    // The export is collective over the sharding group; one group writes it.
    int32_t group = 0;
    ASSERT_EQ(shardrec_mesh_coords(m, &group, nullptr, nullptr, nullptr), SHARDREC_OK);
    const Snap snap = TakeSnap(c, s);
    if (group == 0) {
      ASSERT_EQ(shardrec_checkpoint_export_table(c, "t1", (dir + "/t1.safetensors").c_str(), 1),
                SHARDREC_OK)
          << shardrec_last_error();
    }
    if (r == 0) {
      // Snapshot order per table: weights, momentum1 [rows, dim], momentum2 [rows].
      for (size_t t = 0; t < 3; ++t) {
        const std::string name = s.tables[t].name;
        WriteFloats(dir + "/" + name + ".weights.f32", snap.tensors[3 * t]);
        WriteFloats(dir + "/" + name + ".momentum1.f32", snap.tensors[3 * t + 1]);
        WriteFloats(dir + "/" + name + ".momentum2.f32", snap.tensors[3 * t + 2]);
      }
    }
  });
  EXPECT_TRUE(std::filesystem::exists(dir + "/t1.safetensors"));
  // 2 replicas x 2-way sharding: both replicas of each sharding rank take a share of the
  // writing, so all four ranks wrote a file (the Python step checks that no block is written
  // twice).
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/ckpt"))
    files += e.path().extension() == ".safetensors" ? 1 : 0;
  EXPECT_EQ(files, 4);
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt/manifest.json"));

  // FP8 tables (format version 3: each weight record holds the stored rows), row-wise on a mesh.
  const Side fp8{4, 2, SHARDREC_SHARDING_ROW_WISE, 4, SHARDREC_DTYPE_FP8_E4M3};
  Scenario s8 = SideScenario(fp8, SHARDREC_OPTIMIZER_SGD, 13);
  s8.tables[2].dtype = SHARDREC_DTYPE_FP8_E5M2;
  OnSide(fp8, s8, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(fp8, s8, r, c, m, 0, 2);
    ASSERT_EQ(SaveOn(c, m, dir + "/ckpt_fp8"), SHARDREC_OK) << shardrec_last_error();
    const Snap snap = TakeSnap(c, s8);
    if (r == 0) {
      for (size_t t = 0; t < 3; ++t)  // SGD: weights only
        WriteFloats(dir + "/fp8." + s8.tables[t].name + ".weights.f32", snap.tensors[t]);
    }
  });
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt_fp8/manifest.json"));
}

}  // namespace
}  // namespace shardrec::testing
