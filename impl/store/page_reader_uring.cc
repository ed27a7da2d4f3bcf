// The io_uring reader (Debian liburing): up to queue_depth reads in flight, each into a buffer
// of its own; as each completes the next read takes its buffer, so the queue stays full.
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <sys/uio.h>

#include <vector>

#include "impl/store/page_reader.h"

namespace shardrec::store {

bool BuiltWithIoUring() { return true; }

namespace {

class UringReader : public PageReader {
 public:
  UringReader() = default;
  ~UringReader() override {
    if (ring_ok_) io_uring_queue_exit(&ring_);
    free(bufs_);
  }

  bool Init(int queue_depth, size_t max_len) {
    depth_ = static_cast<unsigned>(queue_depth);
    max_len_ = max_len;
    void* p = nullptr;
    if (posix_memalign(&p, 4096, depth_ * max_len_) != 0) return false;
    bufs_ = static_cast<uint8_t*>(p);
    // io_uring_queue_init returns -errno: ENOSYS (old kernel), EPERM (seccomp, sysctl
    // kernel.io_uring_disabled), ENOMEM (locked-memory limits): the caller falls back to pread.
    ring_ok_ = io_uring_queue_init(depth_, &ring_, 0) == 0;
    if (!ring_ok_) return false;
    // The buffers registered once: an O_DIRECT read into them skips pinning its page per read.
    // Refused (locked-memory limits), the reads go into the same buffers unregistered.
    iovec all{bufs_, depth_ * max_len_};
    fixed_ = io_uring_register_buffers(&ring_, &all, 1) == 0;
    return true;
  }

  Status Run(size_t n, const Prepare& prepare, const Done& done) override {
    std::vector<size_t> owner(depth_);  // which request a buffer serves
    std::vector<unsigned> free_bufs;
    for (unsigned b = depth_; b > 0; --b) free_bufs.push_back(b - 1);
    size_t next = 0, inflight = 0;
    Status first_error;
    while (next < n || inflight > 0) {
      unsigned queued = 0;
      while (next < n && !free_bufs.empty() && first_error.ok()) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) break;
        const unsigned b = free_bufs.back();
        free_bufs.pop_back();
        const PageRead r = prepare(next);
        if (fixed_) {
          io_uring_prep_read_fixed(sqe, r.fd, bufs_ + b * max_len_, r.len, r.offset, 0);
        } else {
          io_uring_prep_read(sqe, r.fd, bufs_ + b * max_len_, r.len, r.offset);
        }
        io_uring_sqe_set_data64(sqe, b);
        owner[b] = next++;
        ++queued;
      }
      if (queued > 0 || inflight > 0) {
        const int rc = io_uring_submit_and_wait(&ring_, inflight + queued > 0 ? 1 : 0);
        if (rc < 0 && rc != -EINTR) {
          // The ring itself failed (not one read): the Get fails with kIo rather than guess
          // which reads were taken.
          return Status::Io("store: io_uring submit failed: ", rc);
        }
        inflight += queued;
      }
      io_uring_cqe* cqe = nullptr;
      unsigned head = 0, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        const unsigned b = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
        ++seen;
        --inflight;
        free_bufs.push_back(b);
        if (first_error.ok()) {
          Status s = done(owner[b], bufs_ + b * max_len_, cqe->res);
          if (!s.ok()) first_error = s;
        }
      }
      io_uring_cq_advance(&ring_, seen);
      if (!first_error.ok() && inflight == 0) return first_error;
      if (!first_error.ok()) next = n;  // drain what is in flight, queue nothing more
    }
    return first_error;
  }
  bool uses_io_uring() const override { return true; }

 private:
  io_uring ring_{};
  bool ring_ok_ = false;
  bool fixed_ = false;
  unsigned depth_ = 0;
  size_t max_len_ = 0;
  uint8_t* bufs_ = nullptr;
};

}  // namespace

std::unique_ptr<PageReader> MakeUringReader(int queue_depth, size_t max_len) {
  auto r = std::make_unique<UringReader>();
  if (!r->Init(queue_depth, max_len)) return nullptr;
  return r;
}

}  // namespace shardrec::store
