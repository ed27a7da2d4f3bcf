// HostArena over anonymous mmap: zero-filled by the kernel (no first pass over the memory), 2 MiB
// aligned by over-mapping and trimming, and advised for transparent huge pages.
#include "impl/core/host_arena.h"

#include <sys/mman.h>

#include <cstdint>
#include <utility>

namespace shardrec {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

HostArena::~HostArena() { Release(); }

HostArena::HostArena(HostArena&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

HostArena& HostArena::operator=(HostArena&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void HostArena::Release() {
  if (mapped_ != 0) munmap(data_, mapped_);
  data_ = nullptr;
  bytes_ = 0;
  mapped_ = 0;
}

Status HostArena::Allocate(size_t bytes, bool huge_pages) {
  Release();
  if (bytes == 0) return Status::Ok();
  const size_t size = RoundUp(bytes, kHugePage);
  if (size < bytes) return Status::OutOfMemory("arena of ", bytes, " bytes overflows");
  // Over-map by one huge page and trim both ends, so the block starts on a 2 MiB boundary.
  const size_t span = size + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    return Status::OutOfMemory("cannot map ", bytes, " bytes of host memory for tables");
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(start, kHugePage);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + span;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  data_ = reinterpret_cast<void*>(aligned);
  mapped_ = size;
  bytes_ = bytes;
#ifdef MADV_HUGEPAGE
  if (huge_pages) madvise(data_, mapped_, MADV_HUGEPAGE);
#else
  (void)huge_pages;
#endif
  return Status::Ok();
}

}  // namespace shardrec
