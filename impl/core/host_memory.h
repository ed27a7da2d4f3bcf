// How much memory this host can still give without swapping or the OOM killer stepping in.
// Anonymous mappings succeed far beyond it under Linux's default overcommit, and the failure
// comes later as a killed process when the pages are first written; callers about to write a
// large block check it first and refuse with a clear error instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardrec {

// MemAvailable from /proc/meminfo, in bytes; nullopt where the kernel does not report it (not
// Linux, /proc not mounted), in which case callers proceed without the check.
std::optional<uint64_t> AvailableHostMemory();

// Parses the MemAvailable line of a /proc/meminfo text (kB) into bytes; nullopt if absent or
// malformed. Split out so it is testable on any text.
std::optional<uint64_t> ParseMemAvailable(const std::string& meminfo);

}  // namespace shardrec
