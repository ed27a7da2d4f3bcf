#include "impl/comm/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "impl/core/check.h"

namespace shardrec::comm::shm {

namespace {

Status Errno(const char* what, const std::string& name) {
  return Status::Io(what, " of shared-memory segment ", name, ": ", std::strerror(errno));
}

Status Map(int fd, size_t bytes, const std::string& name, uint8_t** out) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Errno("mmap", name);
  *out = static_cast<uint8_t*>(p);
  return Status::Ok();
}

}  // namespace

Status Segment::Create(size_t bytes, std::string* name, std::unique_ptr<Segment>* out) {
  SR_CHECK(bytes > 0 && name != nullptr && out != nullptr);
  std::random_device rd;
  const uint64_t tag = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/shardrec-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(tag));
  const std::string n = buf;
  const int fd = ::shm_open(n.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("shm_open", n);
  uint8_t* data = nullptr;
  // Reserve the pages now: a tmpfs that fills later (a container's 64 MiB /dev/shm) would
  // otherwise deliver SIGBUS on first touch in the middle of an exchange. A refusal here
  // keeps the group on the wrapped communicator instead.
  Status s = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? Status::Ok() : Errno("ftruncate", n);
  if (s.ok()) {
    const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err != 0) {
      errno = err;
      s = Errno("posix_fallocate", n);
    }
  }
  if (s.ok()) s = Map(fd, bytes, n, &data);
  ::close(fd);
  if (!s.ok()) {
    ::shm_unlink(n.c_str());
    return s;
  }
  *name = n;
  out->reset(new Segment(data, bytes, n, /*linked=*/true));
  return Status::Ok();
}

Status Segment::Open(const std::string& name, size_t bytes, std::unique_ptr<Segment>* out) {
  SR_CHECK(bytes > 0 && out != nullptr);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return Errno("shm_open", name);
  struct stat st {};
  Status s;
  uint8_t* data = nullptr;
  if (::fstat(fd, &st) != 0) {
    s = Errno("fstat", name);
  } else if (static_cast<size_t>(st.st_size) != bytes) {
    s = Status::Io("shared-memory segment ", name, " holds ", st.st_size, " bytes, not ", bytes);
  } else {
    s = Map(fd, bytes, name, &data);
  }
  ::close(fd);
  if (!s.ok()) return s;
  out->reset(new Segment(data, bytes, name, /*linked=*/false));
  return Status::Ok();
}

void Segment::Unlink() {
  if (!linked_) return;
  ::shm_unlink(name_.c_str());
  linked_ = false;
}

Segment::~Segment() {
  Unlink();
  ::munmap(data_, size_);
}

}  // namespace shardrec::comm::shm
