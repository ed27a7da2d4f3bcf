// POSIX file system of checkpoints, and the atomic-write sequence every writer uses.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>

#include "impl/checkpoint/fs.h"
#include "impl/core/check.h"

namespace shardrec::checkpoint {
namespace {

Status Errno(const char* what, const std::string& path) {
  const int e = errno;
  return Status::Io(what, " ", path, ": ", std::strerror(e));
}

class PosixWritable : public WritableFile {
 public:
  PosixWritable(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritable() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Append(const void* data, size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Errno("cannot write", path_);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }
  Status Sync() override {
    if (::fsync(fd_) != 0) return Errno("cannot fsync", path_);
    return Status::Ok();
  }
  Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Errno("cannot close", path_);
    return Status::Ok();
  }

 private:
  int fd_;
  std::string path_;
};

class PosixReadable : public ReadableFile {
 public:
  PosixReadable(int fd, uint64_t size, std::string path)
      : fd_(fd), size_(size), path_(std::move(path)) {}
  ~PosixReadable() override { ::close(fd_); }
  uint64_t size() const override { return size_; }
  Status ReadAt(uint64_t offset, void* out, size_t n) const override {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno("cannot read", path_);
      }
      if (r == 0)
        return Status::Corrupt(path_, " is truncated: it ends at byte ", offset, ", ", n,
                               " more bytes expected");
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return Status::Ok();
  }

 private:
  int fd_;
  uint64_t size_;
  std::string path_;
};

class Posix : public FileSystem {
 public:
  Status CreateDir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return Errno("cannot create directory", dir);
    return Status::Ok();
  }
  Status NewWritable(const std::string& path, std::unique_ptr<WritableFile>* out) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("cannot create", path);
    *out = std::make_unique<PosixWritable>(fd, path);
    return Status::Ok();
  }
  Status OpenReadable(const std::string& path, std::unique_ptr<ReadableFile>* out) override {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, for ever and past
    // any abort; the file type is checked right after, and reads of a regular file ignore it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ENOENT) return Status::NotFound(path, " does not exist");
      return Errno("cannot open", path);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      Status s = Errno("cannot stat", path);
      ::close(fd);
      return s;
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::Corrupt(path, " is not a regular file (",
                             S_ISDIR(st.st_mode) ? "a directory" : "a device, pipe or socket",
                             " stands where a checkpoint file should be)");
    }
    *out = std::make_unique<PosixReadable>(fd, static_cast<uint64_t>(st.st_size), path);
    return Status::Ok();
  }
  Status Rename(const std::string& from, const std::string& to) override {
    // A file replaces a file (or the link itself): a device node, FIFO or socket at `to` is no
    // earlier output of ours, and rename would silently put a regular file in its place (a
    // serving file saved to /dev/null as root replaced the device).
    struct stat st;
    if (::lstat(to.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
      return Status::InvalidArgument(to, " exists and is not a regular file (a directory, device, ",
                                     "FIFO or socket); nothing was replaced");
    if (::rename(from.c_str(), to.c_str()) != 0) return Errno("cannot rename", from + " to " + to);
    return Status::Ok();
  }
  Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open directory", dir);
    const int rc = ::fsync(fd);
    Status s = rc == 0 ? Status::Ok() : Errno("cannot fsync directory", dir);
    ::close(fd);
    return s;
  }
  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove", path);
    return Status::Ok();
  }
  bool native() const override { return true; }
  Status RemoveTree(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return Status::Io("cannot remove ", path, ": ", ec.message());
    return Status::Ok();
  }
  Status ListDir(const std::string& dir, std::vector<std::string>* names) override {
    names->clear();
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      names->push_back(it->path().filename().string());
    if (ec) return Status::Io("cannot list ", dir, ": ", ec.message());
    return Status::Ok();
  }
};

}  // namespace

std::shared_ptr<FileSystem> PosixFileSystem() { return std::make_shared<Posix>(); }

Status WriteThroughTemporary(FileSystem& fs, const std::string& dir, const std::string& name,
                             const std::string& tmp_name,
                             const std::function<Status(WritableFile&)>& write) {
  const std::string path = dir + "/" + name;
  const std::string tmp = dir + "/" + tmp_name;
  std::unique_ptr<WritableFile> f;
  SR_RETURN_IF_ERROR(fs.NewWritable(tmp, &f));
  Status s = write(*f);
  if (s.ok()) s = f->Sync();
  // Closed whatever happened, so that a failed write can take its temporary file away.
  const Status closed = f->Close();
  if (s.ok()) s = closed;
  if (s.ok()) s = fs.Rename(tmp, path);
  if (!s.ok()) {
    // A failed write leaves neither `path` changed nor a partial copy of the file beside it (the
    // caller's error is the write's; the removal is best effort).
    (void)fs.Remove(tmp);
    return s;
  }
  return fs.SyncDir(dir);
}

Status WriteAtomically(FileSystem& fs, const std::string& dir, const std::string& name,
                       const std::vector<std::pair<const void*, size_t>>& pieces) {
  // A temporary name of this process and call: writers of the same file (each sharding group
  // of a mesh exporting one table) never share one, and the last rename wins with equal bytes.
  static std::atomic<uint64_t> counter{0};
  return WriteThroughTemporary(fs, dir, name, StrCat(name, ".tmp.", ::getpid(), ".", counter++),
                               [&](WritableFile& f) {
                                 for (const auto& [data, n] : pieces)
                                   SR_RETURN_IF_ERROR(f.Append(data, n));
                                 return Status::Ok();
                               });
}

}  // namespace shardrec::checkpoint
