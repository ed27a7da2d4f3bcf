// Device and stream handles. CUDA-free: a stream is an opaque pointer (a cudaStream_t inside
// the plugin), so every impl header compiles without the CUDA toolkit.
#pragma once

#include <cstdint>
#include <string>

namespace shardrec {

struct Device {
  enum class Kind : int32_t { kHost = 0, kCuda = 1 };
  Kind kind = Kind::kHost;
  int32_t index = 0;

  static Device Host() { return {}; }
  static Device Cuda(int32_t index) { return {Kind::kCuda, index}; }
  bool is_host() const { return kind == Kind::kHost; }
  bool is_cuda() const { return kind == Kind::kCuda; }
  bool operator==(const Device&) const = default;
  std::string ToString() const {
    return is_host() ? std::string("host") : "cuda:" + std::to_string(index);
  }
};

// A cudaStream_t in disguise; nullptr is the default stream. Host operations ignore it.
using Stream = void*;

}  // namespace shardrec
