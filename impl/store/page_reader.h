// Batched page reads for the store's Get: io_uring (Debian liburing) keeps up to `queue_depth`
// reads in flight; the pread reader, one at a time, is the fallback where liburing was absent at
// build time or the kernel refuses a ring at run time (seccomp in containers, io_uring disabled).
// A reader is used by one thread at a time (the store pools them).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "impl/core/status.h"

namespace shardrec::store {

struct PageRead {
  int fd = -1;
  uint64_t offset = 0;  // page-aligned for an O_DIRECT fd
  uint32_t len = 0;     // whole pages for an O_DIRECT fd; at most the reader's max_len
};

class PageReader {
 public:
  virtual ~PageReader() = default;
  // Reads `n` page ranges; prepare(i) says which, and done(i, data, res) gets the bytes
  // (page-aligned buffer) and the read's result (bytes, or -errno). Stops at the first non-OK
  // status done returns. Reads may complete in any order.
  using Prepare = std::function<PageRead(size_t)>;
  using Done = std::function<Status(size_t, const uint8_t*, ssize_t)>;
  virtual Status Run(size_t n, const Prepare& prepare, const Done& done) = 0;
  virtual bool uses_io_uring() const = 0;
};

// An io_uring reader when `try_io_uring` and liburing and the kernel allow, else a pread one.
// `max_len` bounds one read's bytes (a multiple of the page).
std::unique_ptr<PageReader> MakePageReader(int queue_depth, size_t max_len, bool try_io_uring);

// Whether this build has io_uring support at all (liburing found at configure time).
bool BuiltWithIoUring();

}  // namespace shardrec::store
