#include "impl/core/host_memory.h"

#include <cstdio>
#include <limits>
#include <mutex>
#include <utility>

namespace shardrec {

std::optional<uint64_t> ParseMemAvailable(const std::string& meminfo) {
  const std::string key = "MemAvailable:";
  size_t pos = 0;
  while (pos < meminfo.size()) {
    const size_t eol = meminfo.find('\n', pos);
    const size_t end = eol == std::string::npos ? meminfo.size() : eol;
    if (meminfo.compare(pos, key.size(), key) == 0) {
      size_t i = pos + key.size();
      while (i < end && meminfo[i] == ' ') ++i;
      uint64_t kb = 0;
      bool digits = false;
      for (; i < end && meminfo[i] >= '0' && meminfo[i] <= '9'; ++i) {
        const uint64_t d = static_cast<uint64_t>(meminfo[i] - '0');
        if (kb > (std::numeric_limits<uint64_t>::max() / 1024 - d) / 10) return std::nullopt;
        kb = kb * 10 + d;
        digits = true;
      }
      if (!digits || meminfo.compare(i, 3, " kB") != 0) return std::nullopt;
      return kb * 1024;
    }
    pos = end + 1;
  }
  return std::nullopt;
}

std::optional<uint64_t> AvailableHostMemory() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return std::nullopt;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  return ParseMemAvailable(text);
}

namespace {

std::mutex claims_mu;
uint64_t claimed = 0;  // outstanding claims of this process, guarded by claims_mu

}  // namespace

HostMemoryClaim::HostMemoryClaim(HostMemoryClaim&& other) noexcept
    : bytes_(std::exchange(other.bytes_, 0)) {}

HostMemoryClaim& HostMemoryClaim::operator=(HostMemoryClaim&& other) noexcept {
  if (this != &other) {
    Release();
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Status HostMemoryClaim::Claim(uint64_t bytes, const std::string& what) {
  Release();
  const auto available = AvailableHostMemory();
  std::lock_guard<std::mutex> lock(claims_mu);
  if (available) {
    const uint64_t free = *available > claimed ? *available - claimed : 0;
    if (bytes > free)
      return Status::OutOfMemory(what, " need ", bytes, " bytes but the host has only ", *available,
                                 " bytes available (MemAvailable)",
                                 claimed > 0 ? StrCat(", of which ", claimed,
                                                      " are claimed by collections being created "
                                                      "in this process")
                                             : std::string());
  }
  claimed += bytes;
  bytes_ = bytes;
  return Status::Ok();
}

void HostMemoryClaim::Release() {
  if (bytes_ == 0) return;
  std::lock_guard<std::mutex> lock(claims_mu);
  claimed -= bytes_;
  bytes_ = 0;
}

}  // namespace shardrec
