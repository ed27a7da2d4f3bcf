// The MemAvailable reading that guards table arenas against the OOM killer.
#include "impl/core/host_memory.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace shardrec
