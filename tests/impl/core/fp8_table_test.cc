// The FP8 decode tables (impl/core/fp8_table.h) against DecodeFp8 (fp8.h, itself tested against
// the formats' definitions): every code of both kinds, bit for bit, NaNs with their sign.
#include "impl/core/fp8_table.h"

#include <gtest/gtest.h>

#include <cstring>

#include "impl/core/fp8.h"

namespace shardrec {
namespace {

uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Fp8Table, EveryCodeEqualsDecodeFp8) {
  for (int k = 0; k < 2; ++k)
    for (int c = 0; c < 256; ++c)
      EXPECT_EQ(BitsOf(kFp8Decode.v[k][c]),
                BitsOf(DecodeFp8(static_cast<Fp8Kind>(k), static_cast<uint8_t>(c))))
          << "kind " << k << " code " << c;
}

}  // namespace
}  // namespace shardrec
