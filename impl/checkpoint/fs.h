// The small file-system interface checkpoints are written through: POSIX for real use, and an
// in-memory one whose faults (a write that fails halfway, a full disk, a failing rename or
// fsync) tests inject at any numbered step, so a crash at every point of a save can be replayed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::checkpoint {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(const void* data, size_t n) = 0;
  virtual Status Sync() = 0;  // data durable (fsync)
  virtual Status Close() = 0;
};

class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  virtual uint64_t size() const = 0;
  // Exactly n bytes at `offset`; kCorrupt naming the file when the file ends before them.
  virtual Status ReadAt(uint64_t offset, void* out, size_t n) const = 0;
};

// Paths are plain strings ("dir/name"); every operation is thread-safe (ranks in threads share
// one file system). Errors: kIo with the path and the system's reason, kNotFound for a missing
// file.
class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual Status CreateDir(const std::string& dir) = 0;  // existing is fine
  // Creates or truncates.
  virtual Status NewWritable(const std::string& path, std::unique_ptr<WritableFile>* out) = 0;
  virtual Status OpenReadable(const std::string& path, std::unique_ptr<ReadableFile>* out) = 0;
  // Atomic replacement of `to` (POSIX rename).
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Makes the directory's entries (a rename) durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  virtual Status Remove(const std::string& path) = 0;
  // Whether paths are the operating system's own, so that a store snapshot (snapshot_file.h)
  // can be written and read there; a save through a file system that is not copies the rows.
  virtual bool native() const { return false; }
  // Removes `path` and, when it is a directory, everything under it (a store snapshot's).
  virtual Status RemoveTree(const std::string& path) { return Remove(path); }
  // The names of the entries of directory `dir` (not its subdirectories' entries), in no order:
  // what a save looks through for store snapshots left by a killed save. kUnsupported where the
  // file system has no directories of its own (the in-memory one; it holds no snapshots).
  virtual Status ListDir(const std::string& dir, std::vector<std::string>* names) {
    (void)dir;
    names->clear();
    return Status::Unsupported("this file system does not list directories");
  }
};

std::shared_ptr<FileSystem> PosixFileSystem();

// Writes `dir`/`name` through the temporary file `dir`/`tmp`: `write` fills it, then it is
// fsync'ed, closed and renamed over the name, and the directory fsync'ed. A failure at any step
// leaves the name as it was and removes the temporary file (best effort: a crash can leave it).
Status WriteThroughTemporary(FileSystem& fs, const std::string& dir, const std::string& name,
                             const std::string& tmp,
                             const std::function<Status(WritableFile&)>& write);

// WriteThroughTemporary of `pieces` in order, under a temporary name of this process and call
// (`name`.tmp.<pid>.<n>).
Status WriteAtomically(FileSystem& fs, const std::string& dir, const std::string& name,
                       const std::vector<std::pair<const void*, size_t>>& pieces);

// In-memory file system. Every mutating call (create, append, sync, close, rename, dir sync,
// remove) is one numbered step; SetFault makes step `at` (0-based, counted from the call) fail.
// Reads are not steps: SetReadFault makes reads of one byte of one file fail (a bad sector).
class MemoryFileSystem : public FileSystem {
 public:
  enum class Fault {
    kNone,
    kWriteHalf,   // an append writes half its bytes, then fails (EIO)
    kDiskFull,    // an append fails with "no space left", writing nothing
    kRenameFail,  // a rename fails
    kCrash,       // step `at` and every later step fail (the process "died" there)
  };
  // The fault hits the first step of a matching kind at or after `at` (kCrash: step `at`).
  void SetFault(Fault fault, int64_t at);
  int64_t steps() const;
  // Every later ReadAt of `path` whose range holds byte `offset` fails with kIo, in files
  // opened before the call too; an empty path clears it.
  void SetReadFault(const std::string& path, uint64_t offset);
  // Test helpers: whole contents, and a direct overwrite (corruption, truncation).
  bool Exists(const std::string& path) const;
  std::vector<uint8_t> Contents(const std::string& path) const;
  void SetContents(const std::string& path, std::vector<uint8_t> bytes);
  std::vector<std::string> List() const;

  Status CreateDir(const std::string& dir) override;
  Status NewWritable(const std::string& path, std::unique_ptr<WritableFile>* out) override;
  Status OpenReadable(const std::string& path, std::unique_ptr<ReadableFile>* out) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& dir) override;
  Status Remove(const std::string& path) override;

 private:
  friend class MemoryWritable;
  friend class MemoryReadable;
  enum class Op { kCreate, kAppend, kSync, kClose, kRename, kSyncDir, kRemove };
  // Counts a step; returns the fault that hits it (kNone if none).
  Fault Step(Op op);

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<std::vector<uint8_t>>> files_;
  int64_t steps_ = 0;
  Fault fault_ = Fault::kNone;
  int64_t fault_at_ = -1;
  bool crashed_ = false;
  std::string read_fault_path_;
  uint64_t read_fault_offset_ = 0;
};

}  // namespace shardrec::checkpoint
