// The size of a buffer a caller's counts describe, refused when no buffer could be that large.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace shardrec::core {

// count x width items of item_bytes bytes each, or nullopt when that many bytes wrap around
// size_t or exceed PTRDIFF_MAX (no object is larger, and pointer differences over it are
// undefined). Counts come from callers (a sequence's values, a delta's rows), so a product that
// wraps would otherwise size a small buffer that a loop over the real counts writes past.
inline std::optional<size_t> BufferItems(size_t count, size_t width, size_t item_bytes) {
  size_t items = 0, bytes = 0;
  if (__builtin_mul_overflow(count, width, &items) ||
      __builtin_mul_overflow(items, item_bytes, &bytes) || bytes > size_t{PTRDIFF_MAX})
    return std::nullopt;
  return items;
}

}  // namespace shardrec::core
