// The in-memory file system with numbered-step fault injection (fs.h).
#include <algorithm>
#include <cstring>

#include "impl/checkpoint/fs.h"

namespace shardrec::checkpoint {

class MemoryWritable : public WritableFile {
 public:
  MemoryWritable(MemoryFileSystem* fs, std::string path, std::shared_ptr<std::vector<uint8_t>> d)
      : fs_(fs), path_(std::move(path)), data_(std::move(d)) {}
  Status Append(const void* data, size_t n) override {
    const MemoryFileSystem::Fault f = fs_->Step(MemoryFileSystem::Op::kAppend);
    if (f == MemoryFileSystem::Fault::kDiskFull)
      return Status::Io("cannot write ", path_, ": No space left on device");
    const size_t take = f == MemoryFileSystem::Fault::kWriteHalf ? n / 2 : n;
    if (f != MemoryFileSystem::Fault::kCrash) {
      std::lock_guard<std::mutex> lock(fs_->mu_);
      const auto* p = static_cast<const uint8_t*>(data);
      data_->insert(data_->end(), p, p + take);
    }
    if (f != MemoryFileSystem::Fault::kNone)
      return Status::Io("cannot write ", path_, ": Input/output error (injected)");
    return Status::Ok();
  }
  Status Sync() override { return Plain(MemoryFileSystem::Op::kSync, "fsync"); }
  Status Close() override { return Plain(MemoryFileSystem::Op::kClose, "close"); }

 private:
  Status Plain(MemoryFileSystem::Op op, const char* what) {
    if (fs_->Step(op) != MemoryFileSystem::Fault::kNone)
      return Status::Io("cannot ", what, " ", path_, ": Input/output error (injected)");
    return Status::Ok();
  }
  MemoryFileSystem* fs_;
  std::string path_;
  std::shared_ptr<std::vector<uint8_t>> data_;
};

class MemoryReadable : public ReadableFile {
 public:
  MemoryReadable(const MemoryFileSystem* fs, std::string path, std::vector<uint8_t> d)
      : fs_(fs), path_(std::move(path)), data_(std::move(d)) {}
  uint64_t size() const override { return data_.size(); }
  Status ReadAt(uint64_t offset, void* out, size_t n) const override {
    {
      std::lock_guard<std::mutex> lock(fs_->mu_);
      if (fs_->read_fault_path_ == path_ && fs_->read_fault_offset_ >= offset &&
          fs_->read_fault_offset_ - offset < n)
        return Status::Io("cannot read ", path_, " at byte ", fs_->read_fault_offset_,
                          ": Input/output error (injected)");
    }
    if (offset > data_.size() || data_.size() - offset < n)
      return Status::Corrupt(path_, " is truncated: it ends at byte ", data_.size(), ", ",
                             offset + n, " bytes expected");
    std::memcpy(out, data_.data() + offset, n);
    return Status::Ok();
  }

 private:
  const MemoryFileSystem* fs_;  // outlives its files
  std::string path_;
  std::vector<uint8_t> data_;  // a snapshot: readers never see later writes
};

void MemoryFileSystem::SetFault(Fault fault, int64_t at) {
  std::lock_guard<std::mutex> lock(mu_);
  fault_ = fault;
  fault_at_ = steps_ + at;
  crashed_ = false;
}

void MemoryFileSystem::SetReadFault(const std::string& path, uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  read_fault_path_ = path;
  read_fault_offset_ = offset;
}

int64_t MemoryFileSystem::steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return steps_;
}

MemoryFileSystem::Fault MemoryFileSystem::Step(Op op) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t step = steps_++;
  if (crashed_) return Fault::kCrash;
  if (fault_ == Fault::kNone || step < fault_at_) return Fault::kNone;
  const bool matches =
      fault_ == Fault::kCrash ||
      (op == Op::kAppend && (fault_ == Fault::kWriteHalf || fault_ == Fault::kDiskFull)) ||
      (op == Op::kRename && fault_ == Fault::kRenameFail);
  if (!matches) return Fault::kNone;
  const Fault f = fault_;
  if (f == Fault::kCrash)
    crashed_ = true;
  else
    fault_ = Fault::kNone;  // one-shot
  return f;
}

bool MemoryFileSystem::Exists(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.count(path) != 0;
}

std::vector<uint8_t> MemoryFileSystem::Contents(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? std::vector<uint8_t>() : *it->second;
}

void MemoryFileSystem::SetContents(const std::string& path, std::vector<uint8_t> bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[path] = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
}

std::vector<std::string> MemoryFileSystem::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [k, v] : files_) out.push_back(k);
  return out;
}

Status MemoryFileSystem::CreateDir(const std::string&) { return Status::Ok(); }

Status MemoryFileSystem::NewWritable(const std::string& path, std::unique_ptr<WritableFile>* out) {
  if (Step(Op::kCreate) != Fault::kNone)
    return Status::Io("cannot create ", path, ": Input/output error (injected)");
  auto data = std::make_shared<std::vector<uint8_t>>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    files_[path] = data;
  }
  *out = std::make_unique<MemoryWritable>(this, path, std::move(data));
  return Status::Ok();
}

Status MemoryFileSystem::OpenReadable(const std::string& path, std::unique_ptr<ReadableFile>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return Status::NotFound(path, " does not exist");
  *out = std::make_unique<MemoryReadable>(this, path, *it->second);
  return Status::Ok();
}

Status MemoryFileSystem::Rename(const std::string& from, const std::string& to) {
  if (Step(Op::kRename) != Fault::kNone)
    return Status::Io("cannot rename ", from, " to ", to, ": Input/output error (injected)");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(from);
  if (it == files_.end()) return Status::Io("cannot rename ", from, ": No such file");
  auto data = it->second;
  files_.erase(it);
  // A writer still open on `from` keeps appending into the renamed file, as on POSIX.
  files_[to] = std::move(data);
  return Status::Ok();
}

Status MemoryFileSystem::SyncDir(const std::string& dir) {
  if (Step(Op::kSyncDir) != Fault::kNone)
    return Status::Io("cannot fsync directory ", dir, ": Input/output error (injected)");
  return Status::Ok();
}

Status MemoryFileSystem::Remove(const std::string& path) {
  if (Step(Op::kRemove) != Fault::kNone)
    return Status::Io("cannot remove ", path, ": Input/output error (injected)");
  std::lock_guard<std::mutex> lock(mu_);
  files_.erase(path);
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
