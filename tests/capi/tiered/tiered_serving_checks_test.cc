// A served tiered checkpoint's files changed after open (docs/disk-tier.md, "Serving"): a byte of
// a row flipped in an in-memory save's rank file, the file cut short, or a store snapshot's
// records damaged. The lookups that read the changed bytes fail with SHARDREC_ECORRUPT naming
// the file and the table, change no statistics and cache nothing; every other row is served with
// the bits of the checkpoint opened in memory; once the bytes are back, the same lookups are
// served again, bit-identical. Fixed and dynamic tables, as trained, fp16, int8 and fp8.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/capi/tiered/tiered_serving_util.h"
#include "tests/capi/tiered/tiered_test_util.h"

namespace shardrec::testing {
namespace {

// The unit a lookup checks (docs/disk-tier.md, "Serving"): whole rows of the record, the fewest
// of at least 512 bytes: 16 of t0's 32-byte rows below.
constexpr int64_t kUnitRows = 16;
const int32_t kStorages[] = {SHARDREC_SERVING_AS_TRAINED, SHARDREC_SERVING_FP16,
                             SHARDREC_SERVING_INT8, SHARDREC_SERVING_FP8_E4M3};

// Where a rank file holds a weights record: the file and its bytes [begin, end).
struct Place {
  std::string file;
  uint64_t begin = 0, end = 0;
};

// The largest weights record of `table` in `ckpt`'s rank files.
Place LargestWeights(const std::string& ckpt, const std::string& table) {
  Place p;
  const nlohmann::json m = ReadManifest(ckpt);
  for (const auto& f : m.at("files")) {
    if (f.contains("store")) continue;
    for (const auto& r : f.at("records")) {
      if (r.at("table") != table || r.at("tensor") != "weights") continue;
      const uint64_t b = r.at("byte_range").at(0), e = r.at("byte_range").at(1);
      if (e - b > p.end - p.begin) p = {ckpt + "/" + f.at("name").get<std::string>(), b, e};
    }
  }
  return p;
}

// Flips byte `at` of `file` in place (the served handle keeps the file open); twice restores it.
void FlipByte(const std::string& file, uint64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  f.seekg(static_cast<std::streamoff>(at));
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << file;
}

// A request of one id of table t0 (feature 0) or t1 (feature 1).
RefBatch One(int64_t id, int table = 0) {
  RefBatch b;
  b.batch_size = 1;
  b.lengths = {table == 0 ? 1 : 0, table == 0 ? 0 : 1, 0};
  b.ids = {id};
  return b;
}

void ExpectSameStats(const shardrec_serving_tier_stats_t& a,
                     const shardrec_serving_tier_stats_t& b) {
  EXPECT_EQ(a.hits, b.hits);
  EXPECT_EQ(a.misses, b.misses);
  EXPECT_EQ(a.disk_reads, b.disk_reads);
  EXPECT_EQ(a.disk_read_bytes, b.disk_read_bytes);
  EXPECT_EQ(a.cache_rows, b.cache_rows);
}

// Looks up `b` on `disk`: served with `mem`'s bits (true), or refused with ECORRUPT naming
// `file` and table t0, the statistics of t0 unchanged (false).
bool ServedOrRefused(shardrec_inference_t* disk, shardrec_inference_t* mem, const RefBatch& b,
                     const std::string& file) {
  const shardrec_serving_tier_stats_t before = Stats(disk, "t0");
  std::vector<float> got;
  const shardrec_status_t rc = TryLookup(disk, b, &got);
  if (rc == SHARDREC_OK) {
    EXPECT_EQ(FirstBitDifference(got, Lookup(mem, b, nullptr)), "") << "id " << b.ids[0];
    return true;
  }
  const std::string msg = shardrec_last_error();
  EXPECT_EQ(rc, SHARDREC_ECORRUPT) << msg;
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("table t0"), std::string::npos) << msg;
  ExpectSameStats(before, Stats(disk, "t0"));
  return false;
}

// Fixed tables of 600 rows (t0: 32-byte rows, 19200 bytes) saved in memory by one
// rank: row r of t0 lies at the record's start + 32 r.
Saved FixedCheckpoint() {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, 3, 600, 600);
  s.fixed = true;
  for (auto& pool : s.pools)
    for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int64_t>(i);
  return TrainAndSave(s, 1, SHARDREC_SHARDING_TABLE_WISE, false, "checks_fixed");
}

TEST(TieredServingChecks, AFlippedByteOfARankFileFailsTheLookupsThatReadIt) {
  const Saved sv = FixedCheckpoint();
  ASSERT_FALSE(::testing::Test::HasFailure());
  const Place p = LargestWeights(sv.second, "t0");
  ASSERT_EQ(p.end - p.begin, 600u * 32);
  const int64_t row = 300;
  const uint64_t flipped = p.begin + row * 32 + 5;
  for (int32_t storage : kStorages) {
    SCOPED_TRACE("storage " + std::to_string(storage));
    Inf mem = OpenOk(sv.second, storage, 0);
    Inf disk = OpenOk(sv.second, storage, 200);  // a row or two: every new row is a miss
    ASSERT_TRUE(mem && disk);
    FlipByte(p.file, flipped);
    EXPECT_FALSE(ServedOrRefused(disk.get(), mem.get(), One(row), p.file));
    // The flipped row again (it was not cached), then every row: a row is refused only where it
    // shares a checked unit with the flipped byte (rows 288..303); the others, and t1, are
    // served bit-identical.
    EXPECT_FALSE(ServedOrRefused(disk.get(), mem.get(), One(row), p.file));
    int refused = 0;
    for (int64_t r = 0; r < 600; ++r) {
      const bool near = r / kUnitRows == row / kUnitRows;
      const bool served = ServedOrRefused(disk.get(), mem.get(), One(r), p.file);
      EXPECT_EQ(served, !near) << "row " << r;
      refused += !served;
      EXPECT_EQ(FirstBitDifference(Lookup(disk.get(), One(r, 1), nullptr),
                                   Lookup(mem.get(), One(r, 1), nullptr)),
                "");
    }
    EXPECT_EQ(refused, kUnitRows);
    FlipByte(p.file, flipped);  // back as saved: the same lookup is served
    EXPECT_TRUE(ServedOrRefused(disk.get(), mem.get(), One(row), p.file));
    EXPECT_GT(Stats(disk.get(), "t0").misses, 0);
  }
}

TEST(TieredServingChecks, AFlippedByteOfTheRecordsLastUnitFailsItsRowsOnly) {
  // 600 rows are 37 whole units of 16 rows and a last unit of 8 (rows 592..599), clipped to the
  // record: its last byte flipped refuses those 8 rows and serves every other.
  const Saved sv = FixedCheckpoint();
  ASSERT_FALSE(::testing::Test::HasFailure());
  const Place p = LargestWeights(sv.second, "t0");
  ASSERT_EQ(p.end - p.begin, 600u * 32);
  Inf mem = OpenOk(sv.second, SHARDREC_SERVING_AS_TRAINED, 0);
  Inf disk = OpenOk(sv.second, SHARDREC_SERVING_AS_TRAINED, 200);
  ASSERT_TRUE(mem && disk);
  FlipByte(p.file, p.end - 1);
  int refused = 0;
  for (int64_t r = 0; r < 600; ++r) {
    const bool served = ServedOrRefused(disk.get(), mem.get(), One(r), p.file);
    EXPECT_EQ(served, r < 592) << "row " << r;
    refused += !served;
  }
  EXPECT_EQ(refused, 8);
  FlipByte(p.file, p.end - 1);
  for (int64_t r = 592; r < 600; ++r)
    EXPECT_TRUE(ServedOrRefused(disk.get(), mem.get(), One(r), p.file)) << "row " << r;
}

TEST(TieredServingChecks, ARankFileCutShortFailsTheLookupsPastTheCut) {
  const Saved sv = FixedCheckpoint();
  ASSERT_FALSE(::testing::Test::HasFailure());
  const Place p = LargestWeights(sv.second, "t0");
  Inf mem = OpenOk(sv.second, SHARDREC_SERVING_AS_TRAINED, 0);
  Inf disk = OpenOk(sv.second, SHARDREC_SERVING_AS_TRAINED, 200);
  ASSERT_TRUE(mem && disk);
  std::string saved;
  {
    std::ifstream in(p.file, std::ios::binary);
    saved.assign(std::istreambuf_iterator<char>(in), {});
  }
  const uint64_t cut = p.begin + 300 * 32;
  std::filesystem::resize_file(p.file, cut);  // the same file, shorter (never zeros)
  for (int64_t r : {300, 301, 450, 599})
    EXPECT_FALSE(ServedOrRefused(disk.get(), mem.get(), One(r), p.file)) << r;
  for (int64_t r : {0, 10, 100})
    EXPECT_TRUE(ServedOrRefused(disk.get(), mem.get(), One(r), p.file)) << r;
  {
    std::fstream out(p.file, std::ios::in | std::ios::out | std::ios::binary);
    out.write(saved.data(), static_cast<std::streamsize>(saved.size()));
    ASSERT_TRUE(out.good());
  }
  for (int64_t r : {300, 301, 450, 599})
    EXPECT_TRUE(ServedOrRefused(disk.get(), mem.get(), One(r), p.file)) << r;
}

TEST(TieredServingChecks, ADynamicTablesRankFileChangedAfterOpen) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, 3, 600, 300);
  const Saved sv = TrainAndSave(s, 1, SHARDREC_SHARDING_TABLE_WISE, false, "checks_dynamic");
  ASSERT_FALSE(::testing::Test::HasFailure());
  const Place p = LargestWeights(sv.second, "t0");
  ASSERT_GT(p.end, p.begin);
  const uint64_t flipped = (p.begin + p.end) / 2;
  for (int32_t storage : kStorages) {
    SCOPED_TRACE("storage " + std::to_string(storage));
    Inf mem = OpenOk(sv.second, storage, 0);
    Inf disk = OpenOk(sv.second, storage, 200);
    ASSERT_TRUE(mem && disk);
    FlipByte(p.file, flipped);
    // t0's ids: refused where their row shares the flipped unit, else served (ids without a row
    // read the zero row); t1's rows, in the same file, all served.
    int refused = 0;
    for (int64_t id : s.pools[0])
      refused += !ServedOrRefused(disk.get(), mem.get(), One(id), p.file);
    EXPECT_GT(refused, 0);
    for (int64_t id : s.pools[1])
      EXPECT_EQ(FirstBitDifference(Lookup(disk.get(), One(id, 1), nullptr),
                                   Lookup(mem.get(), One(id, 1), nullptr)),
                "");
    FlipByte(p.file, flipped);
    for (int64_t id : s.pools[0])
      EXPECT_TRUE(ServedOrRefused(disk.get(), mem.get(), One(id), p.file)) << id;
  }
}

TEST(TieredServingChecks, AStoreSnapshotsRecordsChangedAfterOpen) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, 3, 80, 200);
  const Saved sv = TrainAndSave(s, 1, SHARDREC_SHARDING_TABLE_WISE, true, "checks_store");
  ASSERT_FALSE(::testing::Test::HasFailure());
  std::string dir;
  uint64_t value_bytes = 0;
  const nlohmann::json m = ReadManifest(sv.second);
  for (const auto& f : m.at("files"))
    if (f.contains("store") && f.at("records").at(0).at("table") == "t0") {
      dir = sv.second + "/" + f.at("name").get<std::string>();
      value_bytes = f.at("store").at("value_bytes");
    }
  ASSERT_NE(dir, "");
  Inf mem = OpenOk(sv.second, SHARDREC_SERVING_FP16, 0);
  Inf disk = OpenOk(sv.second, SHARDREC_SERVING_FP16, 200);
  ASSERT_TRUE(mem && disk);
  DamageSegments(dir, value_bytes);  // a byte of every record's value
  int refused = 0;
  for (int64_t id : s.pools[0]) refused += !ServedOrRefused(disk.get(), mem.get(), One(id), dir);
  EXPECT_GT(refused, 0);
  for (int64_t id : s.pools[1])
    EXPECT_EQ(FirstBitDifference(Lookup(disk.get(), One(id, 1), nullptr),
                                 Lookup(mem.get(), One(id, 1), nullptr)),
              "");
  DamageSegments(dir, value_bytes);  // flipped back
  for (int64_t id : s.pools[0])
    EXPECT_TRUE(ServedOrRefused(disk.get(), mem.get(), One(id), dir)) << id;
}

}  // namespace
}  // namespace shardrec::testing
