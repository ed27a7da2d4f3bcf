// The pread reader, and the factory that prefers io_uring (page_reader_uring.cc) when built in.
#include "impl/store/page_reader.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>

namespace shardrec::store {

// Defined in page_reader_uring.cc when liburing is built in; null when the ring cannot be made.
std::unique_ptr<PageReader> MakeUringReader(int queue_depth, size_t max_len);

namespace {

class PreadReader : public PageReader {
 public:
  explicit PreadReader(size_t max_len) : max_len_(max_len) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, max_len) != 0) p = nullptr;
    buf_.reset(static_cast<uint8_t*>(p));
  }
  Status Run(size_t n, const Prepare& prepare, const Done& done) override {
    if (!buf_) return Status::OutOfMemory("store: no read buffer of ", max_len_, " bytes");
    for (size_t i = 0; i < n; ++i) {
      const PageRead r = prepare(i);
      size_t got = 0;
      ssize_t res = 0;
      while (got < r.len) {
        const ssize_t k =
            ::pread(r.fd, buf_.get() + got, r.len - got, static_cast<off_t>(r.offset + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
          res = k < 0 ? -errno : static_cast<ssize_t>(got);
          break;
        }
        got += static_cast<size_t>(k);
        res = static_cast<ssize_t>(got);
      }
      Status s = done(i, buf_.get(), res);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }
  bool uses_io_uring() const override { return false; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { free(p); }
  };
  size_t max_len_;
  std::unique_ptr<uint8_t, Free> buf_;
};

}  // namespace

std::unique_ptr<PageReader> MakePageReader(int queue_depth, size_t max_len, bool try_io_uring) {
  if (try_io_uring && BuiltWithIoUring()) {
    if (auto r = MakeUringReader(queue_depth, max_len)) return r;
  }
  return std::make_unique<PreadReader>(max_len);
}

#ifndef SHARDREC_HAVE_LIBURING
bool BuiltWithIoUring() { return false; }
std::unique_ptr<PageReader> MakeUringReader(int, size_t) { return nullptr; }
#endif

}  // namespace shardrec::store
