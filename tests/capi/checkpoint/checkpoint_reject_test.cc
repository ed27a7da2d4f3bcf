// Checkpoints that must be refused (missing, corrupt, truncated, mismatched) with the right
// status and a message naming the file and record or the table, without changing the
// collection; dense tensors; bad arguments; table export/import.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include "tests/capi/checkpoint/checkpoint_test_util.h"

namespace shardrec::testing {
namespace {

namespace fs = std::filesystem;

const Side kSide{2, 0, SHARDREC_SHARDING_ROW_WISE};

// Saves a trained 2-rank Adam model into a fresh directory; returns it.
std::string SavedCheckpoint(const Scenario& s, const shardrec_checkpoint_options_t* o = nullptr) {
  const std::string dir = FreshDir("reject");
  OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(kSide, s, r, c, m, 0, 2);
    EXPECT_EQ(SaveOn(c, m, dir, o), SHARDREC_OK) << shardrec_last_error();
  });
  return dir;
}

std::vector<std::string> RankFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Loads `dir` into a fresh collection of `s` on kSide; expects `code` on every rank with every
// `needles` in the message, and the collection unchanged when `unchanged`.
void ExpectRejected(const Scenario& s, const std::string& dir, shardrec_status_t code,
                    const std::vector<std::string>& needles, bool unchanged = true,
                    const shardrec_checkpoint_options_t* o = nullptr) {
  OnSide(kSide, s, [&](int, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    const Snap before = TakeSnap(c, s);
    EXPECT_EQ(LoadOn(c, m, dir, o), code) << shardrec_last_error();
    const std::string msg = shardrec_last_error();
    for (const std::string& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
    if (unchanged) {
      std::string why;
      EXPECT_TRUE(BitEqual(TakeSnap(c, s), before, &why)) << "state changed: " << why;
    }
  });
}

Scenario AdamScenario() { return SideScenario(kSide, SHARDREC_OPTIMIZER_ADAM, 11); }

// Flips a bit inside the last record's data of rank 1's file in `dir`; returns that file.
std::string CorruptLastRecord(const std::string& dir) {
  const auto files = RankFiles(dir);
  EXPECT_EQ(files.size(), 2u);
  std::string bytes = Slurp(files.back());
  bytes[bytes.size() - 3] ^= 0x40;
  Spit(files.back(), bytes);
  return files.back();
}

TEST(CheckpointReject, MissingCheckpointIsNotFound) {
  ExpectRejected(AdamScenario(), FreshDir("empty"), SHARDREC_ENOTFOUND, {"manifest.json"});
}

TEST(CheckpointReject, CorruptRecordNamesFileAndRecord) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  const std::string file = CorruptLastRecord(dir);
  // Found while reading into staging (the file's structure is intact): nothing changes.
  ExpectRejected(s, dir, SHARDREC_ECORRUPT,
                 {fs::path(file).filename().string(), "record", "checksum"});
}

// A manifest that quotes bytes which are not UTF-8 (a JSON parser's "last read") gives a message
// that is still well-formed UTF-8, the bytes as \xNN, which every binding can decode.
TEST(CheckpointReject, AMessageQuotingBrokenUtf8IsStillUtf8) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  Spit(dir + "/manifest.json", std::string("{\"key\"\xe6\xff\xc3(", 10));
  ExpectRejected(s, dir, SHARDREC_ECORRUPT, {"manifest.json", "last read: '\"key\"\\xE6'"});
  // Every byte sequence of the message is well-formed UTF-8 (ASCII here, escapes included).
  OnSide(kSide, s, [&](int, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    EXPECT_EQ(LoadOn(c, m, dir, nullptr), SHARDREC_ECORRUPT);
    for (const char ch : std::string(shardrec_last_error()))
      EXPECT_LT(static_cast<unsigned char>(ch), 0x80) << shardrec_last_error();
  });
}

// verify_first is still accepted (it only matters with allow_partial_load).
TEST(CheckpointReject, CorruptRecordWithVerifyFirstChangesNothing) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  const std::string file = CorruptLastRecord(dir);
  shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  o.verify_first = 1;
  o.allow_partial_load = 1;
  ExpectRejected(s, dir, SHARDREC_ECORRUPT,
                 {fs::path(file).filename().string(), "record", "checksum"}, true, &o);
}

// allow_partial_load may leave the collection partly loaded when a chunk is corrupt, but never
// holding that chunk's bytes: its chunks used to be read straight into the collection and
// verified there. Every element holds its value from before the load or the checkpoint's.
TEST(CheckpointReject, APartialLoadNeverKeepsACorruptChunksBytes) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  Snap saved;
  OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    ASSERT_EQ(LoadOn(c, m, dir), SHARDREC_OK) << shardrec_last_error();
    const Snap got = TakeSnap(c, s);
    if (r == 0) saved = got;
  });
  CorruptLastRecord(dir);
  shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  o.allow_partial_load = 1;
  OnSide(kSide, s, [&](int, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    const Snap before = TakeSnap(c, s);
    EXPECT_EQ(LoadOn(c, m, dir, &o), SHARDREC_ECORRUPT);
    const Snap after = TakeSnap(c, s);
    ASSERT_EQ(after.tensors.size(), saved.tensors.size());
    size_t foreign = 0;
    for (size_t t = 0; t < after.tensors.size(); ++t) {
      for (size_t i = 0; i < after.tensors[t].size(); ++i) {
        const float v = after.tensors[t][i];
        if (std::memcmp(&v, &before.tensors[t][i], 4) != 0 &&
            std::memcmp(&v, &saved.tensors[t][i], 4) != 0)
          ++foreign;
      }
    }
    EXPECT_EQ(foreign, 0u) << "elements hold neither the old value nor the checkpoint's";
  });
}

TEST(CheckpointReject, TruncatedFileIsRejectedBeforeAnyChange) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  const auto files = RankFiles(dir);
  ASSERT_FALSE(files.empty());
  std::string bytes = Slurp(files[0]);
  Spit(files[0], bytes.substr(0, bytes.size() - 100));
  ExpectRejected(s, dir, SHARDREC_ECORRUPT, {fs::path(files[0]).filename().string(), "truncated"});
}

TEST(CheckpointReject, MissingRankFileIsRejected) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  const auto files = RankFiles(dir);
  fs::remove(files[0]);
  ExpectRejected(s, dir, SHARDREC_ECORRUPT, {fs::path(files[0]).filename().string(), "missing"});
}

TEST(CheckpointReject, ADirectoryInPlaceOfARankFileIsNamedSo) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  const auto files = RankFiles(dir);
  fs::remove(files[0]);
  fs::create_directory(files[0]);
  ExpectRejected(s, dir, SHARDREC_ECORRUPT,
                 {fs::path(files[0]).filename().string(), "not a regular file", "a directory"});
}

// A FIFO where a rank file or the manifest should be: opening it for reading waited for a writer
// for ever (and past an abort); it is refused like any other non-regular file.
TEST(CheckpointReject, AFifoInPlaceOfARankFileOrTheManifestIsRefusedAtOnce) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  const auto files = RankFiles(dir);
  fs::remove(files[1]);
  ASSERT_EQ(::mkfifo(files[1].c_str(), 0644), 0);
  ExpectRejected(s, dir, SHARDREC_ECORRUPT,
                 {fs::path(files[1]).filename().string(), "not a regular file", "pipe"});
  const std::string other = SavedCheckpoint(s);
  fs::remove(other + "/manifest.json");
  ASSERT_EQ(::mkfifo((other + "/manifest.json").c_str(), 0644), 0);
  ExpectRejected(s, other, SHARDREC_ECORRUPT, {"manifest.json", "not a regular file"});
}

// Ranks given different directories: each read a valid checkpoint, every call returned OK and
// the collection became a mix of the two. The ranks now compare what they read.
TEST(CheckpointReject, RanksLoadingDifferentCheckpointsAreRefused) {
  const Scenario s = AdamScenario();
  const std::string first = SavedCheckpoint(s);
  std::string second;
  {
    second = FreshDir("reject");
    OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
      TrainSteps(kSide, s, r, c, m, 0, 3);  // one step further than `first`
      EXPECT_EQ(SaveOn(c, m, second, nullptr), SHARDREC_OK) << shardrec_last_error();
    });
  }
  OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    const Snap before = TakeSnap(c, s);
    EXPECT_EQ(LoadOn(c, m, r == 0 ? first : second, nullptr), SHARDREC_EINVAL)
        << shardrec_last_error();
    EXPECT_NE(std::string(shardrec_last_error()).find("different checkpoints"), std::string::npos)
        << shardrec_last_error();
    std::string why;
    EXPECT_TRUE(BitEqual(TakeSnap(c, s), before, &why)) << "state changed: " << why;
    EXPECT_EQ(LoadOn(c, m, first, nullptr), SHARDREC_OK) << shardrec_last_error();
  });
}

// Ranks given different directories for a save (or one path that is not on a file system every
// rank shares): every rank returned OK, rank 0 published a manifest naming rank 1's file, which
// was not in its directory, and removed the previous checkpoint there, leaving nothing loadable.
// Rank 0 now finds every rank's file first: every rank fails, and the previous checkpoint stays.
TEST(CheckpointReject, RanksSavingToDifferentDirectoriesAreRefused) {
  const Scenario s = AdamScenario();
  const std::string first = SavedCheckpoint(s);
  const std::string manifest = Slurp(first + "/manifest.json");
  const std::string other = FreshDir("reject");
  OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(kSide, s, r, c, m, 0, 3);
    EXPECT_EQ(SaveOn(c, m, r == 0 ? first : other, nullptr), SHARDREC_EINVAL)
        << "rank " << r << ": " << shardrec_last_error();
    const std::string msg = shardrec_last_error();
    for (const char* n : {"rank 1's checkpoint file", "is not in rank 0's directory",
                          "shared by every rank", "untouched"})
      EXPECT_NE(msg.find(n), std::string::npos) << "rank " << r << ": " << msg;
  });
  EXPECT_EQ(Slurp(first + "/manifest.json"), manifest) << "the previous manifest was replaced";
  OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    EXPECT_EQ(LoadOn(c, m, first, nullptr), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
  });
}

// A manifest whose records say momentum2 where their keys say momentum1 and the reverse (signed
// again, so its checksum holds) loaded each Adam state into the other's place. A record's
// fields must now be those its key names.
TEST(CheckpointReject, ARecordWhoseFieldsDisagreeWithItsKeyIsCorrupt) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  int swapped = 0;
  EditManifest(dir, [&](nlohmann::json& m) {
    for (auto& f : m["files"])
      for (auto& r : f["records"]) {
        if (r["tensor"] == "momentum1") {
          r["tensor"] = "momentum2";
        } else if (r["tensor"] == "momentum2") {
          r["tensor"] = "momentum1";
        } else {
          continue;
        }
        ++swapped;
      }
  });
  ASSERT_GT(swapped, 0);
  ExpectRejected(s, dir, SHARDREC_ECORRUPT, {"momentum1", "whose key is"});
  // Another table's name, and another row offset (0 for a block that starts further down), the
  // same way.
  for (const std::string field : {"table", "offsets"}) {
    const std::string other = SavedCheckpoint(s);
    bool edited = false;
    EditManifest(other, [&](nlohmann::json& m) {
      for (auto& f : m["files"])
        for (auto& r : f["records"]) {
          if (edited || r["table"] == "") continue;
          if (field == "table") {
            r["table"] = r["table"] == "t0" ? "t1" : "t0";
          } else if (r["offsets"][0] != 0) {
            r["offsets"][0] = 0;
          } else {
            continue;
          }
          edited = true;
        }
    });
    ASSERT_TRUE(edited) << field;
    ExpectRejected(s, other, SHARDREC_ECORRUPT, {"whose key is"});
  }
}

// A rank file whose safetensors header gives a record another shape than the manifest (same
// bytes, dims swapped) was loaded as if it matched.
TEST(CheckpointReject, AHeaderShapeOtherThanTheManifestsIsCorrupt) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  const auto files = RankFiles(dir);
  std::string bytes = Slurp(files[0]);
  const size_t at = bytes.find("\"shape\":[");
  ASSERT_NE(at, std::string::npos);
  const size_t open = at + 9, comma = bytes.find(',', open), close = bytes.find(']', open);
  ASSERT_TRUE(comma < close);
  const std::string rows = bytes.substr(open, comma - open);
  const std::string cols = bytes.substr(comma + 1, close - comma - 1);
  ASSERT_NE(rows, cols);
  bytes.replace(open, close - open, cols + "," + rows);  // same length
  Spit(files[0], bytes);
  ExpectRejected(s, dir, SHARDREC_ECORRUPT,
                 {fs::path(files[0]).filename().string(), "does not match the manifest"});
}

TEST(CheckpointReject, GarbageManifestIsCorrupt) {
  const Scenario s = AdamScenario();
  const std::string dir = SavedCheckpoint(s);
  std::string text = Slurp(dir + "/manifest.json");
  Spit(dir + "/manifest.json", text.substr(0, text.size() / 2));
  ExpectRejected(s, dir, SHARDREC_ECORRUPT, {"manifest.json"});
}

// Numbers of the wrong kind or range (a checksum too large for uint64 parses as a double; a
// negative size; a fraction) are refused as corrupt, never cast (found by the manifest fuzzer).
TEST(CheckpointReject, NumbersOfTheWrongKindAreCorrupt) {
  const Scenario s = AdamScenario();
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"\"xxh3\": [", "\"xxh3\": [41411100000000000000, "},
      {"\"chunk_rows\": ", "\"chunk_rows\": 1.5e300, \"x\": "},
      {"\"generation\": ", "\"generation\": -1e30, \"x\": "},
      {"\"world_size\": ", "\"world_size\": 4294967298, \"x\": "},
  };
  for (const auto& [from, to] : edits) {
    const std::string dir = SavedCheckpoint(s);
    std::string text = Slurp(dir + "/manifest.json");
    const size_t at = text.rfind(from);  // the last: the top level's world_size, not the plan's
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    Spit(dir + "/manifest.json", text);
    ExpectRejected(s, dir, SHARDREC_ECORRUPT, {"manifest.json"});
  }
}

TEST(CheckpointReject, OtherDimsAreAMismatch) {
  const std::string dir = SavedCheckpoint(AdamScenario());
  Scenario other = AdamScenario();
  other.tables[1].dim = 16;
  ExpectRejected(other, dir, SHARDREC_EINVAL, {"mismatch", "t1", "23 x 12"});
}

TEST(CheckpointReject, OtherTableSetIsAMismatch) {
  const std::string dir = SavedCheckpoint(AdamScenario());
  Scenario other = AdamScenario();
  other.tables[2].name = "t9";
  ExpectRejected(other, dir, SHARDREC_EINVAL, {"mismatch", "t9"});
}

TEST(CheckpointReject, OtherDtypeNeedsAllowDtypeChange) {
  const std::string dir = SavedCheckpoint(AdamScenario());
  Scenario other = AdamScenario();
  for (RefTable& t : other.tables) t.dtype = SHARDREC_DTYPE_FLOAT16;
  ExpectRejected(other, dir, SHARDREC_EINVAL, {"mismatch", "float32", "allow_dtype_change"});
}

TEST(CheckpointReject, OtherOptimizerNeedsResetAndThenLoadsWeightsOnly) {
  const Scenario adam = AdamScenario();
  const std::string dir = SavedCheckpoint(adam);
  Snap saved;
  OnSide(kSide, adam, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    ASSERT_EQ(LoadOn(c, m, dir), SHARDREC_OK) << shardrec_last_error();
    Snap snap = TakeSnap(c, adam);
    if (r == 0) saved = snap;
  });
  const Scenario adagrad = SideScenario(kSide, SHARDREC_OPTIMIZER_ADAGRAD, 5);
  ExpectRejected(adagrad, dir, SHARDREC_EINVAL, {"mismatch", "adam", "reset_optimizer_state"});
  shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  o.reset_optimizer_state = 1;
  OnSide(kSide, adagrad, [&](int, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    ASSERT_EQ(LoadOn(c, m, dir, &o), SHARDREC_OK) << shardrec_last_error();
    const Snap got = TakeSnap(c, adagrad);
    EXPECT_EQ(got.steps, 0);
    // Adam snapshots hold weights, m1, m2 per table; Adagrad weights, m1.
    for (size_t t = 0; t < 3; ++t) {
      EXPECT_EQ(got.tensors[2 * t], saved.tensors[3 * t]) << "table " << t << " weights";
      for (float v : got.tensors[2 * t + 1]) ASSERT_EQ(v, 0.0f) << "table " << t << " state";
    }
  });
}

TEST(CheckpointDense, DenseTensorsRoundTripAndMismatchIsRejected) {
  const Scenario s = AdamScenario();
  std::vector<float> w(37), st(5);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * static_cast<float>(i) - 3.25f;
  for (size_t i = 0; i < st.size(); ++i) st[i] = 1e-3f * static_cast<float>(i + 1);
  const shardrec_dense_tensor_t dense[] = {{"mlp.w", w.data(), w.size()},
                                           {"mlp.w.adam_m", st.data(), st.size()}};
  shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  o.dense = dense;
  o.num_dense = 2;
  const std::string dir = SavedCheckpoint(s, &o);
  OnSide(kSide, s, [&](int, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    std::vector<float> w2(37, -1.0f), st2(5, -1.0f);
    const shardrec_dense_tensor_t in[] = {{"mlp.w.adam_m", st2.data(), st2.size()},
                                          {"mlp.w", w2.data(), w2.size()}};
    shardrec_checkpoint_options_t lo = SHARDREC_CHECKPOINT_OPTIONS_INIT;
    lo.dense = in;
    lo.num_dense = 2;
    ASSERT_EQ(LoadOn(c, m, dir, &lo), SHARDREC_OK) << shardrec_last_error();
    EXPECT_EQ(w2, w);
    EXPECT_EQ(st2, st);
    std::vector<float> wrong(36, 7.0f);
    const shardrec_dense_tensor_t bad[] = {{"mlp.w", wrong.data(), wrong.size()}};
    lo.dense = bad;
    lo.num_dense = 1;
    EXPECT_EQ(LoadOn(c, m, dir, &lo), SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("mlp.w"), std::string::npos);
    EXPECT_EQ(wrong, std::vector<float>(36, 7.0f));
  });
  // A corrupt dense record under allow_partial_load: its bytes used to be read straight into the
  // caller's buffer before the checksum refused them; dense data is written only on success.
  const std::string file = RankFiles(dir)[0];  // world rank 0 writes the dense tensors
  std::string bytes = Slurp(file);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const auto meta = nlohmann::json::parse(bytes.substr(8, header));
  bool found = false;
  for (const auto& [key, v] : meta.items()) {
    if (key.find("mlp.w") == std::string::npos || key.find("adam") != std::string::npos) continue;
    bytes[8 + header + v["data_offsets"][0].get<size_t>() + 5] ^= 0x40;
    found = true;
  }
  ASSERT_TRUE(found) << meta.dump();
  Spit(file, bytes);
  OnSide(kSide, s, [&](int, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    std::vector<float> w2(37, -1.0f), st2(5, -1.0f);
    const shardrec_dense_tensor_t in[] = {{"mlp.w", w2.data(), w2.size()},
                                          {"mlp.w.adam_m", st2.data(), st2.size()}};
    shardrec_checkpoint_options_t lo = SHARDREC_CHECKPOINT_OPTIONS_INIT;
    lo.dense = in;
    lo.num_dense = 2;
    lo.allow_partial_load = 1;
    EXPECT_EQ(LoadOn(c, m, dir, &lo), SHARDREC_ECORRUPT);
    EXPECT_EQ(w2, std::vector<float>(37, -1.0f));
    EXPECT_EQ(st2, std::vector<float>(5, -1.0f));
  });
}

TEST(CheckpointArgs, BadArgumentsAreRejected) {
  EXPECT_EQ(shardrec_checkpoint_save(nullptr, "/tmp/x", nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_checkpoint_load(nullptr, "/tmp/x", nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_checkpoint_options_init(nullptr, 1), SHARDREC_EINVAL);
  shardrec_checkpoint_options_t o;
  EXPECT_EQ(shardrec_checkpoint_options_init(&o, 99), SHARDREC_EINVAL);
  ASSERT_EQ(shardrec_checkpoint_options_init(&o, SHARDREC_CHECKPOINT_OPTIONS_VERSION), SHARDREC_OK);
  EXPECT_EQ(o.num_dense, 0u);
  EXPECT_EQ(o.reset_optimizer_state, 0);
  const Side one{1, 0, SHARDREC_SHARDING_TABLE_WISE};
  const Scenario s = SideScenario(one, SHARDREC_OPTIMIZER_SGD, 3);
  OnSide(one, s, [&](int, shardrec_embedding_t* c, shardrec_mesh_t*) {
    EXPECT_EQ(shardrec_checkpoint_save(c, nullptr, nullptr), SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_checkpoint_save(c, "", nullptr), SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_checkpoint_save_mesh(nullptr, c, "/tmp/x", nullptr), SHARDREC_EINVAL);
    shardrec_checkpoint_options_t bad = SHARDREC_CHECKPOINT_OPTIONS_INIT;
    bad.num_dense = 1;  // dense NULL
    EXPECT_EQ(shardrec_checkpoint_save(c, FreshDir("args").c_str(), &bad), SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_checkpoint_export_table(c, "nope", "/tmp/x.safetensors", 0),
              SHARDREC_ENOTFOUND);
    EXPECT_EQ(shardrec_checkpoint_import_table(c, "t0", "/nonexistent/x.safetensors", 0),
              SHARDREC_ENOTFOUND);
  });
}

// A table exported from one plan imports into another (weights and optimizer state), and a
// file of the wrong shape is refused before anything changes.
TEST(CheckpointTable, ExportImportAcrossPlans) {
  const std::string dir = FreshDir("export");
  const std::string path = dir + "/t1.safetensors";
  const Side a{2, 0, SHARDREC_SHARDING_COLUMN_WISE};
  const Side b{4, 0, SHARDREC_SHARDING_ROW_WISE};
  const Scenario sa = SideScenario(a, SHARDREC_OPTIMIZER_PARTIAL_ROWWISE_ADAM, 11);
  const Scenario sb = SideScenario(b, SHARDREC_OPTIMIZER_PARTIAL_ROWWISE_ADAM, 99);
  Snap exported;
  OnSide(a, sa, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(a, sa, r, c, m, 0, 2);
    ASSERT_EQ(shardrec_checkpoint_export_table(c, "t1", path.c_str(), 1), SHARDREC_OK)
        << shardrec_last_error();
    Snap snap = TakeSnap(c, sa);
    if (r == 0) exported = snap;
  });
  OnSide(b, sb, [&](int, shardrec_embedding_t* c, shardrec_mesh_t*) {
    ASSERT_EQ(shardrec_checkpoint_import_table(c, "t1", path.c_str(), 1), SHARDREC_OK)
        << shardrec_last_error();
    const Snap got = TakeSnap(c, sb);
    for (size_t k = 3; k < 6; ++k) EXPECT_EQ(got.tensors[k], exported.tensors[k]) << k;
    // Shape mismatch: t1 is 23 x 12; t0 (10 x 8) must refuse the file and stay unchanged.
    EXPECT_EQ(shardrec_checkpoint_import_table(c, "t0", path.c_str(), 0), SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("23 x 12"), std::string::npos)
        << shardrec_last_error();
    std::string why;
    EXPECT_TRUE(BitEqual(TakeSnap(c, sb), got, &why)) << why;
  });
}

}  // namespace
}  // namespace shardrec::testing

namespace shardrec::testing {
namespace {

// A rank refusing its own arguments (a NULL or empty path, an options struct of an unknown
// version) failed alone while its peers waited in the call's first exchange until their
// timeout, which then poisoned their communicator. The arguments are now agreed first: every
// rank fails at once (the others naming rank 1), nothing changes, and the next call works.
TEST(CheckpointReject, ARankRefusingItsArgumentsFailsEveryRankAtOnce) {
  for (const Side& side : {kSide, Side{2, 1, SHARDREC_SHARDING_ROW_WISE}}) {
    SCOPED_TRACE(SideName(side));
    const Scenario s = SideScenario(side, SHARDREC_OPTIMIZER_ADAM, 11);
    const std::string dir = FreshDir("refuse");
    const std::string table = FreshDir("refuse") + "/t0.safetensors";
    shardrec_checkpoint_options_t bad = SHARDREC_CHECKPOINT_OPTIONS_INIT;
    bad.version = 77;
    OnSide(side, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
      TrainSteps(side, s, r, c, m, 0, 2);
      ASSERT_EQ(SaveOn(c, m, dir), SHARDREC_OK) << shardrec_last_error();
      const Snap before = TakeSnap(c, s);
      const bool refuses = r == 1;
      auto save = [&](const char* d, const shardrec_checkpoint_options_t* o) {
        return m ? shardrec_checkpoint_save_mesh(m, c, d, o) : shardrec_checkpoint_save(c, d, o);
      };
      auto load = [&](const char* d, const shardrec_checkpoint_options_t* o) {
        return m ? shardrec_checkpoint_load_mesh(m, c, d, o) : shardrec_checkpoint_load(c, d, o);
      };
      const char* good = dir.c_str();
      std::vector<std::pair<const char*, std::function<shardrec_status_t()>>> calls = {
          {"dir", [&] { return save(refuses ? nullptr : good, nullptr); }},
          {"dir", [&] { return save(refuses ? "" : good, nullptr); }},
          {"version", [&] { return save(good, refuses ? &bad : nullptr); }},
          {"dir", [&] { return load(refuses ? nullptr : good, nullptr); }},
          {"version", [&] { return load(good, refuses ? &bad : nullptr); }},
      };
      // A table export or import is collective over the collection's communicator, on a mesh
      // one sharding group (here of one rank each): 1D only.
      if (m == nullptr) {
        calls.emplace_back("path", [&] {
          return shardrec_checkpoint_export_table(c, "t0", refuses ? nullptr : table.c_str(), 1);
        });
        calls.emplace_back("table", [&] {
          return shardrec_checkpoint_import_table(c, refuses ? nullptr : "t0", table.c_str(), 1);
        });
      }
      for (const auto& [word, call] : calls) {
        const auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(call(), SHARDREC_EINVAL) << "rank " << r << ": " << shardrec_last_error();
        const std::string msg = shardrec_last_error();
        EXPECT_NE(msg.find(refuses ? word : "rank 1 refused its arguments"), std::string::npos)
            << "rank " << r << ": " << msg;
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  10.0)
            << "rank " << r << " waited for the refusing rank";
      }
      // Load options each valid alone but differing across ranks: a partial load on one rank and
      // a staged one on the other ran different exchanges and ended the process (Gloo's size
      // check). Compared with the arguments now: EINVAL on every rank.
      for (int k = 0; k < 3; ++k) {
        shardrec_checkpoint_options_t mixed = SHARDREC_CHECKPOINT_OPTIONS_INIT;
        if (refuses) {
          mixed.allow_partial_load = k == 0 ? 1 : 0;
          mixed.reset_optimizer_state = k == 1 ? 1 : 0;
          mixed.allow_dtype_change = k == 2 ? 1 : 0;
        }
        EXPECT_EQ(load(good, &mixed), SHARDREC_EINVAL) << "rank " << r << ", option " << k;
        EXPECT_NE(std::string(shardrec_last_error()).find("load options"), std::string::npos)
            << shardrec_last_error();
      }
      std::string why;
      EXPECT_TRUE(BitEqual(TakeSnap(c, s), before, &why)) << "state changed: " << why;
      EXPECT_EQ(load(good, nullptr), SHARDREC_OK) << shardrec_last_error();
      if (m == nullptr) {
        EXPECT_EQ(shardrec_checkpoint_export_table(c, "t0", table.c_str(), 1), SHARDREC_OK)
            << shardrec_last_error();
      }
    });
  }
}

}  // namespace
}  // namespace shardrec::testing
