// A failed load changes nothing, by default: one corrupt byte in each kind of record (weights,
// each optimizer state, dense tensors), in the step counter, a truncated and a missing rank
// file, at worlds 1, 2 and 4: every rank returns the error and the weights, every optimizer
// state, the step counter and the dense tensors stay bit-identical on every rank. (Read faults
// in the middle of a load are injected on the in-memory file system: tests/impl/checkpoint.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "tests/capi/checkpoint/checkpoint_test_util.h"

namespace shardrec::testing {
namespace {

namespace fs = std::filesystem;

std::string RankFile(const std::string& dir, int rank) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors" &&
        name.find("-rank" + std::to_string(rank) + ".") != std::string::npos)
      return e.path().string();
  }
  return "";
}

// Flips one byte in the middle of the data of the first tensor of `path` whose key contains
// `needle`; false when there is none.
bool FlipByteOf(const std::string& path, const std::string& needle) {
  std::string bytes = Slurp(path);
  if (bytes.size() < 8) return false;
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i)
    len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, len));
  for (const auto& [key, t] : header.items()) {
    if (key == "__metadata__" || key.find(needle) == std::string::npos) continue;
    const uint64_t a = t.at("data_offsets").at(0).get<uint64_t>();
    const uint64_t b = t.at("data_offsets").at(1).get<uint64_t>();
    if (a == b) continue;
    bytes[8 + len + (a + b) / 2] ^= 0x10;
    Spit(path, bytes);
    return true;
  }
  return false;
}

// One way to damage a copy of the checkpoint, and what the message must name.
struct Damage {
  std::string name;
  std::function<bool(const std::string& dir, int world, std::string* file)> apply;
};

std::vector<Damage> Damages() {
  auto record = [](const std::string& needle, bool on_rank0) {
    return [needle, on_rank0](const std::string& dir, int world, std::string* file) {
      *file = RankFile(dir, on_rank0 ? 0 : world - 1);
      return !file->empty() && FlipByteOf(*file, needle);
    };
  };
  return {
      {"weights", record("/weights/", false)},
      {"momentum1", record("/momentum1/", false)},
      {"momentum2", record("/momentum2/", false)},
      {"dense", record("dense/", true)},
      {"step counter",
       [](const std::string& dir, int, std::string* file) {
         *file = "manifest.json";
         std::string text = Slurp(dir + "/manifest.json");
         const size_t at = text.find("\"step\": ");
         if (at == std::string::npos) return false;
         text[at + 8] ^= 0x40;  // a digit becomes a letter
         Spit(dir + "/manifest.json", text);
         return true;
       }},
      {"truncated file",
       [](const std::string& dir, int world, std::string* file) {
         *file = RankFile(dir, world - 1);
         const std::string bytes = Slurp(*file);
         Spit(*file, bytes.substr(0, bytes.size() - bytes.size() / 3));
         return true;
       }},
      {"missing file",
       [](const std::string& dir, int world, std::string* file) {
         *file = RankFile(dir, world - 1);
         return fs::remove(*file);
       }},
  };
}

TEST(CheckpointAtomic, FailedLoadChangesNothingOnAnyRank) {
  for (int32_t world : {1, 2, 4}) {
    const Side side{world, 0, SHARDREC_SHARDING_ROW_WISE};
    // Element-wise and row-wise optimizer state: both kinds of state records.
    const Scenario s = SideScenario(side, SHARDREC_OPTIMIZER_PARTIAL_ROWWISE_ADAM, 11);
    std::vector<float> dense(40), dense_state(9);
    auto dense_views = [&] {
      return std::vector<shardrec_dense_tensor_t>{
          {"mlp.w", dense.data(), dense.size()},
          {"mlp.w.m", dense_state.data(), dense_state.size()}};
    };
    for (size_t i = 0; i < dense.size(); ++i) dense[i] = 0.5f * static_cast<float>(i);
    for (size_t i = 0; i < dense_state.size(); ++i)
      dense_state[i] = 1.0f / static_cast<float>(i + 1);
    const std::vector<float> saved_dense = dense, saved_state = dense_state;
    const std::string base = FreshDir("atomic");
    Snap saved;
    OnSide(side, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
      TrainSteps(side, s, r, c, m, 0, 2);
      const auto views = dense_views();
      shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
      o.dense = views.data();
      o.num_dense = views.size();
      ASSERT_EQ(SaveOn(c, m, base, &o), SHARDREC_OK) << shardrec_last_error();
      Snap snap = TakeSnap(c, s);
      if (r == 0) saved = snap;
    });
    // Every damaged copy is made before the ranks start, so no rank reads a half-made one.
    std::vector<std::pair<std::string, std::string>> cases;  // (dir, file the message names)
    for (const Damage& d : Damages()) {
      const std::string dir = FreshDir("atomic_" + std::to_string(world));
      fs::copy(base, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
      std::string file;
      ASSERT_TRUE(d.apply(dir, world, &file)) << d.name << " at world " << world;
      cases.push_back({dir, fs::path(file).filename().string()});
    }
    const std::vector<std::string> names = [] {
      std::vector<std::string> n;
      for (const Damage& d : Damages()) n.push_back(d.name);
      return n;
    }();
    OnSide(side, s, [&](int, shardrec_embedding_t* c, shardrec_mesh_t* m) {
      // Per rank: its own dense buffers, different from the saved ones.
      std::vector<float> w(dense.size(), -7.0f), st(dense_state.size(), 3.0f);
      const std::vector<shardrec_dense_tensor_t> views = {{"mlp.w", w.data(), w.size()},
                                                          {"mlp.w.m", st.data(), st.size()}};
      shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
      o.dense = views.data();
      o.num_dense = views.size();
      std::string why;
      for (size_t k = 0; k < cases.size(); ++k) {
        const std::string what = names[k] + " at world " + std::to_string(world);
        const Snap before = TakeSnap(c, s);
        EXPECT_FALSE(BitEqual(before, saved, &why)) << "the target must differ from the save";
        EXPECT_EQ(LoadOn(c, m, cases[k].first, &o), SHARDREC_ECORRUPT) << what;
        const std::string msg = shardrec_last_error();
        EXPECT_NE(msg.find(cases[k].second), std::string::npos) << what << ": " << msg;
        EXPECT_TRUE(BitEqual(TakeSnap(c, s), before, &why)) << what << " changed: " << why;
        EXPECT_EQ(w, std::vector<float>(dense.size(), -7.0f)) << what;
        EXPECT_EQ(st, std::vector<float>(dense_state.size(), 3.0f)) << what;
      }
      // The undamaged checkpoint still lands exactly (the damage was what failed).
      ASSERT_EQ(LoadOn(c, m, base, &o), SHARDREC_OK) << shardrec_last_error();
      EXPECT_TRUE(BitEqual(TakeSnap(c, s), saved, &why)) << why;
      EXPECT_EQ(w, saved_dense);
      EXPECT_EQ(st, saved_state);
    });
  }
}

// A save killed mid-way leaves files no manifest names (docs/checkpoint-format.md): a rank
// file's temporary, a whole rank file of a generation never published, the manifest's temporary.
// The next save into the directory removes every such file, whatever its generation or rank (a
// rank of a larger world included), and nothing of the user's that only looks alike; the
// checkpoint it publishes loads.
TEST(CheckpointAtomic, ASaveRemovesWhatKilledSavesLeft) {
  const Side side{2, 0, SHARDREC_SHARDING_ROW_WISE};
  const Scenario s = SideScenario(side, SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD, 5);
  const std::string dir = FreshDir("strays");
  Snap saved;
  OnSide(side, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(side, s, r, c, m, 0, 1);
    ASSERT_EQ(SaveOn(c, m, dir, nullptr), SHARDREC_OK) << shardrec_last_error();
  });
  const std::vector<std::string> strays = {"g2-rank1.safetensors.tmp", "g7-rank3.safetensors",
                                           "g2-rank5.safetensors.tmp", "manifest.json.tmp.4242.7"};
  const std::vector<std::string> kept = {"g2-rank1.safetensors.tmp.mine", "manifest.json.tmp.x",
                                         "notes.tmp", "g2-rank1.safetensors.bak"};
  for (const std::string& n : strays) Spit(dir + "/" + n, "partial");
  for (const std::string& n : kept) Spit(dir + "/" + n, "mine");
  OnSide(side, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(side, s, r, c, m, 1, 2);
    ASSERT_EQ(SaveOn(c, m, dir, nullptr), SHARDREC_OK) << shardrec_last_error();
    const Snap snap = TakeSnap(c, s);
    if (r == 0) saved = snap;
  });
  for (const std::string& n : strays) EXPECT_FALSE(fs::exists(dir + "/" + n)) << n;
  for (const std::string& n : kept) EXPECT_EQ(Slurp(dir + "/" + n), "mine") << n;
  EXPECT_FALSE(RankFile(dir, 0).empty());
  EXPECT_FALSE(RankFile(dir, 1).empty());
  OnSide(side, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    ASSERT_EQ(LoadOn(c, m, dir, nullptr), SHARDREC_OK) << shardrec_last_error();
    std::string why;
    const Snap loaded = TakeSnap(c, s);  // collective: on every rank
    if (r == 0) EXPECT_TRUE(BitEqual(loaded, saved, &why)) << why;
  });
}

// allow_partial_load streams into place: the same corruption is still reported on every rank,
// and a version-1 options struct (which has no such field) loads all-or-nothing.
TEST(CheckpointAtomic, AllowPartialLoadReportsAndVersionOneStaysAtomic) {
  const Side side{2, 0, SHARDREC_SHARDING_ROW_WISE};
  const Scenario s = SideScenario(side, SHARDREC_OPTIMIZER_ADAM, 11);
  const std::string dir = FreshDir("partial");
  OnSide(side, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(side, s, r, c, m, 0, 2);
    ASSERT_EQ(SaveOn(c, m, dir), SHARDREC_OK) << shardrec_last_error();
  });
  ASSERT_TRUE(FlipByteOf(RankFile(dir, 1), "/weights/"));
  OnSide(side, s, [&](int, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    const Snap before = TakeSnap(c, s);
    shardrec_checkpoint_options_t v1;
    ASSERT_EQ(shardrec_checkpoint_options_init(&v1, 1), SHARDREC_OK);
    v1.allow_partial_load = 1;  // past the end of a version-1 struct: never read
    EXPECT_EQ(LoadOn(c, m, dir, &v1), SHARDREC_ECORRUPT);
    std::string why;
    EXPECT_TRUE(BitEqual(TakeSnap(c, s), before, &why)) << why;
    shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
    EXPECT_EQ(o.allow_partial_load, 0);
    o.allow_partial_load = 1;
    EXPECT_EQ(LoadOn(c, m, dir, &o), SHARDREC_ECORRUPT);
    EXPECT_NE(std::string(shardrec_last_error()).find("checksum"), std::string::npos)
        << shardrec_last_error();
    // Unlike the default's refusal, this one may have changed the collection, and says so.
    EXPECT_NE(std::string(shardrec_last_error()).find("partly loaded"), std::string::npos)
        << shardrec_last_error();
  });
}

}  // namespace
}  // namespace shardrec::testing
