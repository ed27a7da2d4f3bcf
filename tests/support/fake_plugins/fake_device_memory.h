// The "device memory" of the fake embedding plugin: host memory handed out by its device_alloc,
// with a registry of the live blocks, so every entry can refuse a pointer that is not device
// memory (a host buffer, a freed block, a range running past its block). That is the host/device
// confusion a GPU would punish with an illegal-address fault or silent garbage; the fake turns it
// into a status naming the argument, on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "impl/core/status.h"

namespace shardrec::fake {

class DeviceMemory {
 public:
  void* Alloc(size_t bytes) {
    if (bytes == 0) return nullptr;
    auto* p = new uint8_t[bytes];
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[reinterpret_cast<uintptr_t>(p)] = bytes;
    return p;
  }

  // False for a pointer that is not a live block's start (nothing is freed then).
  bool Free(void* p) {
    if (p == nullptr) return true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
      if (it == blocks_.end()) return false;
      blocks_.erase(it);
    }
    delete[] static_cast<uint8_t*>(p);
    return true;
  }

  // kInvalidArgument when p lies inside a live block: the host side of a copy must be host memory
  // (a device pointer there would be a wrong copy direction on a GPU).
  Status CheckHost(const void* p, const std::string& what) const {
    if (p == nullptr) return Status::Ok();
    if (Check(p, 0, what).ok())
      return Status::InvalidArgument("fake device: ", what, " (", p,
                                     ") is device memory, expected host memory");
    return Status::Ok();
  }

  // kOk when [p, p + bytes) lies inside one live block; bytes == 0 checks only p (a null p with
  // bytes == 0 is an absent optional argument and passes).
  Status Check(const void* p, size_t bytes, const std::string& what) const {
    if (p == nullptr && bytes == 0) return Status::Ok();
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.upper_bound(a);
    if (it != blocks_.begin()) {
      --it;
      const uintptr_t end = it->first + it->second;
      if (a >= it->first && a < end && (bytes == 0 || bytes <= end - a)) return Status::Ok();
    }
    return Status::InvalidArgument("fake device: ", what, " (", p, ", ", bytes,
                                   " bytes) is not inside a live device allocation");
  }

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> blocks_;
};

}  // namespace shardrec::fake
