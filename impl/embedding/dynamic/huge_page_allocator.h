// An allocator that asks Linux for transparent huge pages for large arrays, so the random
// accesses of a dynamic shard's index and per-slot records do not also miss the TLB.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace shardrec::embedding::dynamic {

// A std::allocator replacement: arrays of at least one huge page (2 MiB) are 2 MiB-aligned and
// advised MADV_HUGEPAGE (many systems run THP in "madvise" mode, where nothing else gets them);
// smaller ones come from
// operator new at T's alignment. The advice is only a hint: without THP the memory is
// ordinary and behaves the same. The contents and every result are unchanged; only speed.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{1} << 21;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT(google-explicit-constructor)

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHuge) return static_cast<T*>(::operator new (bytes, std::align_val_t{alignof(T)}));
    // Not rounded up to whole huge pages: the tail that does not fill one keeps small pages, so
    // no memory is added beyond the array (metadata_bytes stays exact).
    void* p = nullptr;
    if (posix_memalign(&p, kHuge, bytes) != 0) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, bytes, MADV_HUGEPAGE);  // a refusal leaves ordinary pages: nothing to handle
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHuge) {
      ::operator delete (p, std::align_val_t{alignof(T)});
    } else {
      std::free(p);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

// A vector whose large buffers sit on huge pages.
template <typename T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace shardrec::embedding::dynamic
