// What a served tiered table's open reads (impl/serving/tiered_open.h, docs/disk-tier.md,
// "Serving"): every byte of its rank files' records is read once, and only through the file
// system it is given. Checkpoints come from training runs through the C API (libshardrec.so,
// the tiered serving tests' helpers); the open is the library's own, over a file system that
// logs each read. Fixed tables (row- and column-wise, records of several chunks) and dynamic
// ones, as trained and quantized.
#include "impl/serving/tiered_open.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/fs.h"
#include "impl/core/check.h"
#include "impl/core/row_format.h"
#include "impl/serving/model.h"
#include "impl/sharding/plan_json.h"
#include "tests/capi/tiered/tiered_serving_util.h"

namespace shardrec::serving {
namespace {

using checkpoint::FileSystem;
using checkpoint::ReadableFile;

// The reads made through a file system: per path, its [offset, offset + n) spans.
struct ReadLog {
  std::mutex mu;
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> spans;
  uint64_t bytes = 0;
};

class LoggedFile final : public ReadableFile {
 public:
  LoggedFile(std::unique_ptr<ReadableFile> f, std::string path, ReadLog* log)
      : f_(std::move(f)), path_(std::move(path)), log_(log) {}
  uint64_t size() const override { return f_->size(); }
  Status ReadAt(uint64_t offset, void* out, size_t n) const override {
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      log_->spans[path_].push_back({offset, offset + n});
      log_->bytes += n;
    }
    return f_->ReadAt(offset, out, n);
  }

 private:
  std::unique_ptr<ReadableFile> f_;
  std::string path_;
  ReadLog* log_;
};

// POSIX, each file it opens for reading logging its reads.
class LoggedFileSystem final : public FileSystem {
 public:
  explicit LoggedFileSystem(ReadLog* log) : posix_(checkpoint::PosixFileSystem()), log_(log) {}
  Status CreateDir(const std::string& dir) override { return posix_->CreateDir(dir); }
  Status NewWritable(const std::string& path,
                     std::unique_ptr<checkpoint::WritableFile>* out) override {
    return posix_->NewWritable(path, out);
  }
  Status OpenReadable(const std::string& path, std::unique_ptr<ReadableFile>* out) override {
    std::unique_ptr<ReadableFile> f;
    SR_RETURN_IF_ERROR(posix_->OpenReadable(path, &f));
    *out = std::make_unique<LoggedFile>(std::move(f), path, log_);
    return Status::Ok();
  }
  Status Rename(const std::string& from, const std::string& to) override {
    return posix_->Rename(from, to);
  }
  Status SyncDir(const std::string& dir) override { return posix_->SyncDir(dir); }
  Status Remove(const std::string& path) override { return posix_->Remove(path); }
  bool native() const override { return true; }

 private:
  std::shared_ptr<FileSystem> posix_;
  ReadLog* log_;
};

// The bytes this process has read through read(2) and pread(2) so far (/proc/self/io, rchar),
// less what reading that file returned.
uint64_t BytesReadByProcess() {
  char text[1024];
  const int fd = ::open("/proc/self/io", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  const ssize_t n = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  EXPECT_GT(n, 0);
  text[n > 0 ? n : 0] = '\0';
  const char* at = std::strstr(text, "rchar:");
  EXPECT_NE(at, nullptr);
  return at ? std::strtoull(at + 6, nullptr, 10) : 0;
}

checkpoint::Manifest ReadManifest(const std::string& dir, sharding::Plan* plan) {
  checkpoint::Manifest m;
  const std::shared_ptr<FileSystem> fs = checkpoint::PosixFileSystem();
  const std::string path = dir + "/" + checkpoint::kManifestName;
  std::unique_ptr<ReadableFile> f;
  EXPECT_TRUE(fs->OpenReadable(path, &f).ok());
  std::string text(f->size(), '\0');
  EXPECT_TRUE(f->ReadAt(0, text.data(), text.size()).ok());
  EXPECT_TRUE(checkpoint::ManifestFromJson(text, path, &m).ok());
  EXPECT_TRUE(sharding::PlanFromJson(m.plan_json, plan).ok());
  return m;
}

// Opens every table of checkpoint `dir` tiered, one at a time, in `storage` (kAsTrained: the
// table's own), and checks what each open read: each byte of its weights (and ids) records in the
// rank files exactly once, nothing twice, and nothing but through the file system.
void ExpectEachByteReadOnce(const std::string& dir, Storage storage) {
  sharding::Plan plan;
  const checkpoint::Manifest m = ReadManifest(dir, &plan);
  ASSERT_FALSE(plan.tables.empty());
  for (const sharding::TableConfig& tc : plan.tables) {
    SCOPED_TRACE("table " + tc.name);
    ReadLog log;
    LoggedFileSystem fs(&log);
    Model model;
    const Storage s = storage == Storage::kAsTrained ? StorageOf(FloatFormatOf(tc.dtype)) : storage;
    const uint64_t before = BytesReadByProcess();
    const Status st = OpenTieredTable(fs, dir, m, tc, s, 4096, &model);
    const uint64_t after = BytesReadByProcess();
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(model.tables.size(), 1u);
    // No read of the open bypassed the file system (rchar also counts BytesReadByProcess's own
    // read of /proc/self/io, about a hundred bytes).
    EXPECT_GE(after - before, log.bytes);
    EXPECT_LT(after - before, log.bytes + 512);
    uint64_t record_bytes = 0;
    for (const checkpoint::FileEntry& e : m.files) {
      ASSERT_FALSE(e.is_store) << "a checkpoint saved in memory has rank files only";
      const std::string path = dir + "/" + e.name;
      std::vector<std::pair<uint64_t, uint64_t>> spans = log.spans[path];
      std::sort(spans.begin(), spans.end());
      for (size_t i = 1; i < spans.size(); ++i)
        EXPECT_LE(spans[i - 1].second, spans[i].first)
            << path << ": bytes " << spans[i].first << ".." << spans[i - 1].second - 1
            << " read twice";
      for (const checkpoint::Record& rec : e.records) {
        if (rec.table != tc.name || (rec.tensor != "weights" && rec.tensor != "ids")) continue;
        record_bytes += rec.nbytes;
        // Covered by the spans, which do not overlap: read exactly once.
        uint64_t at = rec.offset;
        for (const auto& [lo, hi] : spans)
          if (lo <= at && at < hi) at = hi;
        EXPECT_GE(at, rec.offset + rec.nbytes)
            << path << ": record " << rec.key << " bytes from " << at << " not read";
      }
    }
    EXPECT_GT(record_bytes, 0u);
    // Besides the records, only each rank file's header (a few hundred bytes).
    EXPECT_LE(log.bytes, record_bytes + 8192 * m.files.size());
  }
}

const Storage kStorages[] = {Storage::kAsTrained, Storage::kFp16, Storage::kInt8,
                             Storage::kFp8E4M3};

TEST(ServingTieredOpen, FixedTablesRankFileBytesAreReadOnce) {
  struct Case {
    int32_t world, sharding;
  };
  for (const Case& k :
       {Case{2, SHARDREC_SHARDING_ROW_WISE}, Case{2, SHARDREC_SHARDING_COLUMN_WISE}}) {
    SCOPED_TRACE("world " + std::to_string(k.world) + " sharding " + std::to_string(k.sharding));
    // 150000 rows: t0's records hold several chunks of about 1 MiB.
    testing::DynScenario s = testing::MakeDynScenario(1, k.sharding, 3, 150000, 600);
    s.fixed = true;
    for (auto& pool : s.pools)
      for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int64_t>(i) * 250;
    const testing::Saved sv = testing::TrainAndSave(s, k.world, k.sharding, false, "open_once");
    ASSERT_FALSE(::testing::Test::HasFailure());
    // What the case is for: records of several chunks (t1's units, of 11 or 22 rows, straddle
    // chunks), and column-wise, records of part of a row (a block is whole only once both are).
    sharding::Plan plan;
    const checkpoint::Manifest m = ReadManifest(sv.second, &plan);
    size_t chunks = 0;
    bool split = false;
    for (const checkpoint::FileEntry& e : m.files)
      for (const checkpoint::Record& rec : e.records)
        if (rec.table == "t0" && rec.tensor == "weights") {
          chunks = std::max(chunks, rec.checksums.size());
          split = split || rec.cols < rec.full_cols;
        }
    EXPECT_GE(chunks, 2u);
    EXPECT_EQ(split, k.sharding == SHARDREC_SHARDING_COLUMN_WISE);
    for (Storage storage : kStorages) {
      SCOPED_TRACE("storage " + std::to_string(static_cast<int>(storage)));
      ExpectEachByteReadOnce(sv.second, storage);
    }
  }
}

TEST(ServingTieredOpen, DynamicTablesRankFileBytesAreReadOnce) {
  testing::DynScenario s = testing::MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, 3, 600, 300);
  const testing::Saved sv =
      testing::TrainAndSave(s, 2, SHARDREC_SHARDING_ROW_WISE, false, "open_once_dynamic");
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (Storage storage : kStorages) {
    SCOPED_TRACE("storage " + std::to_string(static_cast<int>(storage)));
    ExpectEachByteReadOnce(sv.second, storage);
  }
}

}  // namespace
}  // namespace shardrec::serving
