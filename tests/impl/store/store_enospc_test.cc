// A full disk: on a small tmpfs the test mounts (it runs as root in CI; skipped with the reason
// where mount is not permitted), Puts go on until the file system is full; the failing Put is
// kIo naming the store's directory and leaves the store as before the call.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "tests/impl/store/store_test_util.h"
#include "tests/support/small_tmpfs.h"

namespace shardrec::store {
namespace {

using shardrec::testing::SmallTmpfs;
using testing::Value;
using testing::Values;

void ExpectHolds(RowStore* s, const std::vector<int64_t>& keys, uint32_t round) {
  const size_t vb = s->value_bytes();
  std::vector<uint8_t> out(keys.size() * vb);
  std::unique_ptr<bool[]> found(new bool[keys.size()]);
  ASSERT_TRUE(s->Get(keys.data(), keys.size(), out.data(), found.get()).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (round == 0) {
      ASSERT_FALSE(found[i]) << keys[i];
    } else {
      ASSERT_TRUE(found[i]) << keys[i];
      ASSERT_EQ(0, std::memcmp(out.data() + i * vb, Value(keys[i], round, vb).data(), vb));
    }
  }
}

TEST(StoreFullDisk, FailedPutIsIoNamingTheDirectoryAndChangesNothing) {
  SmallTmpfs fs("store_enospc", "size=512k");
  if (!fs.mounted()) GTEST_SKIP() << "cannot mount a small tmpfs here: " << fs.error();
  StoreOptions o;
  o.dir = fs.dir() + "/store";
  o.identity = "full disk";
  o.value_bytes = 256;
  LogTuning t;
  t.segment_bytes = 64 << 10;
  t.write_chunk = 16 << 10;
  t.compact_interval_ms = 1000000;
  std::unique_ptr<LogStore> s;
  ASSERT_TRUE(OpenLogStore(o, t, &s).ok());
  std::vector<int64_t> stored;
  Status st;
  for (int64_t next = 0; next < 100000; next += 150) {
    std::vector<int64_t> batch;
    for (int64_t k = next; k < next + 150; ++k) batch.push_back(k);
    const std::vector<uint8_t> v = Values(batch, 1, o.value_bytes);
    st = s->Put(batch.data(), v.data(), batch.size());
    if (!st.ok()) {
      ExpectHolds(s.get(), batch, 0);  // none of the failed call's records is visible
      break;
    }
    stored.insert(stored.end(), batch.begin(), batch.end());
  }
  ASSERT_EQ(st.code(), Code::kIo) << "the 512 KiB file system never filled: " << st.ToString();
  EXPECT_NE(st.message().find(o.dir), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find(std::strerror(ENOSPC)), std::string::npos) << st.ToString();
  ASSERT_GT(stored.size(), 0u);
  const StoreStats before = s->stats();
  EXPECT_EQ(before.live_records, static_cast<int64_t>(stored.size()));
  ExpectHolds(s.get(), stored, 1);
  // Overwrites that cannot fit fail as a whole: the old values stay.
  const std::vector<uint8_t> v2 = Values(stored, 2, o.value_bytes);
  st = s->Put(stored.data(), v2.data(), stored.size());
  EXPECT_EQ(st.code(), Code::kIo) << st.ToString();
  ExpectHolds(s.get(), stored, 1);
  EXPECT_EQ(s->stats().live_records, before.live_records);
  EXPECT_LE(s->stats().disk_bytes, before.disk_bytes);
}

// A snapshot onto another file system cannot hard-link the segments: it copies them.
TEST(StoreSnapshot, OntoAnotherFileSystemCopiesTheSegments) {
  SmallTmpfs fs("store_enospc", "size=16m");
  if (!fs.mounted()) GTEST_SKIP() << "cannot mount a small tmpfs here: " << fs.error();
  StoreOptions o = testing::Options("store_snapshot_copy", 200);
  auto keys = testing::Range(0, 5000);
  std::unique_ptr<RowStore> s;
  ASSERT_TRUE(OpenRowStore(o, &s).ok());
  const std::vector<uint8_t> v = Values(keys, 1, o.value_bytes);
  ASSERT_TRUE(s->Put(keys.data(), v.data(), keys.size()).ok());
  const std::string snap = fs.dir() + "/snap";
  Status st = s->Snapshot(snap);
  ASSERT_TRUE(st.ok()) << st.ToString();
  // Written after the snapshot: not in it.
  const std::vector<uint8_t> v2 = Values(keys, 2, o.value_bytes);
  ASSERT_TRUE(s->Put(keys.data(), v2.data(), keys.size()).ok());
  struct stat info {};
  ASSERT_EQ(0, ::stat((snap + "/seg-00000001.dat").c_str(), &info));
  EXPECT_EQ(info.st_nlink, 1u);  // a copy, not a link
  StoreOptions ro = o;
  ro.dir = snap;
  ro.read_only = true;
  std::unique_ptr<RowStore> r;
  ASSERT_TRUE(OpenRowStore(ro, &r).ok());
  ExpectHolds(r.get(), keys, 1);
  ExpectHolds(s.get(), keys, 2);
}

}  // namespace
}  // namespace shardrec::store
