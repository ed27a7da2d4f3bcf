// Software prefetch of every 64-byte line of a row, for kernels that gather rows in an order no
// hardware prefetcher can follow. Internal linkage (an anonymous namespace), so the kernels built
// for wider instruction sets (embedding/kernels/isa) may include it too.
//
// Each loop carries an empty volatile asm: GCC 12 treats __builtin_prefetch as free of side
// effects and, in some inlining contexts (a lambda, a helper taking a struct), deletes a loop that
// does nothing else -- which silently removed the fused backward's weight-row prefetches.
#pragma once

#include <cstdint>

namespace shardrec::core {
namespace {

inline void PrefetchLines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) {
    __builtin_prefetch(c + off, 0, 3);
    asm volatile("");
  }
}

// PrefetchLines of every line holding a byte of [p, p + bytes): a row that does not start on a
// line covers one line more than bytes / 64 (a caller's gradient row 16 bytes into a line spans
// three lines for 128 bytes; its third one, never asked for, was a miss on every row).
inline void PrefetchSpan(const void* p, int64_t bytes) {
  const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const auto end = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes);
  for (uintptr_t a = first; a < end; a += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 3);
    asm volatile("");
  }
}

inline void PrefetchLinesForWrite(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) {
    __builtin_prefetch(c + off, 1, 3);
    asm volatile("");
  }
}

// Asks the cache for the line holding `p` (for reading; kept in every level), as an instruction
// the compiler cannot drop: GCC 12 at -O3 removed the __builtin_prefetch of the dynamic tables'
// slot index line in DynamicShard::Translate (no prefetch instruction for it in the object), so
// the pipeline meant to hide the index's cache misses had no first stage.
inline void PrefetchLine(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 0, 3);
  asm volatile("");
#endif
}

}  // namespace
}  // namespace shardrec::core
