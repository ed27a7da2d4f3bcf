// Dynamic checkpoints that are well-formed files with contents no save writes: an "ids" record
// that repeats an id (within one row block, every id the same, or across two blocks), its chunk
// checksums and the manifest's checksum signed again as a writer would, so that only the
// loader's own checks can tell. The load fails with SHARDREC_ECORRUPT on every rank, naming the
// id and the record, and changes nothing. (It used to load: the shard then held the id in two
// slots, and a later eviction of it spun forever in the shard's index.) A forward counter beyond
// any run (which training would overflow) is corrupt too, and so is a score no call could set
// (NaN or infinite).
#include <gtest/gtest.h>
// Header-only XXH3, to sign the edited record and manifest as a writer would.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int32_t kWorld = 2;
constexpr int32_t kSteps = 3;

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// The manifest's record `key` and the name of its file.
const json* FindRecord(const json& m, const std::string& key, std::string* file) {
  for (const json& f : m["files"]) {
    for (const json& r : f["records"]) {
      if (r["key"] != key) continue;
      *file = f["name"].get<std::string>();
      return &r;
    }
  }
  return nullptr;
}

// The key of table t0's `tensor` record of its row block at row 0 (first_block) or at another
// row; empty when there is none.
std::string RecordKey(const std::string& dir, bool first_block, const char* tensor = "ids") {
  const json m = json::parse(ReadText(dir + "/manifest.json"));
  for (const json& f : m["files"])
    for (const json& r : f["records"])
      if (r["table"] == "t0" && r["tensor"] == tensor && (r["offsets"][0] == 0) == first_block)
        return r["key"].get<std::string>();
  return "";
}

std::vector<int64_t> ReadIds(const std::string& dir, const std::string& key) {
  const json m = json::parse(ReadText(dir + "/manifest.json"));
  std::string file;
  const json* r = FindRecord(m, key, &file);
  if (r == nullptr) return {};
  const std::string data = ReadText(dir + "/" + file);
  const auto begin = (*r)["byte_range"][0].get<size_t>();
  std::vector<int64_t> ids(((*r)["byte_range"][1].get<size_t>() - begin) / 8);
  std::memcpy(ids.data(), data.data() + begin, ids.size() * 8);
  return ids;
}

// Writes `ids` (as many as the record holds) into the int64 record `key`, then signs its chunks and
// the manifest again: the XXH3 of every chunk of chunk_rows rows, and manifest_xxh3 over the
// manifest's compact form without that member (docs/checkpoint-format.md).
void WriteIds(const std::string& dir, const std::string& key, const std::vector<int64_t>& ids) {
  json m = json::parse(ReadText(dir + "/manifest.json"));
  for (json& f : m["files"]) {
    for (json& r : f["records"]) {
      if (r["key"] != key) continue;
      const std::string path = dir + "/" + f["name"].get<std::string>();
      std::string data = ReadText(path);
      const auto begin = r["byte_range"][0].get<size_t>();
      ASSERT_EQ(r["byte_range"][1].get<size_t>() - begin, ids.size() * 8);
      std::memcpy(data.data() + begin, ids.data(), ids.size() * 8);
      WriteText(path, data);
      const auto chunk = r["chunk_rows"].get<size_t>();
      r["xxh3"] = json::array();
      for (size_t lo = 0; lo < ids.size(); lo += chunk)
        r["xxh3"].push_back(
            XXH3_64bits(data.data() + begin + lo * 8, (std::min(ids.size(), lo + chunk) - lo) * 8));
    }
  }
  m.erase("manifest_xxh3");
  const std::string canonical = m.dump();
  m["manifest_xxh3"] = XXH3_64bits(canonical.data(), canonical.size());
  WriteText(dir + "/manifest.json", m.dump(1));
}

// Rank r's forward of every pool id, one per bag (the rows it holds).
std::vector<float> Probe(shardrec_embedding_t* c, const Stream& st, int32_t r, int64_t dim) {
  std::vector<float> out(static_cast<size_t>(st.probe.batch_size * dim), 0.0f);
  ForwardSlice(c, st.probe, kWorld, r, dim, out.data());
  return out;
}

// A checkpoint of kSteps training steps of `s` in `good`.
void SaveTrained(const DynScenario& s, shardrec_plan_t* plan, const Stream& st, int64_t dim,
                 const std::string& good) {
  if (plan == nullptr) return;
  SpawnRanks(kWorld, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan, kWorld, r, &coll);
    if (coll == nullptr) return;
    for (int32_t step = 0; step < kSteps; ++step) {
      ForwardSlice(coll.get(), st.batches[step], kWorld, r, dim, nullptr);
      BackwardSlice(coll.get(), st.grads[step], kWorld, r, dim);
    }
    ASSERT_EQ(shardrec_checkpoint_save(coll.get(), good.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  });
}

// A row-wise two-table scenario with `optimizer`, its stream and plan, trained and saved in
// `dir`.
struct Trained {
  Trained(int32_t optimizer, const std::string& dir)
      : s(MakeDynScenario(kWorld, SHARDREC_SHARDING_ROW_WISE, optimizer, 64, 24)),
        dim(DynOutputDim(s)),
        st(MakeStream(s, dim, kSteps + 1)),
        plan(MakeDynPlan(s)) {
    SaveTrained(s, plan.get(), st, dim, dir);
  }
  DynScenario s;
  int64_t dim;
  Stream st;
  PlanPtr plan;
};

// On every rank, a collection loaded from `good` refuses `bad` with SHARDREC_ECORRUPT whose
// message holds each of `needles`, and its weights stay as `good` loaded them.
void ExpectCorruptChangesNothing(const DynScenario& s, const shardrec_plan_t* plan,
                                 const Stream& st, int64_t dim, const std::string& good,
                                 const std::string& bad, const std::vector<std::string>& needles) {
  SpawnRanks(kWorld, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan, kWorld, r, &coll);
    if (coll == nullptr) return;
    shardrec_embedding_t* e = coll.get();
    ASSERT_EQ(shardrec_checkpoint_load(e, good.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    const std::vector<float> before = Probe(e, st, r, dim);
    EXPECT_EQ(shardrec_checkpoint_load(e, bad.c_str(), nullptr), SHARDREC_ECORRUPT) << "rank " << r;
    const std::string msg = shardrec_last_error();
    for (const std::string& needle : needles)
      EXPECT_NE(msg.find(needle), std::string::npos) << "rank " << r << ": " << msg;
    EXPECT_EQ(Probe(e, st, r, dim), before) << "rank " << r;
  });
}

// A forward counter near INT64_MAX (every block alike, signed as a writer would) used to load,
// and training then overflowed it. Counters beyond 2^62 are corrupt; nothing changes.
TEST(DynamicCheckpointReject, AForwardCounterBeyondAnyRunIsCorrupt) {
  const std::string good = FreshDir("fwd_counter"), bad = FreshDir("fwd_counter_bad");
  const Trained t(SHARDREC_OPTIMIZER_SGD, good);
  const DynScenario& s = t.s;
  const int64_t dim = t.dim;
  const Stream& st = t.st;
  const PlanPtr& plan = t.plan;
  ASSERT_NE(plan, nullptr);
  fs::remove_all(bad);
  fs::copy(good, bad);
  for (const bool first : {true, false}) {
    const std::string key = RecordKey(bad, first, "dynamic_meta");
    std::vector<int64_t> meta = ReadIds(bad, key);
    ASSERT_EQ(meta.size(), 3u);
    meta[0] = INT64_MAX - 1;
    WriteIds(bad, key, meta);
  }
  SpawnRanks(kWorld, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), kWorld, r, &coll);
    if (coll == nullptr) return;
    shardrec_embedding_t* e = coll.get();
    const std::vector<float> before = Probe(e, st, r, dim);
    EXPECT_EQ(shardrec_checkpoint_load(e, bad.c_str(), nullptr), SHARDREC_ECORRUPT) << "rank " << r;
    EXPECT_NE(std::string(shardrec_last_error()).find("dynamic_meta"), std::string::npos)
        << shardrec_last_error();
    EXPECT_EQ(Probe(e, st, r, dim), before) << "rank " << r;
  });
}

// A row block's dynamic_meta said 0 live rows while its ids, last_seen, count, weights and state
// records kept theirs (all signed as a writer would): the load skipped those records and
// emptied the block. Last-seen forwards outside 0..the forward counter (INT64_MIN, INT64_MAX,
// one past the counter, -1) loaded too, and so did a block of more slots than the table has.
// Each is corrupt, naming the record; nothing changes.
TEST(DynamicCheckpointReject, RecordsOfOtherRowsThanTheMetaAndStrayLastSeenAreCorrupt) {
  const std::string good = FreshDir("meta_rows");
  const Trained t(SHARDREC_OPTIMIZER_ADAM, good);
  const DynScenario& s = t.s;
  const int64_t dim = t.dim;
  const Stream& st = t.st;
  const PlanPtr& plan = t.plan;
  ASSERT_NE(plan, nullptr);
  const std::string meta_key = RecordKey(good, true, "dynamic_meta");
  const std::string ids_key = RecordKey(good, true, "ids");
  const std::string seen_key = RecordKey(good, true, "last_seen");
  const std::vector<int64_t> meta = ReadIds(good, meta_key), seen = ReadIds(good, seen_key);
  ASSERT_EQ(meta.size(), 3u);
  ASSERT_GE(meta[1], 1) << "row block 0 of t0 should hold rows";
  ASSERT_EQ(seen.size(), static_cast<size_t>(meta[1]));
  const int64_t forwards = meta[0];
  ASSERT_GE(forwards, 1);

  struct Case {
    std::string name, key;
    std::vector<int64_t> values;  // the new values of record `key`
    std::string needle;           // besides the key of the record it names
    std::string named;            // that record's key
  };
  std::vector<Case> cases;
  cases.push_back({"meta_zero_rows", meta_key, {forwards, 0, meta[2]}, ids_key, ids_key});
  for (const int64_t v : {INT64_MIN, INT64_MAX, forwards + 1, int64_t{-1}}) {
    cases.push_back({"last_seen_" + std::to_string(v), seen_key, seen, "", seen_key});
    cases.back().values.back() = v;
    cases.back().needle =
        "last seen at forward " + std::to_string(v) + ", outside 0.." + std::to_string(forwards);
  }
  // Slots beyond the saved table's capacity (64 rows), however many rows the block holds.
  for (const int64_t slots : {int64_t{65}, INT64_MAX})
    cases.push_back({"meta_slots_" + std::to_string(slots),
                     meta_key,
                     {forwards, meta[1], slots},
                     "beyond the table's capacity of 64",
                     meta_key});

  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string bad = FreshDir("meta_rows_" + c.name);
    fs::remove_all(bad);
    fs::copy(good, bad);
    WriteIds(bad, c.key, c.values);
    ExpectCorruptChangesNothing(s, plan.get(), st, dim, good, bad, {c.needle, c.named});
  }
}

// A SCORE table's saved score that is NaN or infinite (signed as a writer would) loaded: no call
// sets one (set_scores refuses them, docs/dynamic-tables.md "Scores"), and the shard then ordered
// its victims by it (a NaN above every finite score or below it, by its sign bit). It is corrupt,
// naming the record and the row; nothing changes.
TEST(DynamicCheckpointReject, ANonFiniteScoreIsCorrupt) {
  const std::string good = FreshDir("score_nonfinite");
  DynScenario s =
      MakeDynScenario(kWorld, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_SGD, 64, 24);
  for (shardrec_dynamic_table_config_t& d : s.dynamic) d.eviction = SHARDREC_EVICTION_SCORE;
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, kSteps + 1);
  const PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  SaveTrained(s, plan.get(), st, dim, good);
  const std::string score_key = RecordKey(good, true, "score");
  ASSERT_FALSE(score_key.empty()) << "a SCORE table saves a score record per row block";
  const std::vector<int64_t> scores = ReadIds(good, score_key);  // the doubles' bits
  ASSERT_GE(scores.size(), 2u);
  for (const double v : {std::nan(""), -std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    SCOPED_TRACE(v);
    const std::string bad = FreshDir("score_nonfinite_bad");
    fs::remove_all(bad);
    fs::copy(good, bad);
    std::vector<int64_t> edited = scores;
    std::memcpy(&edited[1], &v, sizeof(v));
    WriteIds(bad, score_key, edited);
    ExpectCorruptChangesNothing(s, plan.get(), st, dim, good, bad, {score_key, "row 1 has score"});
  }
}

TEST(DynamicCheckpointReject, RepeatedIdIsCorruptOnEveryRankAndChangesNothing) {
  const std::string good = FreshDir("dup_ids");
  const Trained t(SHARDREC_OPTIMIZER_ADAM, good);
  const DynScenario& s = t.s;
  const int64_t dim = t.dim;
  const Stream& st = t.st;
  const PlanPtr& plan = t.plan;
  ASSERT_NE(plan, nullptr);
  const std::string first = RecordKey(good, true), other = RecordKey(good, false);
  const std::vector<int64_t> ids = ReadIds(good, first), other_ids = ReadIds(good, other);
  ASSERT_GE(ids.size(), 2u) << "row block 0 of t0 should hold a few ids";
  ASSERT_GE(other_ids.size(), 1u) << "the other row block of t0 should hold ids";

  struct Case {
    const char* name;
    std::vector<int64_t> ids;  // the new values of record `first`
    int64_t repeated;          // the id the error names
  };
  std::vector<Case> cases;
  cases.push_back({"all_same", std::vector<int64_t>(ids.size(), ids[0]), ids[0]});
  cases.push_back({"one_repeat", ids, ids[0]});
  cases.back().ids[1] = ids[0];
  // Another block's id: it lands in that block's shard under the new plan, on the other rank.
  cases.push_back({"across_blocks", ids, other_ids[0]});
  cases.back().ids.back() = other_ids[0];

  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string bad = FreshDir(std::string("dup_ids_") + c.name);
    fs::copy(good, bad);
    WriteIds(bad, first, c.ids);
    SpawnRanks(kWorld, [&](int r) {
      CollPtr coll;
      MakeStreamCollection(s, plan.get(), kWorld, r, &coll);
      if (coll == nullptr) return;
      shardrec_embedding_t* e = coll.get();
      ASSERT_EQ(shardrec_checkpoint_load(e, good.c_str(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
      const shardrec_status_t rc = shardrec_checkpoint_load(e, bad.c_str(), nullptr);
      const std::string msg = shardrec_last_error();
      // Loaded, the table holds an id twice: a forward may never return. Stop here.
      ASSERT_NE(rc, SHARDREC_OK) << "rank " << r << " loaded a checkpoint that repeats an id";
      EXPECT_EQ(rc, SHARDREC_ECORRUPT) << "rank " << r << ": " << msg;
      EXPECT_NE(msg.find("id " + std::to_string(c.repeated) + " "), std::string::npos)
          << "rank " << r << ": " << msg;
      EXPECT_NE(msg.find(first), std::string::npos) << "rank " << r << ": " << msg;
      // Nothing changed: the rows are those of the good checkpoint, and training goes on.
      const std::vector<float> after = Probe(e, st, r, dim);
      ASSERT_EQ(shardrec_checkpoint_load(e, good.c_str(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
      const std::vector<float> want = Probe(e, st, r, dim);
      EXPECT_EQ(std::memcmp(after.data(), want.data(), after.size() * sizeof(float)), 0)
          << "rank " << r << ": the refused load changed rows";
      ForwardSlice(e, st.batches[kSteps], kWorld, r, dim, nullptr);
      BackwardSlice(e, st.grads[kSteps], kWorld, r, dim);
    });
  }
}

}  // namespace
}  // namespace shardrec::testing
