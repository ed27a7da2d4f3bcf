// HostArena: 2 MiB aligned, zero-filled, movable, and empty for zero bytes.
#include "impl/core/host_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

namespace shardrec {
namespace {

TEST(CoreHostArena, AlignedZeroFilledAndMovable) {
  for (bool huge : {true, false}) {
    HostArena a;
    ASSERT_TRUE(a.Allocate((size_t{5} << 20) + 123, huge).ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % (size_t{2} << 20), 0u);
    const auto* p = static_cast<const uint8_t*>(a.data());
    uint64_t sum = 0;
    for (size_t i = 0; i < a.bytes(); i += 4096) sum += p[i];
    EXPECT_EQ(sum, 0u);
    a.as<float>()[7] = 3.0f;
    HostArena b = std::move(a);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(b.as<float>()[7], 3.0f);
    ASSERT_TRUE(b.Allocate(0, huge).ok());
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_EQ(b.bytes(), 0u);
  }
}

TEST(CoreHostArena, ImpossibleSizesAreOutOfMemory) {
  HostArena a;
  EXPECT_EQ(a.Allocate(~size_t{0} - 10, true).code(), Code::kOutOfMemory);
  EXPECT_EQ(a.data(), nullptr);
}

}  // namespace
}  // namespace shardrec
