// libFuzzer target over checkpoint rank files (shardrec_checkpoint_load): the input after its
// first byte replaces the rank file of a valid one-rank checkpoint holding a fixed fp32 table
// with row-wise Adagrad state, an FP8 E4M3 table, a dynamic LRU table and a dynamic SCORE table
// (their ids, last-seen steps, counts, scores and per-block metadata are records of the file).
// With the first byte's low bit set the target first writes the manifest again with the
// checksums of the fuzzed bytes (each record's per-chunk XXH3 where its byte range lies in the
// file, the file's size and the manifest's own XXH3), so mutations of the records' contents reach
// the checks behind the checksums: a saved row block whose ids repeat, lie in another block,
// outnumber its slots, or whose counters are impossible. Checked on every input:
//  - the load returns OK or a documented error (ECORRUPT, EINVAL, ENOTFOUND, EUNSUPPORTED, EIO)
//    with a message, never EINTERNAL, a crash, a hang or a sanitizer report;
//  - a refused load changes nothing: every table exports the same bytes (weights, state, the
//    dynamic tables' ids) and the dynamic tables' stats stay;
//  - an accepted load leaves a collection that saves a checkpoint which loads again and exports
//    the same bytes;
//  - serving opens the checkpoint (in memory, or with the second bit of the first byte two tables
//    served from its files) with OK or a documented error, and an opened one answers a lookup.
// After an accepted load the collection is made afresh from the pristine checkpoint. The corpus
// seed (tests/fuzz/corpus/checkpoint_rank) is that checkpoint's rank file behind byte 1, written
// by SHARDREC_FUZZ_WRITE_SEED=<dir>.
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

#include "shardrec/checkpoint.h"
#include "shardrec/dynamic.h"
#include "shardrec/shardrec.h"
#include "tests/fuzz/fuzz_files.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using shardrec::fuzz::ScratchDir;
using shardrec::fuzz::Slurp;
using shardrec::fuzz::Spit;

using nlohmann::json;

constexpr int kTables = 4;
constexpr const char* kNames[kTables] = {"w", "e", "lru", "score"};

// `m` (a parsed manifest) with the checksums of `file` as its only rank file, and its own.
std::string Resigned(json m, const std::string& file) {
  json& entry = m.at("files").at(0);
  entry["size"] = file.size();
  for (json& r : entry.at("records")) {
    const uint64_t begin = r.at("byte_range").at(0).get<uint64_t>();
    const uint64_t end = r.at("byte_range").at(1).get<uint64_t>();
    const uint64_t rows = r.at("shape").at(0).get<uint64_t>();
    const uint64_t chunk_rows = r.at("chunk_rows").get<uint64_t>();
    if (end > file.size() || rows == 0) continue;
    const uint64_t row_bytes = (end - begin) / rows;
    json sums = json::array();
    for (uint64_t k = 0; k < rows; k += chunk_rows)
      sums.push_back(XXH3_64bits(file.data() + begin + k * row_bytes,
                                 std::min(chunk_rows, rows - k) * row_bytes));
    r["xxh3"] = sums;
  }
  m.erase("manifest_xxh3");
  const std::string canonical = m.dump();
  m["manifest_xxh3"] = XXH3_64bits(canonical.data(), canonical.size());
  return m.dump(1);
}

struct Fixture {
  shardrec_comm_t* comm = nullptr;
  shardrec_plan_t* plan = nullptr;
  shardrec_embedding_t* coll = nullptr;
  std::string dir, ckpt, rank_name, rank_file, manifest_text;
  json manifest;
  std::string baseline[kTables];
  shardrec_dynamic_table_stats_t baseline_stats[2];

  Fixture() {
    dir = ScratchDir("rank");  // fuzz_files.h: in memory where there is a tmpfs
    ckpt = dir + "/ckpt";
    FUZZ_CHECK(shardrec_comm_create_local_group(&comm, 1, nullptr) == SHARDREC_OK);
    shardrec::fuzz::OneTablePerFeature cfg(kNames, kTables);
    shardrec_dynamic_table_config_t lru, score;
    shardrec_dynamic_table_config_init(&lru, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
    lru.eviction = SHARDREC_EVICTION_LRU;
    score = lru;
    score.eviction = SHARDREC_EVICTION_SCORE;
    score.admission_threshold = 2;
    for (int i = 0; i < kTables; ++i) {
      cfg.table(i).rows = 4 + i;
      cfg.table(i).dim = 2 + i % 2;
    }
    cfg.table(1).dtype = SHARDREC_DTYPE_FP8_E4M3;
    cfg.table(2).dynamic = &lru;
    cfg.table(3).dynamic = &score;
    plan = cfg.Plan(SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD);
    FUZZ_CHECK(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr) == SHARDREC_OK);
    // Two steps: the dynamic tables admit rows (the SCORE table at an id's second sighting) and
    // count sightings; the SCORE table gets scores.
    for (int step = 0; step < 2; ++step) {
      const int32_t lengths[kTables] = {1, 1, 3, 2};
      const int64_t ids[] = {step, 1, -3, 7 + step, int64_t{1} << 50, 11, -2};
      shardrec::fuzz::TrainOneSample(coll, lengths, kTables, ids, 7);
    }
    const int64_t scored[] = {11, -2};
    const double scores[] = {0.5, -4.0};
    FUZZ_CHECK(shardrec_embedding_dynamic_set_scores(coll, "score", scored, scores, 2, nullptr) ==
               SHARDREC_OK);
    FUZZ_CHECK(shardrec_checkpoint_save(coll, ckpt.c_str(), nullptr) == SHARDREC_OK);
    manifest_text = Slurp(ckpt + "/manifest.json");
    manifest = json::parse(manifest_text);
    FUZZ_CHECK(manifest.at("files").size() == 1);
    rank_name = manifest.at("files").at(0).at("name").get<std::string>();
    rank_file = Slurp(ckpt + "/" + rank_name);
    if (const char* out = std::getenv("SHARDREC_FUZZ_WRITE_SEED"))
      Spit(std::string(out) + "/rank0", std::string(1, '\x01') + rank_file);
    Reset();
    for (int i = 0; i < kTables; ++i) baseline[i] = Export(i);
    Stats(baseline_stats);
  }
  ~Fixture() {
    shardrec_embedding_destroy(coll);
    shardrec_plan_destroy(plan);
    shardrec_comm_destroy(comm);
    (void)std::system(("rm -rf '" + dir + "'").c_str());
  }

  // A fresh collection that loaded the pristine checkpoint.
  void Reset() {
    shardrec_embedding_destroy(coll);
    coll = nullptr;
    FUZZ_CHECK(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr) == SHARDREC_OK);
    Spit(ckpt + "/" + rank_name, rank_file);
    Spit(ckpt + "/manifest.json", manifest_text);
    FUZZ_CHECK(shardrec_checkpoint_load(coll, ckpt.c_str(), nullptr) == SHARDREC_OK);
  }

  void Stats(shardrec_dynamic_table_stats_t out[2]) {
    for (int k = 0; k < 2; ++k) {
      FUZZ_CHECK(shardrec_dynamic_table_stats_init(&out[k], SHARDREC_DYNAMIC_TABLE_STATS_VERSION) ==
                 SHARDREC_OK);
      FUZZ_CHECK(shardrec_embedding_dynamic_stats(coll, kNames[2 + k], &out[k]) == SHARDREC_OK);
    }
  }

  std::string Export(int table) {
    const std::string path = dir + "/out.safetensors";
    FUZZ_CHECK(shardrec_checkpoint_export_table(coll, kNames[table], path.c_str(), 1) ==
               SHARDREC_OK);
    return Slurp(path);
  }
};

}  // namespace

// Serving opens the same checkpoint (its own reader of the rank files: the tables reassembled
// in memory, or "w" and "lru" served from the files through a row cache) and looks up id 0 of
// every feature: OK or a documented error, never anything else.
void Serve(const std::string& ckpt, bool tiered) {
  shardrec_serving_tier_t tiers[2] = {SHARDREC_SERVING_TIER_INIT, SHARDREC_SERVING_TIER_INIT};
  tiers[0].table = "w";
  tiers[1].table = "lru";
  tiers[0].cache_bytes = tiers[1].cache_bytes = 4096;
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.bounds_policy = SHARDREC_BOUNDS_CLAMP;
  if (tiered) {
    o.tiers = tiers;
    o.num_tiers = 2;
  }
  shardrec_inference_t* inf = nullptr;
  const shardrec_status_t rc = shardrec_inference_open(ckpt.c_str(), &o, &inf);
  FUZZ_CHECK(rc == SHARDREC_OK || rc == SHARDREC_ECORRUPT || rc == SHARDREC_EINVAL ||
             rc == SHARDREC_ENOTFOUND || rc == SHARDREC_EUNSUPPORTED || rc == SHARDREC_EIO);
  if (rc != SHARDREC_OK) {
    FUZZ_CHECK(inf == nullptr && std::strlen(shardrec_last_error()) > 0);
    return;
  }
  int64_t dim = 0;
  FUZZ_CHECK(shardrec_inference_output_dim(inf, &dim) == SHARDREC_OK);
  const int32_t lengths[kTables] = {1, 1, 1, 1};
  const int64_t ids[kTables] = {0, 0, 0, 0};
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = 1;
  v.num_features = kTables;
  v.lengths = lengths;
  v.num_lengths = kTables;
  v.values = ids;
  v.values_dtype = SHARDREC_DTYPE_INT64;
  v.num_values = kTables;
  std::vector<float> out(static_cast<size_t>(dim));
  const shardrec_status_t lk = shardrec_inference_lookup(inf, &v, out.data(), out.size(), nullptr);
  // A tiered table reads its rows from the files at lookup time: their checksums were taken at
  // open, so the files (unchanged since) read back clean.
  FUZZ_CHECK(lk == SHARDREC_OK);
  shardrec_inference_destroy(inf);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  if (size == 0) return 0;
  const std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  Spit(fx.ckpt + "/" + fx.rank_name, file);
  Spit(fx.ckpt + "/manifest.json", (data[0] & 1) ? Resigned(fx.manifest, file) : fx.manifest_text);
  shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  Serve(fx.ckpt, (data[0] & 2) != 0);
  const shardrec_status_t rc = shardrec_checkpoint_load(fx.coll, fx.ckpt.c_str(), &o);
  FUZZ_CHECK(rc == SHARDREC_OK || rc == SHARDREC_ECORRUPT || rc == SHARDREC_EINVAL ||
             rc == SHARDREC_ENOTFOUND || rc == SHARDREC_EUNSUPPORTED || rc == SHARDREC_EIO);
  if (rc != SHARDREC_OK) {
    FUZZ_CHECK(std::strlen(shardrec_last_error()) > 0);
    for (int i = 0; i < kTables; ++i) FUZZ_CHECK(fx.Export(i) == fx.baseline[i]);
    shardrec_dynamic_table_stats_t s[2];
    fx.Stats(s);
    for (int k = 0; k < 2; ++k)
      FUZZ_CHECK(s[k].size == fx.baseline_stats[k].size &&
                 s[k].total_inserted == fx.baseline_stats[k].total_inserted &&
                 s[k].total_evicted == fx.baseline_stats[k].total_evicted);
    return 0;
  }
  // Accepted: what the collection holds now saves and loads again to the same tables.
  std::string loaded[kTables];
  for (int i = 0; i < kTables; ++i) loaded[i] = fx.Export(i);
  const std::string again = fx.dir + "/again";
  FUZZ_CHECK(shardrec_checkpoint_save(fx.coll, again.c_str(), nullptr) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_checkpoint_load(fx.coll, again.c_str(), nullptr) == SHARDREC_OK);
  for (int i = 0; i < kTables; ++i) FUZZ_CHECK(fx.Export(i) == loaded[i]);
  fx.Reset();
  return 0;
}
