// LogStore's inner parts, shared by its source files (store_*.cc); nothing outside impl/store
// includes this.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "impl/store/log_store.h"

namespace shardrec::store {

// One segment file. Its fields are guarded by the store's mu_; the file's pages below the tail
// never change once written, so reads of them run outside the lock.
struct LogStore::Segment {
  uint32_t id = 0;
  std::string path;
  int fd = -1;         // read-write (read-only in a read-only store)
  int direct_fd = -1;  // O_DIRECT reads, or -1 where the file system refuses it
  uint64_t slots = 0;  // record slots taken (final once sealed)
  uint64_t file_bytes = 0;
  int64_t live = 0;  // slots the index names
  bool dirty = false;

  ~Segment() {
    if (direct_fd >= 0) ::close(direct_fd);
    if (fd >= 0) ::close(fd);
  }
  int read_fd() const { return direct_fd >= 0 ? direct_fd : fd; }
};

// The active segment's pages not yet written, from slot `first` (page-aligned) on, in a
// page-aligned buffer (O_DIRECT-friendly).
class LogStore::Tail {
 public:
  explicit Tail(size_t bytes) : bytes_(bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, kPageBytes, bytes) != 0) p = nullptr;
    buf_.reset(static_cast<uint8_t*>(p));
    if (buf_) std::memset(buf_.get(), 0, bytes);
  }
  bool ok() const { return buf_ != nullptr; }
  uint8_t* data() { return buf_.get(); }
  const uint8_t* data() const { return buf_.get(); }
  size_t bytes() const { return bytes_; }
  uint64_t first = 0;

 private:
  struct Free {
    void operator()(uint8_t* p) const { free(p); }
  };
  size_t bytes_;
  std::unique_ptr<uint8_t, Free> buf_;
};

// What a failed Put or compaction step restores.
struct LogStore::Mark {
  std::shared_ptr<Segment> active;
  uint64_t slots = 0;
  uint64_t file_bytes = 0;
  uint64_t tail_first = 0;
  uint32_t next_segment = 0;
  size_t tail_used = 0;  // bytes of the tail in use at the mark
  bool saved = false;    // tail_bytes holds them (taken before the call's first page write)
  std::vector<uint8_t> tail_bytes;
};

// "store <dir>: <what> <path>: <strerror(errno)>".
Status StoreErrno(const std::string& dir, const char* what, const std::string& path);

}  // namespace shardrec::store
