// An ordered map from start to end address; lookups take the range starting at or before p.
#include "impl/dense/device_registry.h"

#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>

namespace shardrec::dense {
namespace {

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, uintptr_t> ranges;  // begin -> end
};

Registry& Get() {
  static Registry* r = new Registry;  // never destroyed: used from destructors at exit
  return *r;
}

}  // namespace

void RegisterDeviceRange(const void* p, size_t bytes) {
  if (p == nullptr) return;
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto b = reinterpret_cast<uintptr_t>(p);
  r.ranges[b] = b + (bytes > 0 ? bytes : 1);
}

void UnregisterDeviceRange(const void* p) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  r.ranges.erase(reinterpret_cast<uintptr_t>(p));
}

bool IsKnownDevicePointer(const void* p) {
  if (p == nullptr) return false;
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto v = reinterpret_cast<uintptr_t>(p);
  auto it = r.ranges.upper_bound(v);
  if (it == r.ranges.begin()) return false;
  --it;
  return v < it->second;
}

}  // namespace shardrec::dense
