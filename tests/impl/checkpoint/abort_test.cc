// An abort from another thread during a checkpoint load or a table import: the read stops at the
// next chunk (about 1 MiB) instead of reading every record first, and the call says it was
// aborted. The abort here is raised by the file system at a chosen read, as a watchdog thread
// calling shardrec_comm_abort in the middle of a long load would. A save by store snapshot
// (tiered tables) stops likewise before it writes the next shard's rows into its store.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "impl/checkpoint/checkpoint.h"
#include "impl/comm/factory.h"
#include "impl/embedding/collection.h"
#include "impl/sharding/layout.h"

namespace shardrec::checkpoint {
namespace {

using embedding::EmbeddingCollection;

// Forwards to `inner`; once armed, the `abort_at`-th ReadAt (counting from 0) aborts `comm`
// before it reads, and every ReadAt after the abort is counted.
class AbortingFileSystem : public FileSystem {
 public:
  explicit AbortingFileSystem(FileSystem& inner) : inner_(inner) {}
  void Arm(comm::Communicator* comm, int abort_at) {
    comm_ = comm;
    abort_at_ = abort_at;
    reads_ = 0;
    reads_after_abort_ = 0;
  }
  int reads_after_abort() const { return reads_after_abort_; }

  Status CreateDir(const std::string& dir) override { return inner_.CreateDir(dir); }
  Status NewWritable(const std::string& path, std::unique_ptr<WritableFile>* out) override {
    return inner_.NewWritable(path, out);
  }
  Status OpenReadable(const std::string& path, std::unique_ptr<ReadableFile>* out) override {
    std::unique_ptr<ReadableFile> file;
    SR_RETURN_IF_ERROR(inner_.OpenReadable(path, &file));
    *out = std::make_unique<File>(std::move(file), this);
    return Status::Ok();
  }
  Status Rename(const std::string& from, const std::string& to) override {
    return inner_.Rename(from, to);
  }
  Status SyncDir(const std::string& dir) override { return inner_.SyncDir(dir); }
  Status Remove(const std::string& path) override { return inner_.Remove(path); }

 private:
  class File : public ReadableFile {
   public:
    File(std::unique_ptr<ReadableFile> file, AbortingFileSystem* fs)
        : file_(std::move(file)), fs_(fs) {}
    uint64_t size() const override { return file_->size(); }
    Status ReadAt(uint64_t offset, void* out, size_t n) const override {
      fs_->OnRead();
      return file_->ReadAt(offset, out, n);
    }

   private:
    std::unique_ptr<ReadableFile> file_;
    AbortingFileSystem* fs_;
  };
  void OnRead() {
    if (comm_ == nullptr) return;
    const int k = reads_++;
    if (k == abort_at_) comm_->Abort();
    if (k > abort_at_) ++reads_after_abort_;
  }

  FileSystem& inner_;
  comm::Communicator* comm_ = nullptr;
  int abort_at_ = 0;
  int reads_ = 0;
  std::atomic<int> reads_after_abort_{0};
};

// One rank holding a 4.8 MB table (with its Adam state about 9.6 MB, some ten 1 MiB chunks).
std::unique_ptr<EmbeddingCollection> OneRank() {
  auto plan = std::make_shared<sharding::Plan>();
  plan->features = {{"f", 1.0f}};
  sharding::TableConfig t;
  t.name = "big";
  t.rows = 150000;
  t.dim = 8;
  t.features = {0};
  plan->tables = {t};
  plan->table_plans = {sharding::MakeTableWise(t, 0)};
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  EXPECT_TRUE(comm::CreateLocalGroup(1, comm::CommOptions(), &comms).ok());
  optim::OptimizerConfig opt;
  opt.type = optim::OptimizerType::kAdam;
  std::unique_ptr<EmbeddingCollection> coll;
  const Status s = EmbeddingCollection::Create(plan, std::move(comms[0]), &opt,
                                               embedding::CollectionOptions(), &coll);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return coll;
}

TEST(CheckpointAbort, AnAbortStopsALoadAtTheNextChunk) {
  for (const bool partial : {false, true}) {
    MemoryFileSystem memory;
    AbortingFileSystem fs(memory);
    std::unique_ptr<EmbeddingCollection> coll = OneRank();
    ASSERT_NE(coll, nullptr);
    Group g;
    g.comm = &coll->comm();
    ASSERT_TRUE(Save(coll->storage(), g, fs, "ck", {}).ok());
    // Read 4: past the manifest and the file's header, in the records' chunks.
    fs.Arm(&coll->comm(), 4);
    LoadOptions lo;
    lo.allow_partial_load = partial;
    const Status s = Load(coll->storage(), g, fs, "ck", lo);
    EXPECT_EQ(s.code(), Code::kAborted) << "partial " << partial << ": " << s.ToString();
    EXPECT_EQ(fs.reads_after_abort(), 0) << "partial " << partial;
  }
}

TEST(CheckpointAbort, AnAbortStopsATableImportAtTheNextChunk) {
  MemoryFileSystem memory;
  AbortingFileSystem fs(memory);
  std::unique_ptr<EmbeddingCollection> coll = OneRank();
  ASSERT_NE(coll, nullptr);
  ASSERT_TRUE(fs.CreateDir("out").ok());
  ASSERT_TRUE(ExportTable(coll->storage(), fs, "out/big.safetensors", "big", true).ok());
  fs.Arm(&coll->comm(), 3);
  const Status s = ImportTable(coll->storage(), fs, "out/big.safetensors", "big", true);
  EXPECT_EQ(s.code(), Code::kAborted) << s.ToString();
  EXPECT_EQ(fs.reads_after_abort(), 0);
}

// The operating system's files; the `abort_at`-th RemoveTree (counting from 0: a save clears each
// store snapshot's directory just before it takes the snapshot) aborts `comm` first.
class AbortingNativeFileSystem : public FileSystem {
 public:
  AbortingNativeFileSystem(comm::Communicator* comm, int abort_at)
      : inner_(PosixFileSystem()), comm_(comm), abort_at_(abort_at) {}
  Status CreateDir(const std::string& dir) override { return inner_->CreateDir(dir); }
  Status NewWritable(const std::string& path, std::unique_ptr<WritableFile>* out) override {
    return inner_->NewWritable(path, out);
  }
  Status OpenReadable(const std::string& path, std::unique_ptr<ReadableFile>* out) override {
    return inner_->OpenReadable(path, out);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    return inner_->Rename(from, to);
  }
  Status SyncDir(const std::string& dir) override { return inner_->SyncDir(dir); }
  Status Remove(const std::string& path) override { return inner_->Remove(path); }
  bool native() const override { return true; }
  Status RemoveTree(const std::string& path) override {
    if (removes_++ == abort_at_) comm_->Abort();
    return inner_->RemoveTree(path);
  }
  Status ListDir(const std::string& dir, std::vector<std::string>* names) override {
    return inner_->ListDir(dir, names);
  }

 private:
  std::shared_ptr<FileSystem> inner_;
  comm::Communicator* comm_;
  int abort_at_;
  int removes_ = 0;
};

TEST(CheckpointAbort, AnAbortStopsASnapshotSaveBeforeTheNextShardsRows) {
  // Two fixed tiered tables never trained: a first save writes each one's 20000 rows into its
  // store (their initial values) before linking it.
  const std::string root = (std::filesystem::temp_directory_path() /
                            ("shardrec_abort_snapshot_" + std::to_string(::getpid())))
                               .string();
  std::filesystem::remove_all(root);
  auto plan = std::make_shared<sharding::Plan>();
  plan->features = {{"f", 1.0f}};
  for (const char* name : {"a", "b"}) {
    sharding::TableConfig t;
    t.name = name;
    t.rows = 20000;
    t.dim = 8;
    t.features = {0};
    plan->table_plans.push_back(sharding::MakeTableWise(t, 0));
    plan->tables.push_back(t);
  }
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  ASSERT_TRUE(comm::CreateLocalGroup(1, comm::CommOptions(), &comms).ok());
  optim::OptimizerConfig opt;
  opt.type = optim::OptimizerType::kAdagrad;
  embedding::CollectionOptions o;
  o.tiers = {{"a", root + "/stores", 64 << 10}, {"b", root + "/stores", 64 << 10}};
  std::unique_ptr<EmbeddingCollection> coll;
  const Status made = EmbeddingCollection::Create(plan, std::move(comms[0]), &opt, o, &coll);
  ASSERT_TRUE(made.ok()) << made.ToString();
  const auto disk_bytes = [&](int32_t table) {
    embedding::tiered::TierStats st;
    EXPECT_TRUE(coll->storage().TierStats(table, &st));
    return st.disk_bytes;
  };
  const int64_t before[2] = {disk_bytes(0), disk_bytes(1)};
  // The abort comes as the second shard's snapshot begins: the first is taken (its rows written,
  // its store linked), the second shard's rows are never written, and the snapshot made is
  // removed again.
  AbortingNativeFileSystem fs(&coll->comm(), 1);
  Group g;
  g.comm = &coll->comm();
  const Status s = Save(coll->storage(), g, fs, root + "/ck", {});
  EXPECT_EQ(s.code(), Code::kAborted) << s.ToString();
  EXPECT_GT(disk_bytes(0), before[0]);
  EXPECT_EQ(disk_bytes(1), before[1]);
  for (const auto& e : std::filesystem::directory_iterator(root + "/ck"))
    EXPECT_NE(e.path().extension(), ".store") << e.path();
  coll.reset();
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace shardrec::checkpoint
