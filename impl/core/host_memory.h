// How much memory this host can still give without swapping or the OOM killer stepping in.
// Anonymous mappings succeed far beyond it under Linux's default overcommit, and the failure
// comes later as a killed process when the pages are first written; callers about to write a
// large block check it first and refuse with a clear error instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "impl/core/status.h"

namespace shardrec {

// MemAvailable from /proc/meminfo, in bytes; nullopt where the kernel does not report it (not
// Linux, /proc not mounted), in which case callers proceed without the check.
std::optional<uint64_t> AvailableHostMemory();

// Parses the MemAvailable line of a /proc/meminfo text (kB) into bytes; nullopt if absent or
// malformed. Split out so it is testable on any text.
std::optional<uint64_t> ParseMemAvailable(const std::string& meminfo);

// A share of this host's available memory set aside for a block that is about to be written.
// MemAvailable only drops once pages are written, so two collections created at once by threads
// of one process (ranks as threads) would each see the whole of it: a claim counts the other
// claims of the process that are not released yet. Release once the block is written (its pages
// then show in MemAvailable), or let the destructor do it. Move-only; thread-safe.
class HostMemoryClaim {
 public:
  HostMemoryClaim() = default;
  ~HostMemoryClaim() { Release(); }
  HostMemoryClaim(HostMemoryClaim&& other) noexcept;
  HostMemoryClaim& operator=(HostMemoryClaim&& other) noexcept;
  HostMemoryClaim(const HostMemoryClaim&) = delete;
  HostMemoryClaim& operator=(const HostMemoryClaim&) = delete;

  // Claims `bytes` (replacing any claim *this held): kOutOfMemory, with `what` and the figures in
  // the message, when MemAvailable less the process's outstanding claims is smaller. Without a
  // MemAvailable figure (AvailableHostMemory is nullopt) the claim is granted.
  Status Claim(uint64_t bytes, const std::string& what);
  void Release();
  uint64_t bytes() const { return bytes_; }

 private:
  uint64_t bytes_ = 0;
};

}  // namespace shardrec
