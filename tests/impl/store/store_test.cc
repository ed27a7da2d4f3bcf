// The log-structured store through RowStore and its white-box opener: reads and writes, erase,
// durability across reopen (only what Flush made durable), identity checks, scans, snapshots,
// compaction, and both read paths (io_uring and pread).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "impl/store/log_store.h"
#include "tests/impl/store/store_test_util.h"

namespace shardrec::store {
namespace {

using testing::Options;
using testing::Range;
using testing::Value;
using testing::Values;

std::unique_ptr<RowStore> MustOpen(const StoreOptions& o) {
  std::unique_ptr<RowStore> s;
  Status st = OpenRowStore(o, &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

// Gets every key and checks it holds round `round` (or is absent when round < 0).
void ExpectRound(RowStore* s, const std::vector<int64_t>& keys, int round) {
  const size_t vb = s->value_bytes();
  std::vector<uint8_t> out(keys.size() * vb, 0xee);
  std::unique_ptr<bool[]> found(new bool[keys.size()]);
  Status st = s->Get(keys.data(), keys.size(), out.data(), found.get());
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (round < 0) {
      EXPECT_FALSE(found[i]) << "key " << keys[i];
      continue;
    }
    ASSERT_TRUE(found[i]) << "key " << keys[i];
    const std::vector<uint8_t> want = Value(keys[i], static_cast<uint32_t>(round), vb);
    ASSERT_EQ(0, std::memcmp(out.data() + i * vb, want.data(), vb)) << "key " << keys[i];
  }
}

void PutRound(RowStore* s, const std::vector<int64_t>& keys, uint32_t round) {
  const std::vector<uint8_t> v = Values(keys, round, s->value_bytes());
  Status st = s->Put(keys.data(), v.data(), keys.size());
  ASSERT_TRUE(st.ok()) << st.ToString();
}

class StoreSizes : public ::testing::TestWithParam<size_t> {};

TEST_P(StoreSizes, PutGetOverwriteEraseAcrossSegments) {
  StoreOptions o = Options("store_basic", GetParam());
  LogTuning t;
  t.segment_bytes = 64 << 10;  // many segments
  t.write_chunk = 16 << 10;
  t.compact_interval_ms = 1000000;  // disk_bytes below counts every write
  std::unique_ptr<LogStore> s;
  ASSERT_TRUE(OpenLogStore(o, t, &s).ok());
  const std::vector<int64_t> keys = Range(-300, 700);
  PutRound(s.get(), keys, 1);
  ExpectRound(s.get(), keys, 1);
  const std::vector<int64_t> half = Range(0, 500);
  PutRound(s.get(), half, 2);
  ExpectRound(s.get(), half, 2);
  ExpectRound(s.get(), Range(-300, 0), 1);
  ASSERT_TRUE(s->Erase(half.data(), half.size()).ok());
  ExpectRound(s.get(), half, -1);
  ExpectRound(s.get(), Range(500, 700), 1);
  const StoreStats st = s->stats();
  EXPECT_EQ(st.live_records, 500);
  EXPECT_GT(st.reads, 0);
  EXPECT_EQ(st.read_bytes % 4096, 0);
  EXPECT_EQ(st.writes, 1500);
  EXPECT_GT(st.disk_bytes, 1500 * static_cast<int64_t>(GetParam()));
  EXPECT_GT(st.index_bytes, 500 * 16);
}

INSTANTIATE_TEST_SUITE_P(ValueBytes, StoreSizes, ::testing::Values(1, 128, 512, 4080, 5000));

// Records of one Get that share a page are read with one I/O (the bytes read count pages), in any
// order of the keys, and each comes back to its own place.
TEST(Store, RecordsSharingAPageAreReadOnce) {
  StoreOptions o = Options("store_page_once", 128);  // 28 records of 144 B per 4 KiB page
  auto s = MustOpen(o);
  const std::vector<int64_t> keys = Range(0, 280);  // pages 1-10 of the segment
  PutRound(s.get(), keys, 1);
  ASSERT_TRUE(s->Flush().ok());  // the records leave the tail buffer: Gets read the file
  const StoreStats before = s->stats();
  // Three keys of the first page and two of the last, interleaved, and one key twice.
  const std::vector<int64_t> want = {0, 279, 5, 270, 27, 5};
  ExpectRound(s.get(), want, 1);
  const StoreStats after = s->stats();
  EXPECT_EQ(after.reads - before.reads, 6);
  EXPECT_EQ(after.read_bytes - before.read_bytes, 2 * 4096);
}

TEST(Store, FlushedStateSurvivesReopenAndUnflushedDoesNot) {
  StoreOptions o = Options("store_reopen");
  const std::vector<int64_t> keys = Range(0, 2000);
  {
    auto s = MustOpen(o);
    PutRound(s.get(), keys, 1);
    ASSERT_TRUE(s->Flush().ok());
    PutRound(s.get(), Range(0, 1000), 2);         // never flushed
    ASSERT_TRUE(s->Erase(&keys[1500], 10).ok());  // never flushed
  }
  auto s = MustOpen(o);
  ExpectRound(s.get(), keys, 1);
  EXPECT_EQ(s->stats().live_records, 2000);
  // Writes after a reopen land in new segments and survive the next flush.
  PutRound(s.get(), Range(0, 1000), 3);
  ASSERT_TRUE(s->Erase(&keys[1500], 10).ok());
  ASSERT_TRUE(s->Flush().ok());
  s.reset();
  s = MustOpen(o);
  ExpectRound(s.get(), Range(0, 1000), 3);
  ExpectRound(s.get(), Range(1500, 1510), -1);
  ExpectRound(s.get(), Range(1510, 2000), 1);
}

TEST(Store, AnotherIdentityOrRecordSizeIsRefusedUnlessRebuilt) {
  StoreOptions o = Options("store_identity");
  {
    auto s = MustOpen(o);
    PutRound(s.get(), Range(0, 100), 1);
    ASSERT_TRUE(s->Flush().ok());
  }
  StoreOptions other = o;
  other.identity = "table t0 shard 0 plan OTHER";
  std::unique_ptr<RowStore> s;
  Status st = OpenRowStore(other, &s);
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find("another store"), std::string::npos) << st.ToString();
  StoreOptions wider = o;
  wider.value_bytes = 256;
  EXPECT_EQ(OpenRowStore(wider, &s).code(), Code::kCorrupt);
  // Refusing changed nothing: the original opens with its records.
  s = MustOpen(o);
  ExpectRound(s.get(), Range(0, 100), 1);
  s.reset();
  other.rebuild = true;
  s = MustOpen(other);
  EXPECT_EQ(s->stats().live_records, 0);
  ExpectRound(s.get(), Range(0, 100), -1);
}

TEST(Store, TornManifestAndSegmentsAreRefusedOrRebuilt) {
  StoreOptions o = Options("store_torn");
  {
    auto s = MustOpen(o);
    PutRound(s.get(), Range(0, 100), 1);
    ASSERT_TRUE(s->Flush().ok());
  }
  const std::string manifest = o.dir + "/MANIFEST";
  std::filesystem::resize_file(manifest, std::filesystem::file_size(manifest) - 3);
  std::unique_ptr<RowStore> s;
  Status st = OpenRowStore(o, &s);
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  // A segment without its manifest is a torn store too.
  std::filesystem::remove(manifest);
  st = OpenRowStore(o, &s);
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  o.rebuild = true;
  s = MustOpen(o);
  ExpectRound(s.get(), Range(0, 100), -1);
}

TEST(Store, CorruptRecordIsReportedByItsChecksum) {
  StoreOptions o = Options("store_bitflip");
  o.direct_io = false;
  {
    auto s = MustOpen(o);
    PutRound(s.get(), Range(0, 10), 1);
    ASSERT_TRUE(s->Flush().ok());
  }
  const std::string seg = o.dir + "/seg-00000001.dat";
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 3 * (128 + 16) + 20);  // inside key 3's value
    f.put('\x5a');
  }
  auto s = MustOpen(o);
  ExpectRound(s.get(), Range(0, 3), 1);
  int64_t key = 3;
  std::vector<uint8_t> out(128);
  bool found = false;
  Status st = s->Get(&key, 1, out.data(), &found);
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find(seg), std::string::npos) << st.ToString();
}

TEST(Store, BadOptionsAreRefusedAndChangeNothing) {
  StoreOptions o = Options("store_options");
  std::unique_ptr<RowStore> s;
  StoreOptions bad = o;
  bad.value_bytes = 0;
  EXPECT_EQ(OpenRowStore(bad, &s).code(), Code::kInvalidArgument);
  bad = o;
  bad.queue_depth = 0;
  EXPECT_EQ(OpenRowStore(bad, &s).code(), Code::kInvalidArgument);
  bad = o;
  bad.compact_dead_ratio = 0;
  EXPECT_EQ(OpenRowStore(bad, &s).code(), Code::kInvalidArgument);
  bad = o;
  bad.dir = "";
  EXPECT_EQ(OpenRowStore(bad, &s).code(), Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(o.dir));
  bad = o;
  bad.read_only = true;  // a read-only open never creates the directory
  Status st = OpenRowStore(bad, &s);
  EXPECT_EQ(st.code(), Code::kIo);
  EXPECT_NE(st.message().find(o.dir), std::string::npos) << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(o.dir));
  std::filesystem::create_directories(o.dir);
  EXPECT_EQ(OpenRowStore(bad, &s).code(), Code::kNotFound);  // no MANIFEST
  // One store per directory.
  auto first = MustOpen(o);
  EXPECT_EQ(OpenRowStore(o, &s).code(), Code::kInvalidUsage);
}

TEST(Store, BadCallsAreRefusedAndChangeNothing) {
  StoreOptions o = Options("store_bad_calls", 16);
  auto s = MustOpen(o);
  PutRound(s.get(), Range(0, 10), 1);
  std::vector<uint8_t> out(16);
  bool found = false;
  int64_t key = 1;
  EXPECT_EQ(s->Put(nullptr, out.data(), 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->Put(&key, nullptr, 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->Erase(nullptr, 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->Get(&key, 1, nullptr, &found).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->Get(&key, 1, out.data(), nullptr).code(), Code::kInvalidArgument);
  int64_t cursor = 0;
  std::vector<int64_t> keys;
  std::vector<uint8_t> values;
  EXPECT_EQ(s->Scan(&cursor, 0, &keys, &values).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->Scan(nullptr, 4, &keys, &values).code(), Code::kInvalidArgument);
  EXPECT_TRUE(s->Put(&key, out.data(), 0).ok());  // an empty batch is a no-op
  EXPECT_EQ(s->stats().live_records, 10);
  EXPECT_EQ(s->stats().writes, 10);
  ExpectRound(s.get(), Range(0, 10), 1);
}

// Contains answers from the index without reading a record: keys put (flushed or still in the
// tail), erased and never put; a read-only snapshot answers for its own state.
TEST(Store, ContainsAnswersFromTheIndexWithoutReading) {
  StoreOptions o = Options("store_contains", 40);
  const std::string snap = shardrec::testing::FreshDir("store_contains_dst") + "/snap";
  auto s = MustOpen(o);
  PutRound(s.get(), Range(0, 500), 1);
  ASSERT_TRUE(s->Flush().ok());
  PutRound(s.get(), Range(500, 520), 1);  // in the tail, not yet written
  ASSERT_TRUE(s->Erase(std::vector<int64_t>{7}.data(), 1).ok());
  const std::vector<int64_t> keys = {0, 7, 499, 500, 519, 520, -1, 100000};
  const bool want[] = {true, false, true, true, true, false, false, false};
  const int64_t reads = s->stats().reads;
  std::unique_ptr<bool[]> found(new bool[keys.size()]);
  ASSERT_TRUE(s->Contains(keys.data(), keys.size(), found.get()).ok());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(found[i], want[i]) << "key " << keys[i];
  EXPECT_EQ(s->stats().reads, reads);
  EXPECT_TRUE(s->Contains(keys.data(), 0, nullptr).ok());  // an empty batch is a no-op
  EXPECT_EQ(s->Contains(nullptr, 1, found.get()).code(), Code::kInvalidArgument);
  ASSERT_TRUE(s->Snapshot(snap).ok());
  ASSERT_TRUE(s->Erase(std::vector<int64_t>{0}.data(), 1).ok());
  StoreOptions ro = o;
  ro.dir = snap;
  ro.read_only = true;
  auto r = MustOpen(ro);
  ASSERT_TRUE(r->Contains(keys.data(), keys.size(), found.get()).ok());
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(found[i], want[i]) << "snapshot key " << keys[i];
}

TEST(Store, ScanVisitsLiveRecordsInKeyOrderInChunks) {
  StoreOptions o = Options("store_scan", 24);
  auto s = MustOpen(o);
  std::vector<int64_t> keys = {INT64_MIN, -5, 3, 7, 1000, INT64_MAX - 1, INT64_MAX};
  for (int64_t k = 100; k < 400; ++k) keys.push_back(k * 7);
  PutRound(s.get(), keys, 4);
  ASSERT_TRUE(s->Erase(&keys[2], 1).ok());  // 3
  std::vector<int64_t> want = keys;
  want.erase(want.begin() + 2);
  std::sort(want.begin(), want.end());
  for (size_t max : {1, 2, 7, 1000}) {
    std::vector<int64_t> seen, chunk;
    std::vector<uint8_t> values;
    int64_t cursor = 0;
    int calls = 0;
    while (cursor != -1) {
      ASSERT_TRUE(s->Scan(&cursor, max, &chunk, &values).ok());
      ASSERT_EQ(values.size(), chunk.size() * 24);
      ASSERT_LE(chunk.size(), max + 1);
      for (size_t i = 0; i < chunk.size(); ++i) {
        ASSERT_EQ(Value(chunk[i], 4, 24),
                  std::vector<uint8_t>(values.begin() + i * 24, values.begin() + (i + 1) * 24));
      }
      seen.insert(seen.end(), chunk.begin(), chunk.end());
      ASSERT_LT(++calls, 1000);
    }
    EXPECT_EQ(seen, want) << "max " << max;
  }
}

TEST(Store, SnapshotIsAReadOnlyCopyOfTheStateAtTheCall) {
  StoreOptions o = Options("store_snapshot");
  const std::string snap = shardrec::testing::FreshDir("store_snapshot_dst") + "/snap";
  auto s = MustOpen(o);
  PutRound(s.get(), Range(0, 3000), 1);
  ASSERT_TRUE(s->Snapshot(snap).ok());
  // Segments are shared by hard link on one file system (store_process_test covers the copy).
  struct stat st {};
  ASSERT_EQ(0, ::stat((snap + "/seg-00000001.dat").c_str(), &st));
  EXPECT_EQ(st.st_nlink, 2u);
  PutRound(s.get(), Range(0, 3000), 2);
  ASSERT_TRUE(s->Erase(std::vector<int64_t>{5}.data(), 1).ok());
  EXPECT_EQ(s->Snapshot(snap).code(), Code::kInvalidArgument);  // exists
  StoreOptions ro = o;
  ro.dir = snap;
  ro.read_only = true;
  auto r = MustOpen(ro);
  ExpectRound(r.get(), Range(0, 3000), 1);
  EXPECT_EQ(r->Put(std::vector<int64_t>{1}.data(), Value(1, 9, 128).data(), 1).code(),
            Code::kInvalidUsage);
  ExpectRound(s.get(), Range(6, 3000), 2);
}

TEST(Store, SnapshotOutlivesCompactionOfItsSegments) {
  StoreOptions o = Options("store_snapshot_compact");
  const std::string snap = shardrec::testing::FreshDir("store_snapshot_compact_dst") + "/snap";
  LogTuning t;
  t.segment_bytes = 32 << 10;
  t.compact_interval_ms = 1000000;
  std::unique_ptr<LogStore> s;
  ASSERT_TRUE(OpenLogStore(o, t, &s).ok());
  PutRound(s.get(), Range(0, 600), 1);
  ASSERT_TRUE(s->Snapshot(snap).ok());
  PutRound(s.get(), Range(0, 600), 2);  // every segment of the snapshot is now dead here
  int rewritten = 0;
  ASSERT_TRUE(s->CompactNow(&rewritten).ok());
  EXPECT_GT(rewritten, 0);
  EXPECT_FALSE(std::filesystem::exists(o.dir + "/seg-00000001.dat"));
  StoreOptions ro = o;
  ro.dir = snap;
  ro.read_only = true;
  auto r = MustOpen(ro);
  ExpectRound(r.get(), Range(0, 600), 1);
  ExpectRound(s.get(), Range(0, 600), 2);
}

// A snapshot links segments instead of copying them, so it reads back the live records of each
// segment it links for the first time: a record damaged on disk since it was written refuses the
// snapshot (kCorrupt naming the segment and slot), which leaves nothing behind, instead of
// publishing a copy that would not load.
TEST(Store, SnapshotRefusesASegmentDamagedSinceItWasWritten) {
  StoreOptions o = Options("store_snapshot_damaged");
  const std::string dst = shardrec::testing::FreshDir("store_snapshot_damaged_dst");
  LogTuning t;
  t.segment_bytes = 32 << 10;
  t.compact_interval_ms = 1000000;
  std::unique_ptr<LogStore> s;
  ASSERT_TRUE(OpenLogStore(o, t, &s).ok());
  PutRound(s.get(), Range(0, 600), 1);
  ASSERT_TRUE(s->Flush().ok());
  {
    // One byte of slot 0's record (the first page after the header) of the first segment.
    std::fstream f(o.dir + "/seg-00000001.dat", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096 + 20);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(4096 + 20);
    f.write(&c, 1);
  }
  const Status refused = s->Snapshot(dst + "/a");
  EXPECT_EQ(refused.code(), Code::kCorrupt) << refused.message();
  EXPECT_NE(std::string(refused.message()).find("seg-00000001.dat slot 0"), std::string::npos)
      << refused.message();
  EXPECT_FALSE(std::filesystem::exists(dst + "/a"));
  // Once the damaged record is replaced (its key written again), the snapshot links a store whose
  // every live record checks.
  PutRound(s.get(), Range(0, 1), 2);
  ASSERT_TRUE(s->Snapshot(dst + "/b").ok());
  StoreOptions ro = o;
  ro.dir = dst + "/b";
  ro.read_only = true;
  auto r = MustOpen(ro);
  ExpectRound(r.get(), Range(0, 1), 2);
  ExpectRound(r.get(), Range(1, 600), 1);
}

TEST(Store, CompactionRewritesMostlyDeadSegmentsAndKeepsEveryRecord) {
  StoreOptions o = Options("store_compact");
  o.compact_dead_ratio = 0.5;
  LogTuning t;
  t.segment_bytes = 32 << 10;
  t.write_chunk = 8 << 10;
  t.compact_interval_ms = 1000000;  // only CompactNow
  std::unique_ptr<LogStore> s;
  ASSERT_TRUE(OpenLogStore(o, t, &s).ok());
  const std::vector<int64_t> keys = Range(0, 1000);
  PutRound(s.get(), keys, 1);
  PutRound(s.get(), Range(0, 800), 2);
  ASSERT_TRUE(s->Erase(&keys[900], 50).ok());
  const int64_t disk_before = s->stats().disk_bytes;
  int rewritten = 0;
  ASSERT_TRUE(s->CompactNow(&rewritten).ok());
  EXPECT_GT(rewritten, 0);
  EXPECT_EQ(s->stats().compactions, rewritten);
  EXPECT_LT(s->stats().disk_bytes, disk_before);
  ExpectRound(s.get(), Range(0, 800), 2);
  ExpectRound(s.get(), Range(800, 900), 1);
  ExpectRound(s.get(), Range(900, 950), -1);
  ExpectRound(s.get(), Range(950, 1000), 1);
  // The compaction flushed: its state is what a reopen sees.
  s.reset();
  ASSERT_TRUE(OpenLogStore(o, t, &s).ok());
  ExpectRound(s.get(), Range(0, 800), 2);
  ExpectRound(s.get(), Range(900, 950), -1);
}

TEST(Store, BackgroundCompactionRunsAndStopsPromptlyOnClose) {
  StoreOptions o = Options("store_compact_thread");
  LogTuning t;
  t.segment_bytes = 32 << 10;
  t.write_chunk = 8 << 10;
  t.compact_interval_ms = 10;
  std::unique_ptr<LogStore> s;
  ASSERT_TRUE(OpenLogStore(o, t, &s).ok());
  for (uint32_t round = 1; round <= 5; ++round) PutRound(s.get(), Range(0, 500), round);
  for (int i = 0; i < 500 && s->stats().compactions == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(s->stats().compactions, 0);
  EXPECT_TRUE(s->compaction_error().ok()) << s->compaction_error().ToString();
  ExpectRound(s.get(), Range(0, 500), 5);
  const auto t0 = std::chrono::steady_clock::now();
  s.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

class StoreReadPaths : public ::testing::TestWithParam<bool> {};

TEST_P(StoreReadPaths, BatchedGetsAgreeOnBothReaders) {
  StoreOptions o = Options(GetParam() ? "store_uring" : "store_pread", 256);
  o.queue_depth = 8;
  LogTuning t;
  t.try_io_uring = GetParam();
  std::unique_ptr<LogStore> s;
  ASSERT_TRUE(OpenLogStore(o, t, &s).ok());
  if (GetParam() && !BuiltWithIoUring()) GTEST_SKIP() << "built without liburing";
  if (GetParam() && !s->uses_io_uring()) {
    GTEST_SKIP() << "the kernel refused an io_uring here (the pread reader is used)";
  }
  EXPECT_EQ(s->uses_io_uring(), GetParam());
  const std::vector<int64_t> keys = Range(0, 5000);
  PutRound(s.get(), keys, 1);
  ASSERT_TRUE(s->Flush().ok());
  // A shuffled batch larger than the queue, with absent keys and a repeated one.
  std::vector<int64_t> batch;
  for (int64_t i = 0; i < 3000; ++i) batch.push_back((i * 7919) % 6000);
  batch.push_back(42);
  const size_t vb = 256;
  std::vector<uint8_t> out(batch.size() * vb);
  std::unique_ptr<bool[]> found(new bool[batch.size()]);
  ASSERT_TRUE(s->Get(batch.data(), batch.size(), out.data(), found.get()).ok());
  for (size_t i = 0; i < batch.size(); ++i) {
    ASSERT_EQ(found[i], batch[i] < 5000) << batch[i];
    if (found[i]) {
      ASSERT_EQ(0, std::memcmp(out.data() + i * vb, Value(batch[i], 1, vb).data(), vb));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(IoUring, StoreReadPaths, ::testing::Values(true, false));

#ifdef SHARDREC_STORE_TEST_NO_URING
// Built as where liburing is absent: a store that asks for io_uring reads with pread.
TEST(Store, WithoutLiburingEveryReadIsPread) {
  EXPECT_FALSE(BuiltWithIoUring());
  StoreOptions o = Options("store_no_liburing");
  LogTuning t;
  t.try_io_uring = true;
  std::unique_ptr<LogStore> s;
  ASSERT_TRUE(OpenLogStore(o, t, &s).ok());
  PutRound(s.get(), Range(0, 100), 1);
  ASSERT_TRUE(s->Flush().ok());
  ExpectRound(s.get(), Range(0, 100), 1);
  EXPECT_FALSE(s->uses_io_uring());
  EXPECT_EQ(s->stats().reads, 100);
}
#endif

}  // namespace
}  // namespace shardrec::store
