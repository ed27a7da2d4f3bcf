// What an inference handle refuses, and how: corrupt, truncated and mismatched checkpoints and
// serving files (naming the file and the record), bad options, reloads that would change the
// model's shape (the old version keeps serving), bad requests while other threads keep getting
// right answers, and the bounds policies.
#include <gtest/gtest.h>
#include <sys/stat.h>
// Header-only XXH3, to stamp the checksum of an edited serving header as a writer would.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/capi/inference/inference_test_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

namespace fs = std::filesystem;

// One saved world-2 row-wise checkpoint of pooled SUM tables, shared by the tests here.
const Trained& Fixture() {
  static const Trained t =
      TrainAndSave(Side{2, 0, SHARDREC_SHARDING_ROW_WISE, 4, 0}, SHARDREC_POOLING_SUM, true);
  return t;
}

std::string CopyDir(const std::string& from) {
  const std::string to = FreshDir("copy");
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return to;
}

void FlipByte(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(offset);
  f.write(&c, 1);
}

// The absolute offset of the first weights record's data in a rank file (safetensors: 8-byte
// header length, JSON header, data; offsets in the header are relative to the data).
std::streamoff WeightsOffset(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  std::smatch m;
  EXPECT_TRUE(
      std::regex_search(header, m, std::regex("/weights/[^\"]*\"[^}]*\"data_offsets\":\\[(\\d+)")))
      << header;
  return static_cast<std::streamoff>(8 + n + std::stoull(m[1].str()));
}

std::string RankFile(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") return e.path().string();
  return "";
}

// Opens and expects `code` with every word of `words` in the message, and no handle.
void ExpectRefused(const std::string& path, shardrec_status_t code,
                   const std::vector<std::string>& words,
                   const shardrec_inference_options_t* o = nullptr) {
  shardrec_inference_t* inf = reinterpret_cast<shardrec_inference_t*>(1);
  EXPECT_EQ(shardrec_inference_open(path.c_str(), o, &inf), code) << shardrec_last_error();
  EXPECT_EQ(inf, nullptr);
  const std::string msg = shardrec_last_error();
  for (const std::string& w : words) EXPECT_NE(msg.find(w), std::string::npos) << msg;
}

TEST(InferenceReject, CorruptAndTruncatedCheckpoints) {
  const Trained& t = Fixture();
  ExpectRefused("/nonexistent/shardrec_serving", SHARDREC_ENOTFOUND, {"does not exist"});
  const std::string empty = FreshDir("empty");
  ExpectRefused(empty, SHARDREC_ENOTFOUND, {"manifest.json"});
  {
    const std::string d = CopyDir(t.trained_dir);
    const std::string f = RankFile(d);
    FlipByte(f, WeightsOffset(f) + 5);
    ExpectRefused(d, SHARDREC_ECORRUPT, {f, "weights"});
  }
  {
    const std::string d = CopyDir(t.trained_dir);
    const std::string f = RankFile(d);
    fs::resize_file(f, fs::file_size(f) - 100);
    ExpectRefused(d, SHARDREC_ECORRUPT, {f, "truncated"});
  }
  {
    const std::string d = CopyDir(t.trained_dir);
    FlipByte(d + "/manifest.json", 1);
    ExpectRefused(d, SHARDREC_ECORRUPT, {"manifest.json"});
  }
}

// A save over something that is not a regular file (here a FIFO; as root a device node such as
// /dev/null was replaced too) is refused and leaves it as it was, with no temporary file behind.
TEST(InferenceReject, ASaveOverANonRegularFileIsRefused) {
  const Trained& t = Fixture();
  InferencePtr inf = Open(t.trained_dir, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_TRUE(inf);
  const std::string dir = FreshDir("serving_fifo");
  const std::string fifo = dir + "/a.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(shardrec_inference_save(inf.get(), fifo.c_str()), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("not a regular file"), std::string::npos)
      << shardrec_last_error();
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(InferenceReject, CorruptAndTruncatedServingFiles) {
  const Trained& t = Fixture();
  InferencePtr inf = Open(t.trained_dir, SHARDREC_SERVING_INT4);
  ASSERT_TRUE(inf);
  const std::string dir = FreshDir("serving");
  const std::string good = dir + "/good.serving";
  ASSERT_EQ(shardrec_inference_save(inf.get(), good.c_str()), SHARDREC_OK);
  const auto size = static_cast<std::streamoff>(fs::file_size(good));
  auto variant = [&](const std::string& name) {
    const std::string p = dir + "/" + name;
    fs::copy_file(good, p, fs::copy_options::overwrite_existing);
    return p;
  };
  {
    const std::string p = variant("data.serving");
    FlipByte(p, size - 70);  // the last block: the dense tensors or t2's rows
    ExpectRefused(p, SHARDREC_ECORRUPT, {p, "checksum"});
  }
  {
    const std::string p = variant("header.serving");
    FlipByte(p, 40);
    ExpectRefused(p, SHARDREC_ECORRUPT, {p, "header"});
  }
  {
    const std::string p = variant("magic.serving");
    FlipByte(p, 0);
    ExpectRefused(p, SHARDREC_ECORRUPT, {p, "magic"});
  }
  for (uintmax_t keep : {uintmax_t{5}, uintmax_t{100}, static_cast<uintmax_t>(size - 1)}) {
    const std::string p = variant("short.serving");
    fs::resize_file(p, keep);
    ExpectRefused(p, SHARDREC_ECORRUPT, {p});
  }
  {
    // A FIFO: opening it for reading waited for a writer for ever.
    const std::string p = dir + "/fifo.serving";
    ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0);
    ExpectRefused(p, SHARDREC_ECORRUPT, {p, "not a regular file"});
    const std::string d = CopyDir(t.trained_dir);
    const std::string f = RankFile(d);
    fs::remove(f);
    ASSERT_EQ(::mkfifo(f.c_str(), 0644), 0);
    ExpectRefused(d, SHARDREC_ECORRUPT, {f, "not a regular file"});
    shardrec_inference_t* reloaded = inf.get();
    EXPECT_EQ(shardrec_inference_reload(reloaded, d.c_str()), SHARDREC_ECORRUPT);
  }
  // The good file still opens, and answers like the handle that wrote it.
  InferencePtr again = Open(good, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_TRUE(again);
  EXPECT_EQ(Lookup(again.get(), t.batches[0], 4), Lookup(inf.get(), t.batches[0], 4));
}

// Rewrites the JSON header of the serving file at `path` through `edit`, padded with spaces to
// its length (an edit must not lengthen it) and with its checksum stamped again, so that only
// the values are wrong: magic (8 bytes), header length (8), header XXH3 (8), header.
void EditServingHeader(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t len = 0;
  f.seekg(8);
  f.read(reinterpret_cast<char*>(&len), 8);
  std::string header(len, '\0');
  f.seekg(24);
  f.read(header.data(), static_cast<std::streamsize>(len));
  nlohmann::json h = nlohmann::json::parse(header);
  edit(h);
  std::string edited = h.dump();
  ASSERT_LE(edited.size(), len) << "the edit lengthened the header";
  edited.resize(len, ' ');
  const uint64_t sum = XXH3_64bits(edited.data(), edited.size());
  f.seekp(16);
  f.write(reinterpret_cast<const char*>(&sum), 8);
  f.write(edited.data(), static_cast<std::streamsize>(len));
}

// Headers whose checksums hold but whose values cannot be: a table whose size wraps 64 bits
// (2^48 rows of 64 KiB: the open succeeded and a lookup read wild memory), and floats where
// integers belong (undefined behaviour in the integer conversion). All are ECORRUPT.
TEST(InferenceReject, ImpossibleHeaderValuesAreRefused) {
  const Trained& t = Fixture();
  InferencePtr inf = Open(t.trained_dir, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_TRUE(inf);
  const std::string dir = FreshDir("serving_header");
  const std::string good = dir + "/good.serving";
  ASSERT_EQ(shardrec_inference_save(inf.get(), good.c_str()), SHARDREC_OK);
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"wrap",
       [](nlohmann::json& h) {
         nlohmann::json& e = h["tables"][0];
         e["rows"] = int64_t{1} << 48;
         e["dim"] = 16384;
         e["row_bytes"] = 65536;  // fp32 rows of 16384
         e["nbytes"] = 0;         // 2^48 x 2^16 wraps to 0
         e["xxh3"] = nlohmann::json::array();
       },
       "larger than the file"},
      {"float_offset", [](nlohmann::json& h) { h["tables"][0]["offset"] = 1e99; }, "malformed"},
      {"float_rows", [](nlohmann::json& h) { h["tables"][0]["rows"] = 1e99; }, "malformed"},
      {"float_size", [](nlohmann::json& h) { h["file_size"] = 1.5; }, "malformed"},
      {"float_sum", [](nlohmann::json& h) { h["tables"][0]["xxh3"][0] = 1e30; }, "malformed"},
      {"negative_size", [](nlohmann::json& h) { h["tables"][0]["row_bytes"] = -1; }, "malformed"},
      // Models no plan makes (they opened: a delta found one of two same-named tables, and the
      // output width shrank with a table that reads nothing).
      {"same_table_names",
       [](nlohmann::json& h) { h["tables"][1]["name"] = h["tables"][0]["name"]; }, "given twice"},
      {"empty_table_name", [](nlohmann::json& h) { h["tables"][0]["name"] = ""; }, "empty name"},
      {"same_feature_names", [](nlohmann::json& h) { h["features"][1] = h["features"][0]; },
       "given twice"},
      {"table_reads_nothing",
       [](nlohmann::json& h) { h["tables"][0]["features"] = nlohmann::json::array(); },
       "reads no feature"},
      {"feature_read_by_none",
       [](nlohmann::json& h) { h["tables"][1]["features"] = h["tables"][0]["features"]; },
       "read by no table"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string p = dir + "/" + c.name + ".serving";
    fs::copy_file(good, p, fs::copy_options::overwrite_existing);
    EditServingHeader(p, c.edit);
    ExpectRefused(p, SHARDREC_ECORRUPT, {p, c.says});
  }
}

TEST(InferenceReject, BadOptions) {
  const std::string dir = Fixture().trained_dir;
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.version = 0;
  ExpectRefused(dir, SHARDREC_EINVAL, {"version"}, &o);
  o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.device_type = SHARDREC_DEVICE_CUDA;
  ExpectRefused(dir, SHARDREC_EUNSUPPORTED, {"host"}, &o);
  o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.default_storage = SHARDREC_SERVING_FP8_E5M2 + 1;
  ExpectRefused(dir, SHARDREC_EINVAL, {"storage 8", "shardrec_serving_storage_t"}, &o);
  o.default_storage = -1;
  ExpectRefused(dir, SHARDREC_EINVAL, {"storage -1"}, &o);
  o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.bounds_policy = 7;
  ExpectRefused(dir, SHARDREC_EINVAL, {"bounds_policy"}, &o);
  shardrec_table_storage_t ts[2] = {SHARDREC_TABLE_STORAGE_INIT, SHARDREC_TABLE_STORAGE_INIT};
  ts[0].table = "nope";
  o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.table_storage = ts;
  o.num_table_storage = 1;
  ExpectRefused(dir, SHARDREC_EINVAL, {"nope"}, &o);
  ts[0].table = "t0";
  ts[1].table = "t0";
  o.num_table_storage = 2;
  ExpectRefused(dir, SHARDREC_EINVAL, {"second time"}, &o);
  o.table_storage = nullptr;
  ExpectRefused(dir, SHARDREC_EINVAL, {"NULL"}, &o);
  EXPECT_EQ(shardrec_inference_open(dir.c_str(), nullptr, nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_inference_open(nullptr, nullptr, nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_inference_options_init(&o, SHARDREC_INFERENCE_OPTIONS_VERSION + 1),
            SHARDREC_EINVAL);
}

TEST(InferenceReject, ReloadOfAnotherShapeChangesNothing) {
  const Trained& t = Fixture();
  InferencePtr inf = Open(t.trained_dir, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_TRUE(inf);
  const std::vector<float> before = Lookup(inf.get(), t.batches[0], 4);
  // A sequence model (other dims and pooling), and the same model in another storage type.
  const Trained seq =
      TrainAndSave(Side{1, 0, SHARDREC_SHARDING_TABLE_WISE, 4, 0}, SHARDREC_POOLING_NONE, false);
  EXPECT_EQ(shardrec_inference_reload(inf.get(), seq.trained_dir.c_str()), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find(seq.trained_dir), std::string::npos);
  InferencePtr q = Open(t.trained_dir, SHARDREC_SERVING_INT8);
  const std::string file = FreshDir("reload") + "/int8.serving";
  ASSERT_EQ(shardrec_inference_save(q.get(), file.c_str()), SHARDREC_OK);
  EXPECT_EQ(shardrec_inference_reload(inf.get(), file.c_str()), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_inference_reload(inf.get(), "/nonexistent/x"), SHARDREC_ENOTFOUND);
  uint64_t v = 0;
  ASSERT_EQ(shardrec_inference_version(inf.get(), &v), SHARDREC_OK);
  EXPECT_EQ(v, 1u);
  EXPECT_EQ(Lookup(inf.get(), t.batches[0], 4), before);
  ASSERT_EQ(shardrec_inference_reload(inf.get(), t.dyadic_dir.c_str()), SHARDREC_OK);
  EXPECT_EQ(Lookup(inf.get(), t.dyadic_batches[0], 4, &v), t.dyadic_out[0]);
  EXPECT_EQ(v, 2u);
}

// A reload whose only difference is which features read a table: the refusal's two descriptions
// of the table differ there (they used to be identical, naming only names, sizes and storage).
TEST(InferenceReject, ReloadRefusalNamesTheFeaturesThatDiffer) {
  Side side;
  side.world = 1;
  side.sharding = SHARDREC_SHARDING_TABLE_WISE;
  auto save = [&](const std::vector<int32_t>& t1_features) {
    Scenario s = StandardScenario(1, side.sharding, SHARDREC_POOLING_SUM);
    s.tables[1].features = t1_features;
    const std::string dir = FreshDir("features");
    OnSide(side, s, [&](int, shardrec_embedding_t* coll, shardrec_mesh_t* mesh) {
      ASSERT_EQ(SaveOn(coll, mesh, dir), SHARDREC_OK) << shardrec_last_error();
    });
    return dir;
  };
  const std::string served = save({1, 2}), swapped = save({2, 1});
  InferencePtr inf = Open(served, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_TRUE(inf);
  EXPECT_EQ(shardrec_inference_reload(inf.get(), swapped.c_str()), SHARDREC_EINVAL);
  const std::string msg = shardrec_last_error();
  EXPECT_NE(msg.find("read by f1, f2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("read by f2, f1)"), std::string::npos) << msg;
  uint64_t v = 0;
  ASSERT_EQ(shardrec_inference_version(inf.get(), &v), SHARDREC_OK);
  EXPECT_EQ(v, 1u);
}

// One bad request: what it breaks, the code and a word of the message.
struct Bad {
  const char* what;
  shardrec_status_t code;
  const char* word;
};

TEST(InferenceReject, BadRequestsLeaveOtherThreadsRight) {
  const Trained& t = Fixture();
  InferencePtr inf = Open(t.trained_dir, SHARDREC_SERVING_INT8);
  ASSERT_TRUE(inf);
  const RefBatch& good = t.batches[0];
  const std::vector<float> want = Lookup(inf.get(), good, 4);
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::thread reader([&] {
    while (!done.load())
      if (Lookup(inf.get(), good, 4) != want) ++wrong;
  });
  const std::vector<Bad> cases = {{"features", SHARDREC_EINVAL, "features"},
                                  {"out_len", SHARDREC_EINVAL, "out_len"},
                                  {"negative", SHARDREC_EINVAL, "negative"},
                                  {"sum", SHARDREC_EINVAL, "sum to"},
                                  {"id", SHARDREC_EINVAL, "is out of range [0, "},
                                  {"dtype", SHARDREC_EINVAL, "values_dtype"},
                                  {"weights", SHARDREC_EINVAL, "weights"},
                                  {"device", SHARDREC_EUNSUPPORTED, "host"},
                                  {"null", SHARDREC_EINVAL, "NULL"},
                                  {"nan", SHARDREC_EINVAL, "position 2 is nan"},
                                  {"inf", SHARDREC_EINVAL, "must be finite"}};
  for (int round = 0; round < 20; ++round)
    for (const Bad& c : cases) {
      RefBatch b = good;
      const std::string w = c.what;
      if (w == "negative") b.lengths[0] = -1;
      if (w == "sum") b.lengths[0] += 1;
      if (w == "id") b.ids[0] = 1000;
      if (w == "weights") b.weights.pop_back();
      if (w == "nan") b.weights[2] = NAN;
      if (w == "inf") b.weights.back() = -INFINITY;
      KjtHolder kjt(b, 4, false);
      shardrec_kjt_view_t view = *kjt.view();
      size_t len = want.size();
      if (w == "features") view.num_features = 3;
      if (w == "out_len") len -= 1;
      if (w == "dtype") view.values_dtype = SHARDREC_DTYPE_FLOAT32;
      if (w == "device") view.device_type = SHARDREC_DEVICE_CUDA;
      std::vector<float> out(want.size());
      const shardrec_status_t rc = shardrec_inference_lookup(
          inf.get(), w == "null" ? nullptr : &view, out.data(), len, nullptr);
      ASSERT_EQ(rc, c.code) << c.what << ": " << shardrec_last_error();
      ASSERT_NE(std::string(shardrec_last_error()).find(c.word), std::string::npos)
          << c.what << ": " << shardrec_last_error();
    }
  done = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(InferenceReject, BoundsPoliciesClampAndSkip) {
  const Trained& t = Fixture();
  RefBatch bad = t.batches[0];
  bad.ids[0] = -5;  // feature f0 reads t0 (10 rows); its first value is sample 0's
  RefBatch zero = bad, without = bad;
  zero.ids[0] = 0;
  without.ids.erase(without.ids.begin());
  without.weights.erase(without.weights.begin());
  for (int64_t k = 0; k < without.batch_size; ++k)
    if (without.lengths[k] > 0) {
      without.lengths[k] -= 1;
      break;
    }
  ASSERT_GT(bad.lengths[0], 0) << "the fixture's first bag must not be empty";
  InferencePtr clamp = Open(t.trained_dir, SHARDREC_SERVING_FP32, SHARDREC_BOUNDS_CLAMP);
  InferencePtr skip = Open(t.trained_dir, SHARDREC_SERVING_FP32, SHARDREC_BOUNDS_SKIP);
  ASSERT_TRUE(clamp && skip);
  EXPECT_EQ(Lookup(clamp.get(), bad, 4), Lookup(clamp.get(), zero, 4));
  EXPECT_EQ(Lookup(skip.get(), bad, 4), Lookup(skip.get(), without, 4));
}

}  // namespace
}  // namespace shardrec::testing
