// The local disk's random-read rate (calibrate_disk.h).
#include "impl/planner/calibrate_disk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "impl/core/check.h"

namespace shardrec::planner {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kPage = 4096;
constexpr size_t kChunk = size_t{1} << 20;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

Status Errno(const char* call, const std::string& path) {
  return Status::Io("disk calibration: ", call, " ", path, ": ", std::strerror(errno));
}

struct Aligned {
  void* p = nullptr;
  explicit Aligned(size_t n) {
    if (posix_memalign(&p, kPage, n) != 0) p = nullptr;
  }
  ~Aligned() { std::free(p); }
};

// Removes the scratch file on every path.
struct Scratch {
  std::string path;
  int fd = -1;
  ~Scratch() {
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace

Status CalibrateDisk(const std::string& dir, uint64_t file_bytes, int threads, double budget_ms,
                     DiskCalibration* out) {
  const Clock::time_point start = Clock::now();
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::NotFound("disk calibration: ", dir, " is not a directory");
  file_bytes = std::max<uint64_t>(kChunk, file_bytes / kChunk * kChunk);
  threads = std::max(threads, 1);
  Scratch f;
  f.path = dir + "/.shardrec-disk-calibration-" + std::to_string(::getpid()) + "-" +
           std::to_string(std::random_device{}());
  f.fd = ::open(f.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (f.fd < 0) {
    f.path.clear();
    return Errno("open", dir + "/.shardrec-disk-calibration-*");
  }
  Aligned chunk(kChunk);
  if (chunk.p == nullptr) return Status::OutOfMemory("disk calibration: a 1 MiB buffer");
  // Data that does not compress or deduplicate, written through and synced, so the reads below
  // find it on the device and not in a write buffer.
  std::mt19937_64 rng(0x5eed);
  for (uint64_t off = 0; off < file_bytes; off += kChunk) {
    auto* w = static_cast<uint64_t*>(chunk.p);
    for (size_t i = 0; i < kChunk / 8; ++i) w[i] = rng();
    const ssize_t n = ::pwrite(f.fd, chunk.p, kChunk, static_cast<off_t>(off));
    if (n != static_cast<ssize_t>(kChunk)) {
      if (n >= 0) errno = ENOSPC;
      return Errno("write", f.path);
    }
  }
  if (::fsync(f.fd) != 0) return Errno("fsync", f.path);
  // Reads bypass the page cache where the file system allows it; else the cache is dropped as
  // far as the kernel lets an unprivileged process (the written pages are clean after fsync).
  int rfd = ::open(f.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  out->direct_io = rfd >= 0;
  if (rfd < 0) {
    rfd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (rfd < 0) return Errno("open", f.path);
    ::posix_fadvise(rfd, 0, 0, POSIX_FADV_DONTNEED);
  }
  struct Fd {
    int fd;
    ~Fd() { ::close(fd); }
  } reader{rfd};

  // Random pages: `threads` synchronous readers keep that many reads in flight.
  const uint64_t pages = file_bytes / kPage;
  std::atomic<bool> stop{false}, failed{false};
  std::atomic<uint64_t> reads{0};
  const Clock::time_point r0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Aligned buf(kPage);
      std::mt19937_64 g(0x9E3779B97F4A7C15ull * (t + 1));
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed) && buf.p != nullptr) {
        const uint64_t page = g() % pages;
        if (::pread(rfd, buf.p, kPage, static_cast<off_t>(page * kPage)) !=
            static_cast<ssize_t>(kPage)) {
          failed = true;
          break;
        }
        ++n;
      }
      reads += n;
    });
  }
  while (MsSince(r0) < budget_ms / 2 && !failed.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  stop = true;
  for (auto& th : pool) th.join();
  const double random_ms = MsSince(r0);
  if (failed.load()) return Errno("pread", f.path);

  // Sequential chunks, from the start again (wrapping), for about a quarter of the budget.
  uint64_t bytes = 0;
  const Clock::time_point s0 = Clock::now();
  for (uint64_t off = 0; MsSince(s0) < budget_ms / 4 || bytes == 0;
       off = (off + kChunk) % file_bytes) {
    if (::pread(rfd, chunk.p, kChunk, static_cast<off_t>(off)) != static_cast<ssize_t>(kChunk))
      return Errno("pread", f.path);
    bytes += kChunk;
  }
  const double seq_ms = MsSince(s0);

  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0)
    out->free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize + file_bytes;
  out->read_iops = static_cast<double>(reads.load()) / std::max(random_ms, 1e-3);
  out->read_bw = static_cast<double>(bytes) / std::max(seq_ms, 1e-3);
  out->elapsed_ms = MsSince(start);
  return Status::Ok();
}

}  // namespace shardrec::planner
