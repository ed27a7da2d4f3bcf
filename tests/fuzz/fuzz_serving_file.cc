// libFuzzer target over serving files (shardrec_inference_open of a file): the input after its
// first byte is the file. With the first byte's low bit set the target first makes the file's
// checksums match again (the header's XXH3 in the prefix, each block's per-chunk XXH3 and the
// header's file_size), so mutations of the header and of the blocks reach the checks behind the
// checksums (shapes, storage types, FP8 scales, dynamic tables' ids and zero row, the model's
// plan rules) instead of stopping at the first checksum. Checked on every input:
//  - the open returns OK or SHARDREC_ECORRUPT with a message (never another code, a crash, a
//    hang or a sanitizer report);
//  - an opened file serves: a lookup of id 0 in every sample and feature returns OK or EINVAL
//    (a dynamic table reads any id; a fixed one has a row 0), and the handle saves a serving file
//    that opens again with the same tables, dims, rows and storage types.
// The corpus seed (tests/fuzz/corpus/serving_file) is a model of a one-rank collection saved as
// a serving file, written by SHARDREC_FUZZ_WRITE_SEED=<dir>: fp32, int8, int4, FP8 E4M3 and bf16
// tables, a dynamic table and a dense tensor.
#include <stdlib.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/fuzz/fuzz_files.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using shardrec::fuzz::ScratchDir;
using shardrec::fuzz::Slurp;
using shardrec::fuzz::Spit;

using nlohmann::json;

constexpr uint64_t kPrefix = 24;      // magic, header length, header XXH3
constexpr uint64_t kChunk = 1 << 20;  // bytes per block checksum

uint64_t Get64(const std::string& s, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}

void Put64(std::string* s, size_t at, uint64_t v) { std::memcpy(s->data() + at, &v, 8); }

// Every object of `j` placing a block ("offset", "nbytes", "xxh3") inside `file` gets the
// checksums of the bytes it places; the smallest offset goes to *first.
void FixBlocks(json& j, const std::string& file, uint64_t* first) {
  if (j.is_array()) {
    for (json& e : j) FixBlocks(e, file, first);
    return;
  }
  if (!j.is_object()) return;
  for (auto& [key, v] : j.items()) FixBlocks(v, file, first);
  auto off = j.find("offset"), len = j.find("nbytes");
  if (off == j.end() || len == j.end() || !off->is_number_unsigned() ||
      !len->is_number_unsigned() || !j.contains("xxh3"))
    return;
  const uint64_t o = off->get<uint64_t>(), n = len->get<uint64_t>();
  if (o > file.size() || n > file.size() - o) return;
  *first = std::min(*first, o);
  json sums = json::array();
  for (uint64_t k = 0; k < n; k += kChunk)
    sums.push_back(XXH3_64bits(file.data() + o + k, std::min(kChunk, n - k)));
  j["xxh3"] = sums;
}

// The file with its checksums and file_size made to match (where its header still parses and
// its new text fits before the first block; else the header's own checksum only).
std::string FixChecksums(std::string file) {
  if (file.size() < kPrefix) return file;
  uint64_t hlen = Get64(file, 8);
  if (hlen > file.size() - kPrefix) return file;
  json h = json::parse(file.begin() + kPrefix, file.begin() + static_cast<int64_t>(kPrefix + hlen),
                       nullptr, false);
  if (!h.is_discarded() && h.is_object()) {
    uint64_t first = file.size();
    FixBlocks(h, file, &first);
    if (h.contains("file_size")) h["file_size"] = file.size();
    std::string text = h.dump();
    if (text.size() <= hlen) text.resize(hlen, ' ');
    if (kPrefix + text.size() <= first) {
      file.replace(kPrefix, text.size(), text);
      hlen = text.size();
      Put64(&file, 8, hlen);
    }
  }
  Put64(&file, 16, XXH3_64bits(file.data() + kPrefix, hlen));
  return file;
}

// A one-rank collection's model (the tables of the file comment), saved as a serving file.
std::string MakeSeed(const std::string& dir) {
  shardrec_comm_t* comm = nullptr;
  FUZZ_CHECK(shardrec_comm_create_local_group(&comm, 1, nullptr) == SHARDREC_OK);
  constexpr int kTables = 6;
  const char* names[kTables] = {"f32", "i8", "i4", "e4", "bf", "dyn"};
  const int32_t storage[kTables] = {SHARDREC_SERVING_FP32, SHARDREC_SERVING_INT8,
                                    SHARDREC_SERVING_INT4, SHARDREC_SERVING_AS_TRAINED,
                                    SHARDREC_SERVING_BF16, SHARDREC_SERVING_FP16};
  shardrec::fuzz::OneTablePerFeature cfg(names, kTables);
  shardrec_table_storage_t ts[kTables];
  shardrec_dynamic_table_config_t dyn;
  shardrec_dynamic_table_config_init(&dyn, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
  for (int i = 0; i < kTables; ++i) {
    cfg.table(i).rows = 3 + i;
    cfg.table(i).dim = 2 + i % 3;
    ts[i] = SHARDREC_TABLE_STORAGE_INIT;
    ts[i].table = names[i];
    ts[i].storage = storage[i];
  }
  cfg.table(1).pooling = SHARDREC_POOLING_MEAN;
  cfg.table(3).dtype = SHARDREC_DTYPE_FP8_E4M3;
  cfg.table(5).dynamic = &dyn;
  shardrec_plan_t* plan = cfg.Plan();
  shardrec_embedding_t* coll = nullptr;
  FUZZ_CHECK(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr) == SHARDREC_OK);
  // The dynamic table admits two ids of one forward.
  const int32_t lengths[kTables] = {1, 1, 1, 1, 1, 2};
  const int64_t ids[] = {0, 1, 2, 0, 1, -9, int64_t{1} << 40};
  shardrec::fuzz::TrainOneSample(coll, lengths, kTables, ids, 7, 0.25f);
  float dense[3] = {1, -2, 3};
  shardrec_dense_tensor_t d = {"d", dense, 3};
  shardrec_checkpoint_options_t co = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  co.dense = &d;
  co.num_dense = 1;
  const std::string ckpt = dir + "/ckpt";
  FUZZ_CHECK(shardrec_checkpoint_save(coll, ckpt.c_str(), &co) == SHARDREC_OK);
  shardrec_embedding_destroy(coll);
  shardrec_plan_destroy(plan);
  shardrec_comm_destroy(comm);
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.table_storage = ts;
  o.num_table_storage = kTables;
  shardrec_inference_t* inf = nullptr;
  FUZZ_CHECK(shardrec_inference_open(ckpt.c_str(), &o, &inf) == SHARDREC_OK);
  const std::string path = dir + "/seed.srserve";
  FUZZ_CHECK(shardrec_inference_save(inf, path.c_str()) == SHARDREC_OK);
  shardrec_inference_destroy(inf);
  return Slurp(path);
}

struct Fixture {
  std::string dir;
  Fixture() {
    dir = ScratchDir("serving");  // fuzz_files.h: in memory where there is a tmpfs
    if (const char* out = std::getenv("SHARDREC_FUZZ_WRITE_SEED")) {
      Spit(std::string(out) + "/model", std::string(1, '\x01') + MakeSeed(dir));
    }
  }
  ~Fixture() { (void)std::system(("rm -rf '" + dir + "'").c_str()); }
};

struct Shape {
  int32_t storage;
  int64_t rows;
  int32_t dim;
  bool operator==(const Shape& o) const {
    return storage == o.storage && rows == o.rows && dim == o.dim;
  }
};

std::vector<Shape> Shapes(const shardrec_inference_t* inf) {
  size_t n = 0;
  FUZZ_CHECK(shardrec_inference_num_tables(inf, &n) == SHARDREC_OK);
  std::vector<Shape> out(n);
  for (size_t i = 0; i < n; ++i) {
    const char* name = nullptr;
    FUZZ_CHECK(shardrec_inference_table_info(inf, i, &name, &out[i].rows, &out[i].dim,
                                             &out[i].storage) == SHARDREC_OK);
  }
  return out;
}

// A lookup of id 0 in each of two samples of every feature.
void Lookup(const shardrec_inference_t* inf) {
  size_t features = 0;
  int64_t dim = 0;
  int32_t sequence = 0;
  FUZZ_CHECK(shardrec_inference_num_features(inf, &features) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_inference_output_dim(inf, &dim) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_inference_is_sequence(inf, &sequence) == SHARDREC_OK);
  std::vector<int32_t> lengths(features * 2, 1);
  std::vector<int64_t> ids(lengths.size(), 0);
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = 2;
  v.num_features = static_cast<int32_t>(features);
  v.lengths = lengths.data();
  v.num_lengths = lengths.size();
  v.values = ids.data();
  v.values_dtype = SHARDREC_DTYPE_INT64;
  v.num_values = ids.size();
  const size_t rows = sequence ? ids.size() : 2;
  std::vector<float> out(rows * static_cast<size_t>(dim));
  const shardrec_status_t rc = shardrec_inference_lookup(inf, &v, out.data(), out.size(), nullptr);
  FUZZ_CHECK(rc == SHARDREC_OK || rc == SHARDREC_EINVAL);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  if (size == 0) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) file = FixChecksums(std::move(file));
  const std::string path = fx.dir + "/in.srserve";
  Spit(path, file);
  shardrec_inference_t* inf = nullptr;
  const shardrec_status_t rc = shardrec_inference_open(path.c_str(), nullptr, &inf);
  FUZZ_CHECK(rc == SHARDREC_OK || rc == SHARDREC_ECORRUPT);
  if (rc != SHARDREC_OK) {
    FUZZ_CHECK(inf == nullptr && std::strlen(shardrec_last_error()) > 0);
    return 0;
  }
  Lookup(inf);
  const std::string again = fx.dir + "/again.srserve";
  FUZZ_CHECK(shardrec_inference_save(inf, again.c_str()) == SHARDREC_OK);
  shardrec_inference_t* reopened = nullptr;
  FUZZ_CHECK(shardrec_inference_open(again.c_str(), nullptr, &reopened) == SHARDREC_OK);
  FUZZ_CHECK(Shapes(reopened) == Shapes(inf));
  Lookup(reopened);
  shardrec_inference_destroy(reopened);
  shardrec_inference_destroy(inf);
  return 0;
}
