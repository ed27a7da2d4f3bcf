// What the libFuzzer targets share: a check that aborts with the library's last error (so the
// fuzzer records the input as a crash), and a reader of the fuzz input that yields zeros past
// its end, so a short input means defaults rather than an early return.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "shardrec/shardrec.h"

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   shardrec_last_error());                                              \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

namespace shardrec::fuzz {

struct ByteReader {
  const uint8_t* p;
  size_t n;
  uint8_t Byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

}  // namespace shardrec::fuzz
