// A cache prefetch the compiler keeps: GCC 12 at -O3 dropped the __builtin_prefetch of the slot
// index's line in DynamicShard::Translate (no prefetch instruction for it in the object), so
// the pipeline that was meant to hide the index's cache misses had no first stage.
#pragma once

namespace shardrec::embedding::dynamic {

// Asks the cache for the line holding `p` (for reading; kept in every level).
inline void PrefetchLine(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

}  // namespace shardrec::embedding::dynamic
