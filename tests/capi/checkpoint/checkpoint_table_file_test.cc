// Table imports of safetensors files whose tensors do not fill the data area exactly, back to
// back, as the format requires: a header length one short (every tensor then read one byte
// early, each still inside the file), bytes after the last tensor, a gap between two tensors,
// two tensors sharing bytes, a byte range of another length than its dtype and shape. Each is
// refused with SHARDREC_ECORRUPT naming the file, and the table is unchanged; the export itself
// imports. (The first four used to import: shifted bytes, NaN and Inf among them.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/capi/checkpoint/checkpoint_test_util.h"

namespace shardrec::testing {
namespace {

using nlohmann::json;

const Side kSide{2, 0, SHARDREC_SHARDING_ROW_WISE};

uint64_t HeaderLength(const std::string& file) {
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i)
    len |= static_cast<uint64_t>(static_cast<uint8_t>(file[i])) << (8 * i);
  return len;
}

std::string WithHeaderLength(std::string file, uint64_t len) {
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return file;
}

// A safetensors file split into its header and its data area, and put together again (the
// header padded with spaces to a multiple of 8, as the writers do).
struct Parts {
  json header;
  std::string data;
};

Parts Split(const std::string& file) {
  const uint64_t len = HeaderLength(file);
  return {json::parse(file.substr(8, len)), file.substr(8 + len)};
}

// `space`: at least one space of padding (a header one byte shorter still parses).
std::string Join(const Parts& p, bool space = false) {
  std::string text = p.header.dump();
  if (space) text += ' ';
  text.append((8 - text.size() % 8) % 8, ' ');
  return WithHeaderLength(std::string(8, '\0'), text.size()) + text + p.data;
}

// The tensor of the header whose bytes come last.
std::string LastTensor(const json& header) {
  std::string last;
  uint64_t begin = 0;
  for (const auto& [key, t] : header.items()) {
    if (key == "__metadata__") continue;
    if (last.empty() || t["data_offsets"][0].get<uint64_t>() >= begin) {
      last = key;
      begin = t["data_offsets"][0].get<uint64_t>();
    }
  }
  return last;
}

// Moves the last tensor's bytes `by` bytes later (a gap of that many bytes before them), or
// earlier for a negative `by` (over the end of the tensor before it).
std::string Shifted(const std::string& file, int64_t by) {
  Parts p = Split(file);
  const std::string key = LastTensor(p.header);
  json& range = p.header[key]["data_offsets"];
  const auto begin = range[0].get<uint64_t>(), end = range[1].get<uint64_t>();
  range = {begin + by, end + by};
  const std::string bytes = p.data.substr(begin, end - begin);
  p.data.resize(begin);
  if (by >= 0) {
    p.data.append(static_cast<size_t>(by), '\x7f');
  } else {
    p.data.resize(begin - static_cast<uint64_t>(-by));
  }
  p.data += bytes;
  return Join(p);
}

TEST(CheckpointTableFile, TensorsNotFillingTheDataAreaAreCorruptAndChangeNothing) {
  const std::string dir = FreshDir("table_file");
  const std::string good = dir + "/t1.safetensors";
  const Scenario s = SideScenario(kSide, SHARDREC_OPTIMIZER_PARTIAL_ROWWISE_ADAM, 11);
  Snap exported;
  OnSide(kSide, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(kSide, s, r, c, m, 0, 2);
    ASSERT_EQ(shardrec_checkpoint_export_table(c, "t1", good.c_str(), 1), SHARDREC_OK)
        << shardrec_last_error();
    Snap snap = TakeSnap(c, s);
    if (r == 0) exported = snap;
  });
  const std::string file = Slurp(good);
  ASSERT_GT(file.size(), 8u);
  ASSERT_EQ(HeaderLength(file) % 8, 0u) << "the writer pads its header to a multiple of 8";
  ASSERT_GE(Split(file).header.size(), 3u) << "weights and two states, with __metadata__";

  struct Case {
    const char* name;
    std::string bytes;
    const char* needle;  // in the message besides the file's path
  };
  std::vector<Case> cases;
  {
    const std::string padded = Join(Split(file), true);
    cases.push_back({"short_header_length", WithHeaderLength(padded, HeaderLength(padded) - 1),
                     "before the end of the file"});
  }
  cases.push_back({"trailing_bytes", file + std::string(4096, '\0'), "before the end of the file"});
  cases.push_back({"gap", Shifted(file, 8), "after a gap of 8 bytes"});
  cases.push_back({"overlap", Shifted(file, -4), "inside the bytes of"});
  {
    Parts p = Split(file);
    p.header["weights"]["dtype"] = "F16";  // half the bytes its range holds
    cases.push_back({"length_not_shape", Join(p), "do not match its shape"});
  }
  for (Case& c : cases) {
    const std::string path = dir + "/" + c.name + ".safetensors";
    Spit(path, c.bytes);
    c.bytes = path;
  }

  // A fresh collection (another seed): each refused import leaves it as it was.
  const Scenario other = SideScenario(kSide, SHARDREC_OPTIMIZER_PARTIAL_ROWWISE_ADAM, 99);
  OnSide(kSide, other, [&](int, shardrec_embedding_t* c, shardrec_mesh_t*) {
    const Snap before = TakeSnap(c, other);
    for (const Case& k : cases) {
      SCOPED_TRACE(k.name);
      const std::string& path = k.bytes;
      EXPECT_EQ(shardrec_checkpoint_import_table(c, "t1", path.c_str(), 1), SHARDREC_ECORRUPT)
          << shardrec_last_error();
      const std::string msg = shardrec_last_error();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(k.needle), std::string::npos) << msg;
      std::string why;
      EXPECT_TRUE(BitEqual(TakeSnap(c, other), before, &why)) << "state changed: " << why;
    }
    // The file as written imports: table t1's weights and states are the exported ones.
    ASSERT_EQ(shardrec_checkpoint_import_table(c, "t1", good.c_str(), 1), SHARDREC_OK)
        << shardrec_last_error();
    const Snap got = TakeSnap(c, other);
    for (size_t k = 3; k < 6; ++k) EXPECT_EQ(got.tensors[k], exported.tensors[k]) << k;
  });
}

}  // namespace
}  // namespace shardrec::testing
