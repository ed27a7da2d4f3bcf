// The MemAvailable reading that guards table arenas against the OOM killer.
#include "impl/core/host_memory.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace shardrec {
namespace {

TEST(CoreHostMemory, ParsesMemAvailableInKilobytes) {
  const std::string text =
      "MemTotal:       24000000 kB\nMemFree:         1000000 kB\n"
      "MemAvailable:   12345678 kB\nBuffers:          100 kB\n";
  ASSERT_TRUE(ParseMemAvailable(text).has_value());
  EXPECT_EQ(*ParseMemAvailable(text), uint64_t{12345678} * 1024);
  EXPECT_EQ(*ParseMemAvailable("MemAvailable: 0 kB"), 0u);
}

TEST(CoreHostMemory, AbsentOrMalformedIsUnknown) {
  EXPECT_FALSE(ParseMemAvailable("").has_value());
  EXPECT_FALSE(ParseMemAvailable("MemTotal: 5 kB\n").has_value());
  EXPECT_FALSE(ParseMemAvailable("MemAvailable: kB\n").has_value());
  EXPECT_FALSE(ParseMemAvailable("MemAvailable: 12 MB\n").has_value());
  EXPECT_FALSE(ParseMemAvailable("MemAvailable: 99999999999999999999999 kB\n").has_value());
  EXPECT_FALSE(ParseMemAvailable("XMemAvailable: 5 kB\n").has_value());
}

TEST(CoreHostMemory, ThisHostReportsSomething) {
  const auto available = AvailableHostMemory();
  ASSERT_TRUE(available.has_value()) << "Linux reports MemAvailable since 3.14";
  EXPECT_GT(*available, uint64_t{1} << 20);
}

// Two claims of 60 % of what the host has: each alone would pass a plain MemAvailable check, the
// second must see the first (ranks created as threads at once); released, it fits again.
TEST(CoreHostMemory, ClaimsOfOneProcessAddUp) {
  const auto available = AvailableHostMemory();
  ASSERT_TRUE(available.has_value());
  const uint64_t share = *available / 10 * 6;
  HostMemoryClaim first, second;
  ASSERT_TRUE(first.Claim(share, "first").ok());
  EXPECT_EQ(first.bytes(), share);
  const Status s = second.Claim(share, "second");
  EXPECT_EQ(s.code(), Code::kOutOfMemory);
  EXPECT_NE(s.message().find("claimed by collections being created"), std::string::npos)
      << s.message();
  EXPECT_EQ(second.bytes(), 0u);
  HostMemoryClaim moved = std::move(first);  // a move keeps one claim, not two
  EXPECT_EQ(first.bytes(), 0u);
  EXPECT_FALSE(second.Claim(share, "second").ok());
  moved.Release();
  EXPECT_TRUE(second.Claim(share, "second").ok());
  EXPECT_EQ(second.Claim(*available * 2, "huge").code(), Code::kOutOfMemory);
  EXPECT_EQ(second.bytes(), 0u);  // a failed claim leaves nothing claimed
}

}  // namespace
}  // namespace shardrec
